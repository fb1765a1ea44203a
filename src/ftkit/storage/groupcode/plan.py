"""The plans of a group's redundancy: which files of an L2 (:class:`PartnerPlan`) or L3 (:class:`GroupPlan`)
group survive, and what can be rebuilt from where.

Shared by the collective group operations (:mod:`ftkit.storage.groupcode.partner_copy`,
:mod:`ftkit.storage.groupcode.erasure`) and the offline repair (:mod:`ftkit.storage.groupcode.offline`),
through the engine
:mod:`ftkit.storage.repair.rebuild`, so both take the same decisions. For an encoded group:

* a parity file counts when its header and payload checksum are intact, it is its member's row of a group
  of this size, carries the expected tag, and agrees with the *majority parity header* of the group
  (:func:`majority_header`: the most common encoding among the intact parity headers, the first member's
  on a tie);
* a data file counts when its size and xxh3 digest are the ones recorded in that header.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError, FtkitError
from ...topology import partner_index, partner_source_index
from .._stream import file_digest, file_size
from ._collective import member_names
from .parity import ParityHeader, payload_offset_for, verify_parity

__all__ = ["CODES", "DEFAULT_MEMORY", "MAX_CHUNK", "GroupPlan", "PartnerPlan", "check_code", "rs_code",
           "prefetch_rs_code", "encoding_tag",
           "chunk_size_for", "parity_overhead", "xor_segment", "member_parity", "majority_header",
           "data_matches"]

#: Codes an encoded group can use.
CODES = ("rs", "xor")
#: Default bound (bytes) on the buffers one process uses while encoding or rebuilding a group.
DEFAULT_MEMORY = 48 << 20
#: Largest RS encoding chunk (bytes per member): bigger chunks only delay the start of the pipeline.
MAX_CHUNK = 4 << 20

PathLike = str | os.PathLike[str]


@functools.lru_cache(maxsize=16)
def _build_rs_code(n: int) -> Any:
    from ...codec import RSCode

    return RSCode(n, n)


#: Codes being prepared by :func:`prefetch_rs_code` (by group size), and the group sizes already built.
_PREFETCH: dict[int, threading.Thread] = {}
_BUILT: set[int] = set()
_PREFETCH_LOCK = threading.Lock()


def rs_code(n: int) -> Any:
    """The ``RSCode(n, n)`` of a group of ``n`` members (cached; waits for a prefetch of it in flight)."""
    with _PREFETCH_LOCK:
        t = _PREFETCH.pop(n, None)
    if t is not None:
        t.join()  # a local computation, no peer: it ends (an error in it is raised again just below)
    code = _build_rs_code(n)
    _BUILT.add(n)
    return code


def prefetch_rs_code(n: int) -> None:
    """Start preparing ``RSCode(n, n)`` (importing the codec, building its matrices) in a background thread,
    so that an encoding about to start (after the L1 write) finds it ready. Local; never raises."""
    with _PREFETCH_LOCK:
        if n in _PREFETCH or n in _BUILT:
            return
        t = threading.Thread(target=_quiet_build, args=(n,), name="ftkit-rs-prefetch", daemon=True)
        _PREFETCH[n] = t
        t.start()


def _quiet_build(n: int) -> None:
    try:
        _build_rs_code(n)
    except Exception:  # noqa: BLE001 - raised again by rs_code() in the caller's thread
        pass


def encoding_tag(exec_id: str, ckpt_id: int) -> str:
    """Identity recorded in the parity files of checkpoint ``ckpt_id`` of run ``exec_id``."""
    return f"{exec_id}/ckpt{ckpt_id}"


def check_code(code: str) -> None:
    """Raise ConfigError unless ``code`` is one of :data:`CODES`."""
    if code not in CODES:
        raise ConfigError(f"l3_code = {code!r}: allowed values are {', '.join(CODES)}")


def chunk_size_for(length: int, memory: int, slots: int, align: int = 4096) -> int:
    """Return the chunk size (bytes) that keeps ``slots`` buffers within ``memory`` bytes.

    The result is a multiple of ``align``, at least ``align``, and no larger than needed for ``length``.
    """
    z = max(align, (memory // max(slots, 1)) // align * align)
    return min(z, max(align, -(-length // align) * align))


def xor_segment(length: int, n: int) -> int:
    """Bytes of one XOR cell (and of one member's XOR parity) for data files of up to ``length`` bytes."""
    seg = -(-length // (n - 1)) if n > 1 else length
    return -(-seg // 8) * 8


def parity_overhead(code: str, sizes: Sequence[int]) -> int:
    """Return the parity bytes one member stores for a group with data files of ``sizes`` bytes."""
    check_code(code)
    big = max(sizes) if sizes else 0
    return big if code == "rs" else xor_segment(big, len(sizes))


def member_parity(path: PathLike, k: int, index: int, tag: str | None) -> ParityHeader | None:
    """Member ``index``'s intact parity header of a ``k``-member group carrying ``tag``; None otherwise.

    Missing, damaged, forged or foreign files all give None (the file is simply not counted); a header
    whose layout is not the one an encoding of this group writes counts as forged.
    """
    try:
        h = verify_parity(path)
    except (OSError, FtkitError):
        return None
    if h.k != k or h.index != index or (tag is not None and h.tag != tag):
        return None
    if h.payload_offset != payload_offset_for(k) or h.payload_length != parity_overhead(h.code, h.sizes):
        return None  # a forged or foreign header: not what an encoding of this group writes
    return h


def _key(h: ParityHeader) -> tuple[Any, ...]:
    return (h.code, h.sizes, h.digests, h.tag, h.payload_length)


def majority_header(headers: Sequence[ParityHeader | None]) -> ParityHeader | None:
    """The reference header: one of the most common encoding among ``headers`` (the first on a tie)."""
    keys = Counter(_key(h) for h in headers if h is not None)
    if not keys:
        return None
    best = max(keys.values())
    return next(h for h in headers if h is not None and keys[_key(h)] == best)


def data_matches(path: PathLike, ref: ParityHeader | None, index: int,
                 validate: Callable[[Path], bool] | None = None) -> bool:
    """Whether member ``index``'s data file counts (size and digest recorded in ``ref``).

    Without a reference header, ``validate`` decides (default: the file exists).
    """
    p = Path(path)
    if ref is None:
        return bool(validate(p)) if validate is not None else file_size(p) >= 0
    if file_size(p) != ref.sizes[index]:
        return False
    try:
        return file_digest(p) == ref.digests[index]
    except OSError:
        return False


@dataclass(frozen=True)
class GroupPlan:
    """What survives of an encoded group, as every member sees it after assessing it.

    ``header`` is the reference parity header (None when no parity file survives, so the data files can
    only be re-encoded if all of them are present).
    """

    code: str
    have_data: tuple[bool, ...]
    have_parity: tuple[bool, ...]
    header: ParityHeader | None

    @classmethod
    def from_headers(cls, code: str, headers: Sequence[ParityHeader | None],
                     have_data: Sequence[bool]) -> GroupPlan:
        """The plan of a group whose members' accepted parity headers are ``headers``."""
        ref = majority_header(headers)
        have_parity = tuple(h is not None and ref is not None and h.same_encoding(ref) for h in headers)
        return cls(ref.code if ref is not None else code, tuple(bool(x) for x in have_data), have_parity, ref)

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.have_data)

    @property
    def lost_data(self) -> tuple[int, ...]:
        """Members whose data file is missing or damaged."""
        return tuple(m for m, ok in enumerate(self.have_data) if not ok)

    @property
    def lost_parity(self) -> tuple[int, ...]:
        """Members whose parity file is missing, damaged or from another encoding."""
        return tuple(m for m, ok in enumerate(self.have_parity) if not ok)

    @property
    def intact(self) -> bool:
        """True when nothing is lost."""
        return not self.lost_data and not self.lost_parity

    def rs_sources(self) -> tuple[int, ...]:
        """The fragments a Reed-Solomon rebuild decodes from: every surviving data file (fragment ``m``),
        then as many surviving parity files (fragment ``size + m``) as data files are lost."""
        n = self.size
        par = [n + m for m in range(n) if self.have_parity[m]][:n - sum(self.have_data)]
        return tuple(m for m in range(n) if self.have_data[m]) + tuple(par)

    @property
    def recoverable(self) -> bool:
        """True when the lost data files can be rebuilt from what survives."""
        if not self.lost_data:
            return True
        if self.header is None:
            return False
        if self.code == "rs":
            return sum(self.have_data) + sum(self.have_parity) >= self.size
        if len(self.lost_data) > 1:
            return False
        t = self.lost_data[0]
        return all(ok for m, ok in enumerate(self.have_parity) if m != t)

    def repaired(self, header: ParityHeader | None = None) -> GroupPlan:
        """The plan after a successful repair: nothing lost, reference ``header`` (default: this one's)."""
        full = (True,) * self.size
        return GroupPlan(self.code, full, full, header if header is not None else self.header)

    def describe(self, names: Sequence[str] | None = None) -> str:
        """Say what is lost and whether the code can repair it."""
        nm = member_names(names, self.size)
        lost = []
        for m in range(self.size):
            what = [w for w, ok in (("data", self.have_data[m]), ("parity", self.have_parity[m])) if not ok]
            if what:
                lost.append(f"{nm[m]} ({'+'.join(what)})")
        if not lost:
            return "nothing lost"
        k = self.size
        if self.header is None and self.lost_data:
            need = "no parity file survives"
        elif self.code == "rs":
            alive = sum(self.have_data) + sum(self.have_parity)
            need = f"RS({k},{k}) needs {k} of {2 * k} files, {alive} survive"
        else:
            need = "XOR survives the loss of one member only"
        return f"lost {', '.join(lost)}; {need}"


@dataclass(frozen=True)
class PartnerPlan:
    """Which L2 files of a group survive: ``have_data[i]`` (member i's own file) and ``have_copy[i]``
    (the copy of member ``i - 1``'s file that member i stores)."""

    have_data: tuple[bool, ...]
    have_copy: tuple[bool, ...]

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.have_data)

    @property
    def lost_members(self) -> tuple[int, ...]:
        """Members whose data file must be rebuilt."""
        return tuple(i for i, ok in enumerate(self.have_data) if not ok)

    @property
    def unrecoverable(self) -> tuple[int, ...]:
        """Members whose data file and its partner copy are both lost."""
        n = self.size
        return tuple(i for i in self.lost_members if not self.have_copy[partner_index(i, n)])

    @property
    def recoverable(self) -> bool:
        """True when every lost data file still has its partner copy."""
        return not self.unrecoverable

    @property
    def intact(self) -> bool:
        """True when nothing is lost (no data file, no copy)."""
        return all(self.have_data) and all(self.have_copy)

    def restores(self) -> tuple[tuple[int, int], ...]:
        """The first rebuild step, ``(holder, member)`` pairs: the partner copy kept by ``holder`` is sent
        back to ``member``, whose data file is lost."""
        n = self.size
        return tuple((partner_index(i, n), i) for i in self.lost_members)

    def recopies(self) -> tuple[tuple[int, int], ...]:
        """The second rebuild step, ``(member, holder)`` pairs: ``member``'s (restored) data file is copied
        again to ``holder``, whose partner copy is lost."""
        n = self.size
        return tuple((partner_source_index(i, n), i) for i in range(n) if not self.have_copy[i])

    def describe(self, names: Sequence[str] | None = None) -> str:
        """Say what is lost, naming members by ``names`` (default ``member i``)."""
        nm = list(names) if names is not None else [f"member {i}" for i in range(self.size)]
        n = self.size
        parts = [f"{nm[i]} lost its file and its partner copy on {nm[partner_index(i, n)]}"
                 for i in self.unrecoverable]
        return "; ".join(parts) if parts else "recoverable"
