"""The checkpoint levels, one module each, and the static table the pipeline and the executors read.

======  ==========================  =====================================================================
Level   Module                      What it does
======  ==========================  =====================================================================
1       :mod:`.local`               node-local file (always the primary level but for inline L4)
2       :mod:`.partner`             copy of each rank's file on its partner's node
3       :mod:`.encoded`             one parity file per group member (Reed-Solomon or XOR)
4       :mod:`.pfs`                 file on the parallel file system, whole or differential (dCP)
======  ==========================  =====================================================================

:data:`LEVELS` is built here, explicitly, from the level modules (as zarr builds a codec pipeline from a
list of codecs); nothing is registered at import time and no other module changes it. The recovery chain
is the levels' recovery steps, cheapest level first (:func:`recovery_chain`).
"""

from __future__ import annotations

from types import MappingProxyType

from ...errors import CheckpointError
from ..contract import Level, RecoveryStep
from . import encoded, local, partner, pfs

__all__ = ["LEVELS", "level", "recovery_chain"]

#: Every level, by number (read-only).
LEVELS: MappingProxyType[int, Level] = MappingProxyType(
    {lv.number: lv for lv in (local.LEVEL, partner.LEVEL, encoded.LEVEL, pfs.LEVEL)})


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
        raise CheckpointError(f"checkpoint level {number!r} is invalid: use 1 (local), 2 (partner), "
                              "3 (Reed-Solomon/XOR group), or 4 (parallel file system)") from None


def recovery_chain() -> list[RecoveryStep]:
    """The recovery chain, cheapest first: L1, L2 partner copy, L3 group decode, L4 (dCP, then whole)."""
    return [step() for number in sorted(LEVELS) for step in LEVELS[number].recovery]
