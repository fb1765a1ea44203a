"""Small JSON values exchanged over MPI in one collective round when they fit, two when they do not.

Every rank sends a fixed :data:`SLOT` of bytes: its value's JSON text length (8 bytes) and the text's first
``SLOT - 8`` bytes. When every text fits, that one round is all; otherwise a second round carries the rest of
the texts that did not fit (every rank knows every length after the first round, so all take the second round
or none). The agreements of a checkpoint call exchange a few dozen bytes each: one round instead of the two
of "lengths, then texts" (issue 37: every round is a sleeping poll on a loaded machine). What peers send is
only ever parsed as JSON (strings, numbers, booleans, None, lists, dicts; tuples arrive as lists).

The caller waits for each non-blocking collective its own way (``wait(request, buffers)``: with a deadline,
turning MPI errors into ftkit's), so the checkpoint layer and the group codes share this one implementation.
Receive buffers start zeroed: a collective that completes without an error but with a peer's part unwritten
(seen with ULFM when a peer dies inside it: ``checkpoint/online/appcomm.py``) leaves a zero length or text
that is not JSON, reported as :class:`~ftkit.errors.ProcessFailure`, never parsed as a value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ProcessFailure

__all__ = ["SLOT", "allgather_values", "bcast_value"]

#: Bytes per rank of the first round: an 8-byte length, then the first ``SLOT - 8`` bytes of JSON text.
SLOT = 256
_ROOM = SLOT - 8

#: ``wait(request, buffers)``: wait for a started non-blocking collective (``buffers`` kept alive meanwhile).
Wait = Callable[[Any, tuple[Any, ...]], None]


def _slot(text: bytes) -> np.ndarray:
    slot = np.zeros(SLOT, np.uint8)
    slot[:8] = np.frombuffer(np.array([len(text)], np.int64).tobytes(), np.uint8)
    head = text[:_ROOM]
    slot[8:8 + len(head)] = np.frombuffer(head, np.uint8)
    return slot


def _length(slot: np.ndarray, rank: int) -> int:
    length = int(slot[:8].copy().view(np.int64)[0])
    if length < 1:  # any JSON text has a character; an unwritten (zeroed) slot has length 0
        raise _unreadable(rank)
    return length


def _unreadable(rank: int) -> ProcessFailure:
    return ProcessFailure(f"rank {rank}'s part of a small-value exchange did not arrive although the "
                          "collective completed: a peer process failed during it")


def _parse(text: bytes, rank: int) -> Any:
    try:
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _unreadable(rank) from exc


def _text(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def allgather_values(comm: Any, value: Any, wait: Wait) -> list[Any]:
    """Every rank's JSON-able ``value``, in rank order (collective over ``comm``).

    Raises
    ------
    ProcessFailure
        If a peer's part is not a value it sent (its slot left unwritten by a collective that completed).
    Whatever ``wait`` raises (a failed or silent peer).
    """
    from mpi4py import MPI

    text, n = _text(value), comm.Get_size()
    mine, slots = _slot(text), np.zeros((n, SLOT), np.uint8)
    wait(comm.Iallgather(mine, slots), (mine, slots))
    lengths = [_length(slots[r], r) for r in range(n)]
    counts = [max(0, length - _ROOM) for length in lengths]   # what did not fit, per rank
    rest = b""
    if any(counts):
        displs = [sum(counts[:r]) for r in range(n)]
        tail = np.frombuffer(text[_ROOM:], np.uint8).copy()
        every = np.zeros(max(1, sum(counts)), np.uint8)
        wait(comm.Iallgatherv([tail, MPI.BYTE], [every, (counts, displs), MPI.BYTE]), (tail, every))
        rest = every.tobytes()
    values, at = [], 0
    for r, (length, count) in enumerate(zip(lengths, counts, strict=True)):
        values.append(_parse(slots[r, 8:8 + length - count].tobytes() + rest[at:at + count], r))
        at += count
    return values


def bcast_value(comm: Any, value: Any, root: int, wait: Wait) -> Any:
    """``root``'s JSON-able ``value`` on every rank (collective over ``comm``; ``value`` matters on ``root``
    only, which gets it back as given).

    Raises
    ------
    ProcessFailure
        If root's value did not arrive (the slot left unwritten by a broadcast that completed).
    Whatever ``wait`` raises (a failed or silent peer).
    """
    from mpi4py import MPI

    is_root = comm.Get_rank() == root
    text = _text(value) if is_root else b""
    slot = _slot(text) if is_root else np.zeros(SLOT, np.uint8)
    wait(comm.Ibcast([slot, MPI.BYTE], root=root), (slot,))
    length = _length(slot, root)
    if length > _ROOM:
        tail = np.frombuffer(text[_ROOM:], np.uint8).copy() if is_root else np.zeros(length - _ROOM, np.uint8)
        wait(comm.Ibcast([tail, MPI.BYTE], root=root), (tail,))
        return value if is_root else _parse(slot[8:].tobytes() + tail.tobytes(), root)
    return value if is_root else _parse(slot[8:8 + length].tobytes(), root)
