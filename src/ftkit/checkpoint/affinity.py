"""A reserved core for the checkpoint work: ``[ftkit] reserve_core = 1`` or ``ftkit launch --reserve-core``.

FTI's papers spend one core per node on the checkpoint work (the head rank) so that asynchronous
post-processing does not compete with the computation. With a reserved core:

* every thread of an application rank is pinned to the cores of its CPU set except the last one
  (:func:`pin_application`, at :class:`~ftkit.checkpoint.offload.PostManager` start-up); threads started
  afterwards inherit that set;
* the background post-processing thread of a rank (``inline_lN = 0, head = 0``) pins itself to the last core
  (:func:`pin_ft_thread`, per-thread affinity: ``os.sched_setaffinity(threading.get_native_id(), ...)``),
  as do the threads it starts (the encoder's worker);
* a head rank (``head = 1``) pins all its threads to the last core (:func:`pin_head`).

"The last core" is the highest-numbered CPU of the process's affinity mask when it starts, so a launcher's
binding (``--cpu-set``, Slurm's ``--cpus-per-task``) is respected. With a single CPU in the mask nothing is
pinned (there is nothing to reserve) and :func:`reserved_split` returns None. Linux only; elsewhere the
functions do nothing. :data:`pinned` records, per role, the CPU set the kernel reports after pinning (for
tests and diagnostics).
"""

from __future__ import annotations

import os
import threading

from ..config import Config
from ..errors import ConfigError
from ..launch import RESERVE_CORE_ENV

__all__ = ["RESERVE_CORE_ENV", "reserve_core_requested", "reserved_split", "pin_application", "pin_ft_thread",
           "pin_head", "pinned"]

#: Role -> CPU set in effect after pinning ("application", "ft-thread", "head").
pinned: dict[str, frozenset[int]] = {}
_split: list[tuple[frozenset[int], frozenset[int]]] = []   # the application's split, once pinned


def reserve_core_requested(config: Config) -> bool:
    """Whether this job reserves a core: ``config.reserve_core`` or ``FTKIT_RESERVE_CORE=1``.

    Raises
    ------
    ConfigError
        If ``FTKIT_RESERVE_CORE`` is set to something other than 0 or 1.
    """
    raw = os.environ.get(RESERVE_CORE_ENV, "").strip()
    if raw not in ("", "0", "1"):
        raise ConfigError(f"{RESERVE_CORE_ENV}={raw!r}: expected 1 (reserve the last core of each process's "
                          "CPU set for the checkpoint work) or 0")
    return bool(config.reserve_core) or raw == "1"


def reserved_split() -> tuple[frozenset[int], frozenset[int]] | None:
    """Return (application CPUs, reserved CPU) from this process's CPU set; None on one CPU or not Linux."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return frozenset(cpus[:-1]), frozenset(cpus[-1:])


def _pin_process(cpus: frozenset[int]) -> frozenset[int]:
    """Pin every current thread of this process to ``cpus``; return the calling thread's set after it."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [threading.get_native_id()]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # a thread that ended meanwhile
    return frozenset(os.sched_getaffinity(threading.get_native_id()))


def pin_application(config: Config) -> frozenset[int] | None:
    """Pin this application rank off the reserved core if the job reserves one; return its CPU set or None.

    Raises
    ------
    ConfigError
        If ``FTKIT_RESERVE_CORE`` has a value other than 0 or 1.
    """
    return _pin_rank(config, "application", 0)


def pin_ft_thread() -> frozenset[int] | None:
    """Pin the calling (post-processing) thread to the reserved core, if the application was pinned."""
    if not _split:
        return None
    tid = threading.get_native_id()
    os.sched_setaffinity(tid, _split[0][1])
    pinned["ft-thread"] = frozenset(os.sched_getaffinity(tid))
    return pinned["ft-thread"]


def pin_head(config: Config) -> frozenset[int] | None:
    """Pin this head rank (all its threads) to the reserved core if the job reserves one.

    Raises
    ------
    ConfigError
        If ``FTKIT_RESERVE_CORE`` has a value other than 0 or 1.
    """
    return _pin_rank(config, "head", 1)


def _pin_rank(config: Config, role: str, side: int) -> frozenset[int] | None:
    """Pin every thread of this process to side ``side`` of the reserved split (0: the application's
    cores, 1: the reserved core) if the job reserves one; the application's split is kept for
    :func:`pin_ft_thread`."""
    if not reserve_core_requested(config):
        return None
    split = _split[0] if _split and role == "application" else reserved_split()
    if split is None:
        return None
    if role == "application" and not _split:
        _split.append(split)
    pinned[role] = _pin_process(split[side])
    return pinned[role]
