"""The process-state table: FT-PBLAS's FT_GetStateTable / FT_SetStateTable / FT_ResetState.

A 2-D ``int8`` array shaped like the process grid of the last failure-tolerant operation: ``1`` = alive,
``0`` = dead. After every agreement (:func:`ftkit.failure.ulfm.agree_on_dead`) the table is identical on all
survivors. A later call on the same grid starts from it: a process already marked dead is not waited for
again (the reference's reason for exposing the table). An application may inspect it between phases and
decide to go on with the survivors or to restart on fresh resources.

Persistence: after :func:`persist_state_table` names a file (in a directory every rank can read, e.g. the
checkpoint ``glbl_dir``), every change is written there atomically (the storage layer's atomic writer:
random temporary name, fsync, rename; file mode 0600) by the lowest live rank, and :func:`load_state_table`
lets a later job start with what this one learnt. The file is JSON
(``{"format": "ftkit-state-table", "version": 1, "shape": [p, q], "alive": [[...], ...]}``); a reader parses
and validates it and never executes anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..errors import FormatError, GridError, StorageError
from ..storage import atomic_write_bytes

__all__ = [
    "get_state_table",
    "set_state_table",
    "reset_state",
    "record_failures",
    "persist_state_table",
    "save_state_table",
    "load_state_table",
]

_FORMAT = "ftkit-state-table"
_VERSION = 1
#: Largest state-table file read (bytes): a 4096 x 4096 grid fits.
_MAX_BYTES = 64 << 20
_table: np.ndarray | None = None
_persist_path: Path | None = None


def _validate(table: object) -> np.ndarray:
    arr = np.asarray(table)
    if arr.ndim != 2 or arr.size == 0:
        raise GridError(
            f"a state table is a non-empty 2-D array shaped like the process grid, got shape {arr.shape}"
        )
    if not np.isin(arr, (0, 1)).all():
        raise GridError(
            "a state table holds only 1 (alive) and 0 (dead); got other values "
            f"{sorted(set(np.unique(arr).tolist()) - {0, 1})[:5]}"
        )
    return arr.astype(np.int8, copy=True)


def get_state_table() -> np.ndarray | None:
    """Return a copy of this process's state table (``1`` alive, ``0`` dead), or ``None`` if none yet.

    The shape is ``(nprow, npcol)`` of the grid of the last failure-tolerant operation (or of the last
    :func:`set_state_table`); entry ``[p, q]`` is process ``(p, q)``.
    """
    return None if _table is None else _table.copy()


def set_state_table(table: np.ndarray | list[list[int]]) -> None:
    """Replace this process's state table (call it with the same table on every rank).

    Raises
    ------
    GridError
        If ``table`` is not a non-empty 2-D array of zeros and ones.
    """
    global _table
    _table = _validate(table)
    _save_if_persisted()


def reset_state(shape: tuple[int, int] | None = None) -> None:
    """Mark every process alive again (FT_ResetState), keeping the table's shape unless ``shape`` is given.

    With no table and no ``shape`` the table is forgotten (``get_state_table()`` returns ``None``).
    """
    global _table
    if shape is not None:
        _table = np.ones(shape, dtype=np.int8)
    elif _table is not None:
        _table = np.ones_like(_table)
    _save_if_persisted()


def record_failures(
    shape: tuple[int, int], dead: list[tuple[int, int]] | set[tuple[int, int]], *, writer: bool = True
) -> np.ndarray:
    """Set the table of a grid of ``shape`` with the processes at ``dead`` marked 0; return a copy.

    Called after an agreement, with the agreed set, so it is identical on all survivors. A table of another
    shape is replaced. ``writer`` says whether this rank writes the persisted file (one rank does).
    """
    global _table
    if _table is None or _table.shape != tuple(shape):
        _table = np.ones(shape, dtype=np.int8)
    for p, q in dead:
        _table[p, q] = 0
    if writer:
        _save_if_persisted()
    return _table.copy()


def persist_state_table(path: str | os.PathLike[str] | None) -> None:
    """Write the table to ``path`` after every change from now on (``None`` stops persisting)."""
    global _persist_path
    _persist_path = None if path is None else Path(path)
    _save_if_persisted()


def save_state_table(path: str | os.PathLike[str], table: np.ndarray | None = None) -> None:
    """Write ``table`` (default: the current one) to ``path`` atomically (the storage layer's atomic writer).

    Raises
    ------
    StorageError
        If there is no table or the file cannot be written.
    """
    arr = _table if table is None else _validate(table)
    if arr is None:
        raise StorageError(
            "no state table to save: run a failure-tolerant operation or set_state_table first"
        )
    doc = {"format": _FORMAT, "version": _VERSION, "shape": list(arr.shape), "alive": arr.tolist()}
    try:
        atomic_write_bytes(path, json.dumps(doc).encode())
    except StorageError as exc:
        raise StorageError(f"cannot write the state table to {path}: {exc}") from exc


def load_state_table(path: str | os.PathLike[str], *, install: bool = True) -> np.ndarray:
    """Read a table written by :func:`save_state_table`; install it as the current one unless told not to.

    Raises
    ------
    StorageError
        If the file cannot be read.
    FormatError
        If it is not an ftkit state-table file or its contents are inconsistent (any parse failure).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise StorageError(f"cannot read the state table {path}: {exc.strerror or exc}") from exc
    try:
        arr = _parse(raw, str(path))
    except FormatError:
        raise
    except Exception as exc:  # any parser failure (RecursionError, MemoryError...) is a damaged file
        raise FormatError(f"{path}: damaged state table ({type(exc).__name__}: {exc})") from exc
    if install:
        global _table
        _table = arr.copy()
    return arr


def _parse(raw: bytes, where: str) -> np.ndarray:
    if len(raw) > _MAX_BYTES:
        raise FormatError(f"{where}: {len(raw)}+ bytes is too large for a state table")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise FormatError(f"{where} is not a state-table file (bad JSON: {exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or type(doc.get("version")) is not int \
            or doc.get("version") != _VERSION:
        raise FormatError(f"{where} is not an ftkit state-table file of version {_VERSION}")
    alive, shape = doc.get("alive"), doc.get("shape")
    if not isinstance(alive, list) or not alive or not all(
            isinstance(row, list) and len(row) == len(alive[0]) and all(type(v) is int and v in (0, 1)
                                                                        for v in row)
            for row in alive):
        raise FormatError(f"{where}: invalid state table: 'alive' is not a rectangular table of 0 (dead) and "
                          "1 (alive)")
    if shape != [len(alive), len(alive[0])]:
        raise FormatError(f"{where}: table shape {[len(alive), len(alive[0])]} differs from recorded shape "
                          f"{shape!r}")
    return _validate(alive)


def _save_if_persisted() -> None:
    if _persist_path is not None and _table is not None:
        save_state_table(_persist_path, _table)
