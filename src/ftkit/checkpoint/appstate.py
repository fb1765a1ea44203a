"""Everything an application's state holds beyond fixed-shape arrays: resizable arrays, random generators and
small Python state (a dict), checkpointed with the arrays and restored in place.

- A *resizable* array (``protect(name, a, resizable=True)``) may change shape between checkpoints. When the
  checkpoint recovered holds another shape or dtype for it, recovery reads it into a new array of the
  stored shape (:meth:`AppState.fit`), which replaces the protected one: ``ckpt.array(name)`` returns it
  and ``info.resized`` names it. ``ckpt.stored_shape(name)`` tells the shape before ``recover()``.
- A ``numpy.random.Generator`` or ``BitGenerator`` and a ``dict`` are *state records*: at every checkpoint
  they are encoded (:mod:`ftkit.storage.format.staterecord`: typed, no pickle) into a byte array stored as one
  more section, which recovery treats as a resizable array. Records are decoded and checked on every rank
  before any is applied (:meth:`AppState.decode`; a damaged or forged record makes recovery use an older
  checkpoint), then applied in place: ``bit_generator.state = ...``, and ``clear()`` then ``update()``.

An unsupported value inside a dict raises :class:`~ftkit.errors.UnsupportedStateError` from ``protect()``,
and at a checkpoint on every rank before anything is committed (the rank holding it writes nothing).

:class:`StateAPI` holds the :class:`~.checkpointer.Checkpointer` methods of this feature (a mixin: the
Checkpointer owns ``_protected`` and ``_state``, this module only reads them and hands back new arrays).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from ..errors import CheckpointError, FormatError, RecoveryError
from ..storage.format.compressed import CODECS
from ..storage.format.container import Header, parse_dtype
from ..storage.format.staterecord import KIND_DICT, KIND_GENERATOR, decode_record, encode_record
from ..storage.manifest import CheckpointEntry
from ..storage.repair.copies import RunCopies
from . import _mpi
from .layout import matrix_layout
from .recovery import RecoveryInfo, recover_newest

__all__ = ["AppState", "StateAPI", "record_target"]

_KIND_NAMES = {KIND_DICT: "a dict", KIND_GENERATOR: "a random generator"}


def record_target(obj: Any) -> tuple[bytes, Any] | None:
    """The record kind and the object restored in place for ``obj`` (a dict or a generator), or None."""
    if isinstance(obj, np.random.Generator):
        return KIND_GENERATOR, obj.bit_generator
    if isinstance(obj, np.random.BitGenerator):
        return KIND_GENERATOR, obj
    if type(obj) is dict:
        return KIND_DICT, obj
    return None


def _encode(name: str, kind: bytes, target: Any) -> np.ndarray:
    value = target.state if kind == KIND_GENERATOR else target
    return np.frombuffer(bytearray(encode_record(kind, value, name)), dtype=np.uint8)


def _check(name: str, kind: bytes, got: bytes, value: Any, target: Any) -> str | None:
    """Why the decoded record ``value`` cannot be applied to ``target``, or None."""
    if got != kind:
        return (f"state record {name!r}: the checkpoint holds {_KIND_NAMES[got]}, {_KIND_NAMES[kind]} is "
                "protected under that name")
    if kind == KIND_DICT:
        return None if type(value) is dict else f"state record {name!r}: not a dict"
    family = type(target).__name__
    stored = value.get("bit_generator") if type(value) is dict else None
    if stored != family:
        return (f"state record {name!r}: the checkpoint holds the state of a {stored!r} generator, the "
                f"protected one is {family}: protect a generator of the stored family")
    try:
        type(target)().state = value  # numpy's own checks, on a scratch generator of the same family
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        return f"state record {name!r}: not a valid {family} state ({exc})"
    return None


class AppState:
    """The resizable arrays and state records of one Checkpointer, and what a recovery fitted and decoded."""

    def __init__(self) -> None:
        self.resizable: set[str] = set()
        self.records: dict[str, tuple[bytes, Any]] = {}      # name -> (kind, dict or bit generator)
        self.fitted: dict[str, np.ndarray] = {}             # arrays of the stored shape (last fit())
        self.decoded: dict[str, Any] = {}                   # record values checked (last decode())
        self.stored: dict[str, tuple[tuple[int, ...], np.dtype]] | None = None   # stored_shape()'s answer
        self.codecs: dict[str, str] = {}                    # per-array compression overrides (L4)

    def protect(self, name: str, obj: Any, resizable: bool, compression: str | None = None,
                global_shape: Any = None, offset: Any = None) -> np.ndarray:
        """Note ``obj``'s kind and ``compression``; return the array to protect under ``name`` (a record's
        encoding, checked now).

        Raises
        ------
        UnsupportedStateError
            If a dict holds a value the state encoding cannot store (naming its path).
        CheckpointError
            If ``compression`` is not a codec name, or a generator or dict is given a global layout.
        """
        record = record_target(obj)
        if record is not None and (global_shape is not None or offset is not None):
            raise CheckpointError(f"{name!r}: a generator or dict has no global layout")
        if compression is not None and compression not in CODECS:
            raise CheckpointError(f"protect({name!r}): compression = {compression!r}: choose one of "
                                  f"{', '.join(CODECS)}")
        self.resizable.discard(name)
        self.records.pop(name, None)
        self.codecs.pop(name, None)
        if compression is not None:
            self.codecs[name] = compression
        if record is None:
            if resizable:
                self.resizable.add(name)
            return obj  # type: ignore[no-any-return]
        array = _encode(name, *record)
        self.records[name] = record
        self.resizable.add(name)
        return array

    def arrays(self, protected: Mapping[str, np.ndarray],
               extra: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
        """The ``(name, array)`` pairs to checkpoint now: the state records encoded afresh. The per-array
        compression overrides go to ``extra`` (the job's: the L4 flush reads them, the manifest keeps them).

        Raises
        ------
        UnsupportedStateError
            If a dict now holds a value the encoding cannot store (before anything is written).
        """
        self.stored = None  # a new checkpoint: stored_shape() asks again
        if self.codecs:
            extra["codecs"] = {n: c for n, c in self.codecs.items() if n in protected}
        return [(n, _encode(n, *self.records[n]) if n in self.records else a) for n, a in protected.items()]

    def fit(self, header: Header, targets: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The targets to read ``header``'s sections into: each resizable array whose stored shape or dtype
        differs is replaced by a new array of the stored ones (kept in ``fitted``).

        Raises
        ------
        FormatError
            If a stored shape cannot be allocated on this machine (a damaged header).
        """
        self.fitted = {}
        out = dict(targets)
        for s in header.sections:
            arr = out.get(s.name)
            if s.name not in self.resizable or arr is None or (s.shape, s.dtype) == (arr.shape,
                                                                                      arr.dtype.str):
                continue
            if s.name in self.records and (s.dtype != "|u1" or len(s.shape) != 1):
                continue  # not a record: check_targets reports the mismatch
            try:
                new = np.empty(s.shape, dtype=parse_dtype(s.dtype, f"array {s.name!r}: "))
            except (ValueError, MemoryError) as exc:
                raise FormatError(f"array {s.name!r}: cannot allocate the stored shape {s.shape} "
                                  f"({exc})") from exc
            self.fitted[s.name] = out[s.name] = new
        return out

    def decode(self, targets: Mapping[str, np.ndarray]) -> str | None:
        """Decode and check every state record read into ``targets`` (kept in ``decoded``); return why one is
        unusable, or None."""
        self.decoded = {}
        for name, (kind, target) in self.records.items():
            try:
                got, value = decode_record(targets[name], f"state record {name!r}")
            except FormatError as exc:
                return str(exc)
            problem = _check(name, kind, got, value, target)
            if problem is not None:
                return problem
            self.decoded[name] = value
        return None

    def apply(self) -> dict[str, np.ndarray]:
        """Restore every decoded record in place; return the fitted arrays (to replace the protected ones)."""
        for name, value in self.decoded.items():
            kind, target = self.records[name]
            if kind == KIND_GENERATOR:
                target.state = value
            else:
                target.clear()
                target.update(value)
        self.decoded = {}
        fitted, self.fitted = self.fitted, {}
        return fitted


class _Probe(Exception):
    """Raised by :class:`_ShapeProbe` on every rank at the same point of the recovery: the shapes found."""

    def __init__(self, shapes: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
        super().__init__("stored shapes")
        self.shapes = shapes


class _ShapeProbe:
    """A recovery adapter that reads nothing: it stops recovery once every rank located a verified copy."""

    def fit(self, header: Header, targets: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        raise _Probe({s.name: (s.shape, parse_dtype(s.dtype, f"array {s.name!r}: "))
                      for s in header.sections})

    def decode(self, targets: Mapping[str, np.ndarray]) -> str | None:  # pragma: no cover - never reached
        return None


def _global_shapes(ctx: Any, entry: CheckpointEntry) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Global shape and dtype of every array of ``entry`` stored with a global layout, from the header of
    the first old rank whose committed file is found (not collective).

    Raises
    ------
    RecoveryError
        If no old rank's file is found.
    """
    copies = RunCopies(ctx.config.ckpt_dir, ctx.config.glbl_dir, ctx.exec_id, entry)
    why = ""
    for rank in range(len(entry.files)):
        copy, why = copies.find(rank)
        if copy is not None:
            return {s.name: (tuple(s.layout.global_shape), parse_dtype(s.dtype))
                    for s in copy.header.sections if s.layout is not None}
    raise RecoveryError(f"stored_shape(): no file of checkpoint {entry.id} is found ({why})")


class StateAPI:
    """The Checkpointer's methods for resizable arrays and state records (mixed into it)."""

    _protected: dict[str, np.ndarray]
    _state: AppState
    _layouts: dict[str, Any]
    _session: Any                      # the run's :class:`~.session.Session`
    recovery_steps: list[Any]

    if TYPE_CHECKING:
        def _check_open(self) -> None: ...

    def protect_matrix(self, name: str, matrix: Any) -> None:
        """Protect a :class:`ftkit.linalg.DistributedMatrix` with its block-cyclic layout: recoverable onto
        any other process grid, block size or rank count (its local array is filled in place).

        Raises
        ------
        CheckpointError
            If ``matrix`` is not a distributed matrix.
        """
        buffer, layout = matrix_layout(name, matrix)
        self.protect(name, buffer)  # type: ignore[attr-defined]
        self._layouts[name] = layout

    def stored_shape(self, name: str) -> tuple[tuple[int, ...], np.dtype]:
        """Return the shape and dtype of ``name`` in the newest checkpoint every rank can recover, for this
        rank, before :meth:`recover` (FTI_GetStoredSize). Collective (it locates, verifies and if need be
        rebuilds the copies as :meth:`recover` does; the answer is kept until the next checkpoint).

        When the checkpoint was written by another number of ranks, an array stored with a global layout
        answers its *global* shape (to decompose it anew: protect this rank's box with ``global_shape`` and
        ``offset``, then :meth:`recover` reshards); that answer comes from the newest checkpoint's headers.

        Raises
        ------
        RecoveryError
            If this is not a restart, no checkpoint can be recovered, or ``name`` is not in it.
        ProcessFailure
            If a peer failed meanwhile.
        """
        self._check_open()
        session = self._session
        if not session.restarted or session.problem:
            raise RecoveryError(f"stored_shape({name!r}): {session.problem or 'this run is a fresh start'}")
        ctx = session.ctx
        newest = next((e for e in ctx.store.manifest.newest_first() if e.complete_levels), None)
        if self._state.stored is None and newest is not None and len(newest.files) != ctx.nranks:
            self._state.stored = _global_shapes(ctx, newest)
        if self._state.stored is None:
            try:
                recover_newest(ctx, self._protected, self.recovery_steps, None, adapt=_ShapeProbe())
            except _Probe as found:
                self._state.stored = found.shapes
            except MPI.Exception as exc:
                raise _mpi.as_failure(exc, session.icomm, "stored_shape()") from exc
        shapes = self._state.stored or {}
        if name not in shapes:
            raise RecoveryError(f"stored_shape({name!r}): the checkpoint to recover holds {sorted(shapes)}")
        return shapes[name]

    def array(self, name: str) -> np.ndarray:
        """Return the array protected under ``name``: after :meth:`recover`, a resizable array of the stored
        shape (a new array when the shape changed).

        Raises
        ------
        CheckpointError
            If nothing is protected under ``name``, or it is a generator or a dict (restored in place).
        """
        if name in self._state.records:
            raise CheckpointError(f"{name!r} is a state record (a generator or a dict): it is restored in "
                                  "place, use the object you protected")
        if name not in self._protected:
            raise CheckpointError(f"no array is protected under {name!r} (protected: "
                                  f"{sorted(self._protected)})")
        return self._protected[name]

    def _recover_newest(self, recover: Any = recover_newest) -> tuple[RecoveryInfo, CheckpointEntry]:
        """Recover into the protected arrays and objects with ``recover`` (:func:`.recovery.recover_newest`,
        or the name the caller's module holds for it); collective."""
        self._state.fitted, self._state.decoded = {}, {}
        info, entry = recover(self._session.ctx, self._protected, self.recovery_steps, self._layouts,
                                     adapt=self._state)
        fitted = self._state.apply()
        self._protected.update(fitted)
        resized = tuple(sorted(n for n in fitted if n not in self._state.records))
        return dataclasses.replace(info, resized=resized), entry
