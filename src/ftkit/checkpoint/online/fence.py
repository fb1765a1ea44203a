"""What the application sees of an iteration of ``steps()`` in which a process failed (online recovery).

The rule: **no value of a failed iteration decides anything differently on two ranks**. Three parts:

1. **Agreed collectives.** Inside the loop, a collective call on ``ckpt.comm`` returns its result only when
   every live application rank completed it: a fault-tolerant agreement (ULFM ``Iagree``) follows it. A rank
   whose call failed starts the repair, which revokes the communicator, and that ends the others' agreement
   at once; a failure during the agreement makes it fail on every rank alike. So either every rank gets the
   true result, or none does and the iteration is fenced on all of them. (Point-to-point calls are not
   agreed: decide the end of the loop on a collective's result, as FTI's examples do.)
2. **Neutral fenced results.** In a fenced iteration calls return at once with results that are the same on
   every rank whatever its data, and that a convergence test does not take for convergence: a number is
   NaN (every comparison with it is false, so ``if err < tol: break`` does not fire), a boolean False, an
   array NaN (numbers) or False (booleans), any other object None; a floating-point result buffer
   (``Allreduce``'s ``recvbuf``, the buffer of a non-root ``Bcast``...) is filled with NaN. Receive buffers of
   point-to-point calls are left as they are (the protected arrays are restored next).
3. **Leaving a fenced iteration is refused.** If the application still leaves the loop in a fenced
   iteration (a ``break`` or ``return`` its own test took on such a value, or an exception), its data is the
   unrestored state of a failed step: every later call on ``ckpt.comm`` or the Checkpointer raises
   :class:`~ftkit.errors.OnlineRecoveryError` naming the fix, and the newest checkpoint stays for a relaunch.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
from mpi4py import MPI

from ...errors import OnlineRecoveryError
from ...failure.detect import is_failure_error
from ..handover import OnlineState

__all__ = ["all_completed", "fenced_result", "left_fenced", "check_left", "RESULT_BUFFER"]

#: Buffer calls: the position of the buffer that receives the result (filled with NaN when fenced).
RESULT_BUFFER = {"Allreduce": 1, "Reduce": 1, "Allgather": 1, "Allgatherv": 1, "Gather": 1, "Gatherv": 1,
                 "Scatter": 1, "Scatterv": 1, "Alltoall": 1, "Alltoallv": 1, "Alltoallw": 1,
                 "Reduce_scatter": 1, "Reduce_scatter_block": 1, "Scan": 1, "Exscan": 1, "Bcast": 0}
_KEYWORD = {0: "buf", 1: "recvbuf"}
_LIST_RESULT = ("allgather", "alltoall", "gather")
_OBJECT_RESULT = ("bcast", "reduce", "allreduce", "scan", "exscan", "scatter", "sendrecv")
_MAX_PAUSE = 1e-3  # s: the agreement follows every collective of the loop; poll it closely


def all_completed(comm: Any, timeout: float, completed: bool = True) -> bool:
    """Whether every live rank of ``comm`` completed the collective this rank just left (agreement);
    ``completed``: whether this rank did (False: its result is unusable).

    False when a rank failed (in the call or during the agreement), when ``comm`` is revoked (a rank is
    repairing), when some rank does not take part within ``timeout`` seconds or did not complete.
    """
    flag = np.full(1, int(completed), np.intc)
    try:
        req = comm.Iagree(flag)
        deadline = time.monotonic() + timeout
        pause = 0.0
        while not req.Test():
            if comm.Is_revoked() or time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(max(pause * 2.0, 1e-5), _MAX_PAUSE)
    except MPI.Exception as exc:
        if is_failure_error(exc):
            return False
        raise
    return bool(flag[0])


def _neutral(obj: Any) -> Any:
    """The fenced stand-in for a result shaped like ``obj``: the same on every rank."""
    if isinstance(obj, bool | np.bool_):
        return False
    if isinstance(obj, int | float | complex | np.number):
        return float("nan")
    if isinstance(obj, np.ndarray):
        return np.zeros(obj.shape, bool) if obj.dtype == bool else np.full(obj.shape, np.nan)
    return None


def fenced_result(comm: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What the fenced call ``comm.name(*args, **kwargs)`` returns (and writes into its result buffer)."""
    if name in RESULT_BUFFER:
        pos = RESULT_BUFFER[name]
        buf = args[pos] if len(args) > pos else kwargs.get(_KEYWORD[pos])
        root = args[1] if name == "Bcast" and len(args) > 1 else kwargs.get("root", 0)
        if not (name == "Bcast" and root == comm.Get_rank()):  # never the root's own data
            _fill_nan(buf)
        return None
    obj = args[0] if args else next(iter(kwargs.values()), None)
    if name in _LIST_RESULT:
        return [_neutral(obj)] * comm.Get_size()
    return _neutral(obj) if name in _OBJECT_RESULT else None


def _fill_nan(spec: Any) -> None:
    buf = spec[0] if isinstance(spec, list | tuple) and spec else spec
    if isinstance(buf, np.ndarray) and buf.dtype.kind in "fc" and buf.flags.writeable:
        buf.fill(np.nan)


def left_fenced(state: OnlineState, rank: int, step: int) -> None:
    """The loop was left in fenced step ``step`` (on rank ``rank``): refuse every later call (see the module
    doc)."""
    dead = list(state.report.dead)
    state.left = (
        f"the steps() loop was left in step {step}, in which rank(s) {dead} died: its results are fenced "
        "(NaN) and the arrays not restored, so nothing computed after it is valid. Leave the loop only on "
        "a test that NaN does not pass (`if err < tol: break`, not `if not err >= tol: break`) on a "
        "collective's result, and let exceptions of the loop body end the job; the checkpoints stay for a "
        "relaunch")
    print(f"ftkit: rank {rank}: OnlineRecoveryError: {state.left}", file=sys.stderr, flush=True)


def check_left(state: OnlineState | None) -> None:
    """Raise the refusal recorded by :func:`left_fenced`, if any (``state``: the job's online state).

    Raises
    ------
    OnlineRecoveryError
        If the Checkpointer's loop was left in a fenced iteration.
    """
    if state is not None and state.left:
        raise OnlineRecoveryError(state.left, list(state.report.dead))
