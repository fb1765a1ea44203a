"""ftkit side of benchmarks/fti (twin of ckpt_fti.c): one protected array per application rank.

    ftkit launch -n P --node-size S -- python ckpt_ftkit.py CONFIG ckpt    MIB LEVEL [CALLS]
    ftkit launch -n P --node-size S -- python ckpt_ftkit.py CONFIG recover MIB 0

Array: MIB MiB of uint64, element i of rank r = i * 0x9E3779B97F4A7C15 + r, every page touched before any
timing. Times (MPI.Wtime, slowest application rank), the same keys as the C program:

* ``ckpt_s``: ``checkpoint(level=LEVEL)`` from a barrier (head = 1 or inline = 0: the blocking time); with
  ``CALLS`` > 1 (default 1) the job checkpoints CALLS times, one barrier apart, and every figure is the last
  call's (a call that prunes the previous checkpoint: issue 37); ``calls_s`` lists every call's time;
* ``final_s``: ``finalize()``; ``init_s``: ``Checkpointer(...)`` alone (``ftkit.checkpoint`` is imported
  before, at the top, as FTI's library is loaded before ``FTI_Init``; ``import ftkit`` alone no longer
  imports it, so ``ftkit.Checkpointer(...)`` would time the import too);
* ``restart_s``: ``Checkpointer(...)`` + ``protect`` + ``recover()`` from a barrier; the array is compared
  with the expected values afterwards.

Where the checkpoint call's time went (slowest rank, as ckpt_fti.c): ``cpu_s`` (the calling thread on a
CPU), ``runq_s`` (waiting for a CPU), ``blk_s`` (off CPU: I/O, sleeps), ``pcpu_s`` (all threads), ``wmib``
(MiB all ranks sent to storage), and the whole disk's counters over the call, read by rank 0
(``dev_wmib``, ``dev_discmib``, ``dev_ms``, ``dirty0``: :mod:`devstat`). ``phases``: the pipeline's stage
marks (``after_write`` ..., seconds from the call's start) and the seconds spent in each function of
:data:`PHASES`, slowest rank, and L3's encoding phases (``l3_read``, ``l3_exchange``, ``l3_codec``,
``l3_write``, ``l3_commit``, ...: see :func:`time_encoding`) (``Checkpointer.last_timings`` too when the
installed ftkit has it). Prints one line ``BENCHRESULT key=value ...``; exit status 1 on a wrong restart.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit import Checkpointer  # imports ftkit.checkpoint now, before the timings (see above)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from devstat import device_now, device_text  # noqa: E402  (the device's counters over the call)

CHUNK = 1 << 20   # elements: the expected values are made and compared in 8 MiB pieces


def fill_expected(out: np.ndarray, first: int, rank: int) -> np.ndarray:
    """Element ``first + i`` of rank ``rank`` into ``out[i]``, in place: the twin holds the one buffer the
    C program holds (a second full-size array would add MIB MiB per rank that FTI and the floors lack)."""
    for i in range(0, out.size, CHUNK):
        piece = out[i:i + CHUNK]
        index = np.arange(first + i, first + i + piece.size, dtype=np.uint64)
        np.multiply(index, np.uint64(0x9E3779B97F4A7C15), out=piece)
        piece += np.uint64(rank)
    return out


def usage_now() -> tuple[float, float, float, float]:
    """The calling thread's CPU and run-queue seconds (``/proc/thread-self/schedstat``), the process's CPU
    seconds (all threads) and the bytes it sent to storage (``/proc/self/io`` write_bytes), as ckpt_fti.c."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            cpu_ns, runq_ns = (int(x) for x in f.read().split()[:2])
    except OSError:
        cpu_ns = runq_ns = 0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    wbytes = 0
    try:
        with open("/proc/self/io") as f:
            wbytes = next((int(line.split()[1]) for line in f if line.startswith("write_bytes:")), 0)
    except OSError:
        pass
    return cpu_ns * 1e-9, runq_ns * 1e-9, ru.ru_utime + ru.ru_stime, float(wbytes)


#: Functions of the checkpoint call timed by :func:`time_phases` (module, name): where the call's time goes.
_P, _O, _L = "ftkit.checkpoint.pipeline", "ftkit.checkpoint.offload", "ftkit.checkpoint.levels."
_S = "ftkit.storage."
PHASES = [(_O, "PostManager.settle_syncs"), (_O, "PostManager.sync_flags"), (_P, "write_primary"),
          (_P, "agree_written"),
          (_L + "partner", "group_comm"), (_L + "encoded", "group_comm"), (_L + "partner", "partner_copy"),
          (_P, "post_process"), (_P, "settle_primary"), (_P, "agree"), (_P, "commit_gate"),
          (_P, "commit_manifest"),
          (_O, "PostManager.remove_later"), (_P, "remove_checkpoints"), (_O, "PostManager.start"),
          # inside write_primary and the commit: what the floor does (write, fsync) and what it does not
          (_S + "format.filewrite", "write_uncommitted"), (_S + "_fsutil", "AtomicWriter.commit"),
          (_S + "_fsutil", "fsync_dir"), (_S + "_fsutil", "Writeback.close"),
          (_S + "manifest", "ManifestStore.commit"), ("ftkit.checkpoint.events", "checkpoint_taken"),
          # the L4 writer's own steps: before the first byte, and the end of a direct file (tail, head, size)
          (_S + "_fsutil", "AtomicWriter.__init__"), (_S + "format.filewrite", "_plan_file"),
          (_S + "_direct", "DirectStream.finish"),
          ("ftkit.checkpoint.schedule", "SnapshotSchedule.checkpointed"), (_P, "commit"),
          (_P, "plan_job"), ("ftkit.checkpoint.session", "Session.agree_id")]


def time_phases(spent: dict[str, float]) -> None:
    """Wrap the functions of :data:`PHASES` (those this ftkit has) to add their seconds to ``spent``."""
    import functools
    import importlib
    import time

    for module, name in PHASES:
        try:
            owner = importlib.import_module(module)
        except ImportError:
            continue
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        fn = getattr(owner, attr, None) if owner is not None else None
        if fn is None or getattr(fn, "_timed", False):
            continue
        key = attr if name.startswith("PostManager.") or "." not in name else name  # AtomicWriter.commit

        def timed(*a, _fn=fn, _key=key, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[_key] = spent.get(_key, 0.0) + time.perf_counter() - t

        timed._timed = True  # type: ignore[attr-defined]
        functools.update_wrapper(timed, fn)
        setattr(owner, attr, timed)
    time_encoding(spent)


def time_encoding(spent: dict[str, float]) -> None:
    """L3: add ``encode_group``'s own phase timers (``stats=``: read, exchange, codec, write, commit, ...) to
    ``spent`` as ``l3_<phase>``, seconds (``l3_codec_cpu``: the codec thread's CPU)."""
    import functools
    import importlib

    try:
        owner = importlib.import_module(_L + "encoded")
    except ImportError:
        return
    fn = getattr(owner, "encode_group", None)
    if fn is None or getattr(fn, "_timed", False):
        return

    def timed(*a, _fn=fn, **k):
        stats: dict[str, float] = {}
        try:
            return _fn(*a, **{**k, "stats": stats})
        finally:
            for key, v in stats.items():
                if key not in ("chunk_bytes", "chunks"):
                    spent["l3_" + key] = spent.get("l3_" + key, 0.0) + v

    timed._timed = True  # type: ignore[attr-defined]
    functools.update_wrapper(timed, fn)
    owner.encode_group = timed


def main() -> int:
    config, mode, mib, level = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    calls = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    n = (mib << 20) // 8
    buf = np.zeros(n, np.uint64)
    buf.fill(0)
    world = MPI.COMM_WORLD
    world.Barrier()
    t0 = MPI.Wtime()
    ck = Checkpointer(config, world)           # head ranks serve inside and never return
    init_s = MPI.Wtime() - t0
    app = ck.comm.Dup()                         # still valid after finalize()
    rank = app.Get_rank()
    ck.protect("buf", buf)
    restarted = bool(ck.restarted)
    ok, ckpt_s, restart_s = True, 0.0, 0.0
    used = [0.0, 0.0, 0.0, 0.0]   # thread CPU s, thread run-queue s, process CPU s, bytes to storage
    marks: dict[str, float] = {}
    spent: dict[str, float] = {}
    calls_s: list[float] = []
    dev = ""
    if mode == "ckpt":
        fill_expected(buf, 0, rank)
        time_phases(spent)
        for _ in range(calls):   # the figures are the last call's
            marks.clear()
            spent.clear()
            app.Barrier()
            d0 = device_now(config) if rank == 0 else None
            u0 = usage_now()
            t1 = MPI.Wtime()
            ctx = getattr(getattr(ck, "_session", None), "ctx", None) or getattr(ck, "_ctx", None)
            if ctx is not None and getattr(ctx, "fault_hook", 1) is None:   # stage marks: pipeline hooks
                ctx.fault_hook = lambda stage, t1=t1: marks.setdefault(stage, MPI.Wtime() - t1)
            ck.checkpoint(level=level)
            ckpt_s = MPI.Wtime() - t1
            used = [b - a for a, b in zip(u0, usage_now(), strict=True)]
            dev = device_text(d0, device_now(config)) if d0 is not None else ""
            calls_s.append(app.allreduce(ckpt_s, op=MPI.MAX))
            if ctx is not None and ctx.fault_hook is not None:
                ctx.fault_hook = None
    else:
        ck.recover()
        restart_s = MPI.Wtime() - t0
        ok = restarted and all(np.array_equal(buf[i:i + CHUNK], fill_expected(np.empty(min(CHUNK, n - i),
                                                                                    np.uint64), i, rank))
                               for i in range(0, n, CHUNK))
    phases = dict(getattr(ck, "last_timings", None) or {})
    if mode == "ckpt":   # slowest rank's stage marks (s from the call's start) and seconds per function
        for stage in ("after_write", "after_post", "before_commit", "after_commit"):
            phases[stage] = app.allreduce(marks.get(stage, -1.0), op=MPI.MAX)
        for name in sorted(set().union(*app.allgather(sorted(spent)))):
            phases[name] = app.allreduce(spent.get(name, 0.0), op=MPI.MAX)
    app.Barrier()
    t2 = MPI.Wtime()
    ck.finalize()
    final_s = MPI.Wtime() - t2
    slowest = [app.allreduce(x, op=MPI.MAX) for x in (init_s, ckpt_s, restart_s, final_s)]
    ok = app.allreduce(ok, op=MPI.LAND)
    cpu_s, runq_s, pcpu_s = (app.allreduce(x, op=MPI.MAX) for x in used[:3])
    blk_s = app.allreduce(ckpt_s - used[0] - used[1], op=MPI.MAX)   # the calling thread off CPU, not queued
    wmib = app.allreduce(used[3], op=MPI.SUM) / 1048576
    if rank == 0:
        phase_text = ",".join(f"{k}:{v:.4f}" for k, v in phases.items()) or "-"
        print(f"BENCHRESULT mode={mode} ranks={app.Get_size()} mib={mib} level={level} ok={int(ok)} "
              f"init_s={slowest[0]:.4f} ckpt_s={slowest[1]:.4f} restart_s={slowest[2]:.4f} "
              f"final_s={slowest[3]:.4f} cpu_s={cpu_s:.4f} pcpu_s={pcpu_s:.4f} runq_s={runq_s:.4f} "
              f"blk_s={blk_s:.4f} wmib={wmib:.1f} {dev} phases={phase_text}"
              + (f" calls_s={','.join(f'{c:.4f}' for c in calls_s)}" if calls > 1 else ""), flush=True)
    app.Free()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
