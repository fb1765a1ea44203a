"""Where a ``steps()`` loop body takes its checkpoints: at its top (FTI's shape) or after the step's work.

A checkpoint taken in step ``i`` resumes the loop at ``i + 1`` when the step's work is done before it (the
documented ``steps()`` form: ``snapshot()`` at the end of the body), but at ``i`` itself when it is taken at
the top of the body, before any work (where FTI's examples call ``FTI_Snapshot``): then it holds the state
*before* step ``i``. Resuming a top checkpoint at ``i + 1`` would skip step ``i``.

The placement is read from the code of the loop, not guessed from what ran: :class:`LoopSite` remembers the
frame that iterates the ``steps()`` generator and the offset of its ``FOR_ITER``; a checkpoint call made from
that frame is at the top when every instruction of the body before the call only reads values or binds plain
names (``comm = ckpt.comm``, a test such as ``if step % k == 0:``). A call, a store into an array or an
attribute, or an in-place operator before it is the step's work: the checkpoint is after it. A checkpoint
called from anywhere else (another thread, a generator consumed elsewhere) counts as after the work, as
before.
"""

from __future__ import annotations

import dis
import functools
import sys
from dataclasses import dataclass
from types import CodeType, FrameType

__all__ = ["LoopSite", "here", "taken_at_top"]

# Instructions that neither call anything nor write anything but a plain local or global name.
_PURE = ("LOAD_", "STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "PUSH_NULL", "PRECALL",
         "KW_NAMES", "NOP", "RESUME", "EXTENDED_ARG", "CACHE", "COMPARE_OP", "IS_OP", "CONTAINS_OP",
         "POP_JUMP", "JUMP_FORWARD", "UNARY_", "BINARY_SUBSCR", "COPY", "SWAP", "UNPACK_SEQUENCE", "POP_TOP",
         "TO_BOOL", "BUILD_TUPLE", "NOT_TAKEN")


@dataclass(frozen=True)
class LoopSite:
    """The frame running a ``for step in ckpt.steps(n)`` statement, and the offset of its ``FOR_ITER``."""

    frame: FrameType
    offset: int


def here(depth: int = 1) -> LoopSite | None:
    """The loop site of the generator calling this (``depth`` frames up is the frame iterating it)."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return None
    return LoopSite(frame, frame.f_lasti)


def taken_at_top(site: LoopSite | None) -> bool:
    """Whether the checkpoint being taken now was called at the top of the loop body of ``site``."""
    if site is None:
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame is not site.frame:
        frame = frame.f_back
    if frame is None:
        return False
    return _nothing_done(frame.f_code, site.offset, frame.f_lasti)


@functools.lru_cache(maxsize=64)
def _nothing_done(code: CodeType, loop_offset: int, call_offset: int) -> bool:
    """Whether the instructions of ``code`` between the loop's FOR_ITER and the call in progress at
    ``call_offset`` (a frame's ``f_lasti``, which may point into the call's inline cache) are pure."""
    before = [ins for ins in dis.get_instructions(code) if loop_offset < ins.offset <= call_offset]
    if not before:
        return False
    for ins in before[:-1]:  # the last one is the call in progress
        if ins.opname == "BINARY_OP" and not ins.argrepr.endswith("="):
            continue  # a + b, not a += b (which writes into an array in place)
        if not ins.opname.startswith(_PURE):
            return False
    return True
