"""The level table: every checkpoint level, one record each, and everything callers ask of a level.

======  ==========  =======  =========================  =================================================
Level   Name        Root     Storage                    Survives the loss of nodes
======  ==========  =======  =========================  =================================================
1       local       local    :class:`LocalLevel`        none lost
2       partner     local    :class:`PartnerLevel`      no lost rank's partner lost too
3       encoded     local    :class:`EncodedLevel`      no group lost more members than its code repairs
4       pfs         global   :class:`PFSLevel`          always
======  ==========  =======  =========================  =================================================

A :class:`LevelSpec` carries what code used to test level numbers for: where the level's root is (node-local
``ckpt_dir`` or global ``glbl_dir``), its storage class, whether a checkpoint complete at it survives the
loss of given ranks' nodes (:func:`survives_loss`), its configuration keys and their defaults
(:func:`interval`, :func:`inline`), whether a checkpoint at it is written straight from the buffers
(:func:`primary_level`), whether it needs L2/L3 groups, its place in the recovery order, and the module
holding its pipeline steps (``steps``: a module of :mod:`ftkit.checkpoint.levels` or any importable module
with a ``LEVEL``; the storage layer never imports it, :mod:`ftkit.checkpoint.levels` does).

Callers iterate the table (:func:`specs`, :func:`numbers`, :func:`recovery_order`) or ask a record
(:func:`spec`); no code outside a level's own modules tests a level number. A new level is one module (its
storage class, if the built-ins do not fit, and its ``LEVEL``) and one :func:`register_level` call, made
explicitly by the program before the :class:`~ftkit.Checkpointer` (and by its heads, when ``head = 1``):
nothing registers itself at import time. The four built-in levels are the lines of :data:`_BUILTIN` below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StorageError
from .format.container import DEFAULT_CHUNK
from .groupcode.erasure import EncodedLevel
from .groupcode.partner_copy import PartnerLevel
from .placement.global_dir import PFSLevel
from .placement.level_storage import StorageLevel
from .placement.node_local import LocalLevel

if TYPE_CHECKING:
    from ..topology import Topology

__all__ = ["LevelSpec", "LOCAL", "GLOBAL", "register_level", "spec", "specs", "numbers", "recovery_order",
           "node_local", "describe", "survives_loss", "interval", "inline", "primary_level", "level_root",
           "make_level", "LEVEL_CLASSES"]

#: Root kinds: node-local (``ckpt_dir``, lost with the node) or global (``glbl_dir``, survives any node).
LOCAL, GLOBAL = "local", "global"

#: ``survives(topology, lost_ranks, l3_code)``: whether a checkpoint complete at the level is still
#: recoverable when the node-local files of ``lost_ranks`` are gone (``lost_ranks`` is never empty).
Survives = Callable[["Topology", frozenset[int], str], bool]


@dataclass(frozen=True)
class LevelSpec:
    """One level of the table.

    Attributes
    ----------
    number, name
        FTI's level number (the manifest's key) and a short name for messages.
    storage
        The :class:`~ftkit.storage.placement.level_storage.StorageLevel` class keeping a rank's file at this
        level.
    scope
        :data:`LOCAL` (files on the rank's node) or :data:`GLOBAL` (files every node reaches).
    survives
        The node-loss rule (see :data:`Survives`).
    steps
        Module holding the level's pipeline steps (a ``LEVEL``: :class:`ftkit.checkpoint.contract.Level`).
    interval_key, inline_key
        Configuration keys of the level's ``snapshot()`` interval (``ckpt_l<n>``) and of whether its
        post-processing runs inside the checkpoint call (``inline_l<n>``); None: not configurable, the
        default below holds.
    interval_default, inline_default
        The values without a key.
    differential_key
        Configuration key of a second interval, of differential checkpoints at this level (FTI's ``dcp_l4``,
        counted with ``enable_dcp = 1``); None: none.
    direct
        Whether a checkpoint requested at this level is written straight from the buffers into it (the
        *primary* level) under a configuration; None: never (it is post-processed from the base level's file).
    needs_groups
        Whether the level needs L2/L3 groups (``group_size >= 2``).
    order
        Place in the recovery order (cheapest first; ties keep the level numbers' order).
    root
        ``root(ckpt_dir, glbl_dir)``: the level's root directory; None: ``ckpt_dir`` or ``glbl_dir`` by
        ``scope``.
    title
        What the level is, for messages (default: ``name``).
    """

    number: int
    name: str
    storage: type[StorageLevel]
    scope: str
    survives: Survives
    steps: str
    interval_key: str | None = None
    inline_key: str | None = None
    interval_default: int = 0
    inline_default: bool = True
    differential_key: str | None = None
    direct: Callable[[Any], bool] | None = None
    needs_groups: bool = False
    order: float = 0.0
    root: Callable[[Path, Path], Path] | None = None
    title: str = ""

    @property
    def node_local(self) -> bool:
        """Whether the level's files live on the rank's node (lost with it)."""
        return self.scope == LOCAL


# -- the node-loss rules of the built-in levels -------------------------------------------------------------

def _nothing_lost(topology: Topology, lost: frozenset[int], l3_code: str) -> bool:
    return False


def _partner_alive(topology: Topology, lost: frozenset[int], l3_code: str) -> bool:
    return bool(topology.groups) and all(topology.partner(r) not in lost for r in lost)


def _group_decodes(topology: Topology, lost: frozenset[int], l3_code: str) -> bool:
    # RS(k, k) repairs k of 2k pieces; XOR one member.
    return bool(topology.groups) and all(
        len(lost.intersection(g)) <= (len(g) // 2 if l3_code == "rs" else 1) for g in topology.groups)


def _always(topology: Topology, lost: frozenset[int], l3_code: str) -> bool:
    return True


def _inline_pfs(config: Any) -> bool:
    # Inline L4 writes from the buffers (compressed too: format.write_compressed); dCP works from the L1 file.
    return bool(config.inline_l4) and not config.enable_dcp


_CKPT = "ftkit.checkpoint.levels."
_BUILTIN = (
    LevelSpec(1, "local", LocalLevel, LOCAL, _nothing_lost, _CKPT + "local", "ckpt_l1", None,
              direct=lambda config: True, order=1),
    LevelSpec(2, "partner", PartnerLevel, LOCAL, _partner_alive, _CKPT + "partner", "ckpt_l2", "inline_l2",
              needs_groups=True, order=2),
    LevelSpec(3, "encoded", EncodedLevel, LOCAL, _group_decodes, _CKPT + "encoded", "ckpt_l3", "inline_l3",
              needs_groups=True, order=3, title="Reed-Solomon/XOR group"),
    LevelSpec(4, "pfs", PFSLevel, GLOBAL, _always, _CKPT + "pfs", "ckpt_l4", "inline_l4",
              differential_key="dcp_l4", direct=_inline_pfs, order=4, title="parallel file system"),
)

_TABLE: dict[int, LevelSpec] = {s.number: s for s in _BUILTIN}


def register_level(new: LevelSpec) -> LevelSpec:
    """Add level ``new`` to the table (idempotent for the same record); return it.

    Call it in every process of the job before the :class:`~ftkit.Checkpointer` is built, and in the
    offline tools' process before they read a run that used the level.

    Raises
    ------
    StorageError
        If the number or the name is taken by another level, or the number is not a positive int.
    """
    if isinstance(new.number, bool) or not isinstance(new.number, int) or new.number < 1:
        raise StorageError(f"level number {new.number!r}: a level number is an int >= 1")
    for old in _TABLE.values():
        if old != new and (old.number == new.number or old.name == new.name):
            raise StorageError(f"level {new.number} ({new.name!r}) clashes with level {old.number} "
                               f"({old.name!r}) of the table: choose another number and name")
    _TABLE[new.number] = new
    return new


def spec(number: int) -> LevelSpec:
    """The record of level ``number``.

    Raises
    ------
    StorageError
        If ``number`` is no level of the table.
    """
    try:
        return _TABLE[number]
    except (KeyError, TypeError):
        raise StorageError(f"level {number!r} is not available in this ftkit (levels: "
                           f"{describe()})") from None


def specs() -> tuple[LevelSpec, ...]:
    """Every level, by number."""
    return tuple(_TABLE[n] for n in sorted(_TABLE))


def describe() -> str:
    """The levels for a message: ``1 (local), 2 (partner), 3 (Reed-Solomon/XOR group), or 4 (parallel file
    system)``."""
    names = [f"{s.number} ({s.title or s.name})" for s in specs()]
    return ", ".join(names[:-1]) + f", or {names[-1]}" if len(names) > 1 else names[0]


def numbers() -> tuple[int, ...]:
    """Every level number, ascending."""
    return tuple(sorted(_TABLE))


def recovery_order() -> tuple[LevelSpec, ...]:
    """Every level in the order recovery tries them (cheapest first)."""
    return tuple(sorted(specs(), key=lambda s: (s.order or s.number, s.number)))


def node_local() -> tuple[int, ...]:
    """Numbers of the levels whose files live on the rank's node."""
    return tuple(s.number for s in specs() if s.node_local)


def survives_loss(number: int, topology: Topology, lost: Sequence[int] | frozenset[int],
                  l3_code: str) -> bool:
    """Whether a checkpoint complete at level ``number`` survives the loss of the ``lost`` ranks' nodes."""
    dead, record = frozenset(lost), _TABLE.get(number)
    if not dead:
        return True
    return record is not None and record.survives(topology, dead, l3_code)  # an unknown level: no promise


def interval(config: Any, number: int) -> int:
    """Level ``number``'s ``snapshot()`` interval in ``config`` (its key, else the record's default)."""
    s = spec(number)
    return int(getattr(config, s.interval_key)) if s.interval_key else s.interval_default


def inline(config: Any, number: int) -> bool:
    """Whether level ``number``'s post-processing runs inside the checkpoint call under ``config``."""
    s = spec(number)
    return bool(getattr(config, s.inline_key)) if s.inline_key else s.inline_default


def primary_level(config: Any, number: int) -> int:
    """The level a checkpoint requested at ``number`` is written to from the buffers: ``number`` itself
    when its record says so under ``config``, else the first level of the recovery order that always is."""
    s = spec(number)
    if s.direct is not None and s.direct(config):
        return number
    return next(b.number for b in recovery_order() if b.direct is not None and b.direct(config))


def level_root(level: int, ckpt_dir: Path, glbl_dir: Path) -> Path:
    """Root directory of ``level``: its record's ``root``, else ``ckpt_dir`` (local) or ``glbl_dir``
    (global)."""
    s = spec(level)
    if s.root is not None:
        return Path(s.root(Path(ckpt_dir), Path(glbl_dir)))
    return Path(ckpt_dir) if s.node_local else Path(glbl_dir)


def make_level(level: int, ckpt_dir: Path, glbl_dir: Path, exec_id: str, nodes: Sequence[int],
               chunk_bytes: int = DEFAULT_CHUNK) -> StorageLevel:
    """Build the storage of ``level`` for run ``exec_id`` with ranks placed on ``nodes``.

    Raises
    ------
    StorageError
        If no implementation is registered for ``level``.
    """
    return spec(level).storage(level_root(level, ckpt_dir, glbl_dir), exec_id, nodes, chunk_bytes=chunk_bytes)


class _Classes(Mapping[int, type[StorageLevel]]):
    """Level number → storage class, read live from the table."""

    def __getitem__(self, number: int) -> type[StorageLevel]:
        if number not in _TABLE:
            raise KeyError(number)
        return _TABLE[number].storage

    def __iter__(self) -> Iterator[int]:
        return iter(numbers())

    def __len__(self) -> int:
        return len(_TABLE)


#: Storage implementation of each level (a read-only view of the table).
LEVEL_CLASSES: Mapping[int, type[StorageLevel]] = _Classes()
