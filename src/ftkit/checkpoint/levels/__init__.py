"""The checkpoint levels' pipeline steps, one module each, read through the one level table.

======  ==========================  =====================================================================
Level   Module                      What it does
======  ==========================  =====================================================================
1       :mod:`.local`               node-local file (always the primary level but for inline L4)
2       :mod:`.partner`             copy of each rank's file on its partner's node
3       :mod:`.encoded`             one parity file per group member (Reed-Solomon or XOR)
4       :mod:`.pfs`                 file on the parallel file system, whole or differential (dCP)
======  ==========================  =====================================================================

The table is :mod:`ftkit.storage.levels` (one record per level: root, storage class, node-loss rule,
configuration keys, recovery order, and ``steps``, the module holding the level's :class:`Level`).
:data:`LEVELS` is a read-only view of it: ``LEVELS[n]`` is the ``LEVEL`` of level ``n``'s ``steps`` module
(imported at first use; the four built-in ones are imported here). Nothing registers itself at import
time: a new level is one module and one :func:`ftkit.storage.levels.register_level` call. The recovery chain
is the levels' recovery steps in the table's recovery order (:func:`recovery_chain`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from ...errors import CheckpointError, StorageError
from ...storage import levels as table
from ..contract import Level, RecoveryStep
from . import encoded, local, partner, pfs  # noqa: F401 - the built-in levels' steps, loaded with the package

__all__ = ["LEVELS", "level", "recovery_chain"]


class _Steps(Mapping[int, Level]):
    """Level number → its :class:`Level`, read live from the table."""

    def __getitem__(self, number: int) -> Level:
        try:
            record = table.spec(number)
        except StorageError:
            raise KeyError(number) from None
        found = getattr(importlib.import_module(record.steps), "LEVEL", None)
        if not isinstance(found, Level) or found.number != record.number:
            raise CheckpointError(f"level {number} ({record.name}): module {record.steps} has no LEVEL of "
                                  f"level {number}: define LEVEL = Level({number}, ...) there")
        return found

    def __iter__(self) -> Iterator[int]:
        return iter(table.numbers())

    def __len__(self) -> int:
        return len(table.numbers())


#: Every level's pipeline steps, by number (a read-only view of :mod:`ftkit.storage.levels`).
LEVELS: Mapping[int, Level] = _Steps()


def level(number: int) -> Level:
    """Return level ``number`` of the table.

    Raises
    ------
    CheckpointError
        If ``number`` is not a level.
    """
    try:
        return LEVELS[number]
    except (KeyError, TypeError):
        raise CheckpointError(f"checkpoint level {number!r} is invalid: use {table.describe()}") from None


def recovery_chain() -> list[RecoveryStep]:
    """The recovery chain in the table's recovery order: L1, L2 partner copy, L3 group decode, L4 (dCP,
    then whole), then any level registered after them."""
    return [step() for s in table.recovery_order() for step in LEVELS[s.number].recovery]
