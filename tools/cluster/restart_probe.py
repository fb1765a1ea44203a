"""Where a restarting job's ``Checkpointer()`` + ``recover()`` time goes, per phase, on the virtual cluster.

    python tools/cluster/restart_probe.py [--hosts 4] [--per-host 2] [--mib 64] [--level 1] [--repeats 5]
                                          [--src-a /work/main/src] [--src-b src]

Brings up its own virtual cluster (prefix ``rp<pid>``, removed at the end, whatever happens), takes one
checkpoint at ``--level`` (its hosts' disks lost before each restart as ``cluster_sbs.py`` loses them: L2
node2, L3 node2 and node4, L4 every host) with ``benchmarks/fti/ckpt_ftkit.py`` and then restarts from it
``--repeats`` times with each of the two source trees (``--src-a`` / ``--src-b``, put first on every rank's
``PYTHONPATH``: an A/B of old and new code in one loop, alternating which goes first). Each restart job is
this file in job mode: the functions of :data:`PHASES` are wrapped with timers, and rank 0 prints, per phase,
the slowest rank's seconds in it and when (from the barrier before ``Checkpointer()``) the slowest rank left
it, then ``restart_s`` as ``ckpt_ftkit.py`` measures it (``Checkpointer()`` + ``protect`` + ``recover()``,
from a barrier). A summary prints each tree's median ``restart_s`` and its phases' medians.

Root and network namespaces are needed (exit 77 otherwise). Timings on a busy machine are indicative only.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: (module, attribute) timed in a restart job: the start-up steps of ``open_session`` and the recovery.
PHASES = [
    ("ftkit.checkpoint.events", "load_config"),
    ("ftkit.checkpoint.online.exithook", "install"),
    ("ftkit.checkpoint.opening", "open_session"),
    ("ftkit.uncaught", "install"),
    ("ftkit.checkpoint._mpi", "internal_comm"),
    ("ftkit.checkpoint._mpi", "barrier"),
    ("ftkit.mpienv", "warn_if_l1_shared"),
    ("ftkit.checkpoint.opening", "detect_node_ids"),
    ("ftkit.checkpoint.opening", "plan_topology"),
    ("ftkit.checkpoint.opening", "prepare_dirs"),
    ("ftkit.checkpoint.opening", "take_run_lock"),
    ("ftkit.checkpoint.opening", "agree_run_state"),
    ("ftkit.checkpoint.opening", "build_session"),
    ("ftkit.checkpoint.exitpolicy", "ExitPolicy.__init__"),
    ("ftkit.checkpoint.opening", "group_comm"),
    ("ftkit.checkpoint.checkpointer", "Checkpointer.recover"),
    ("ftkit.checkpoint._mpi", "allreduce_int"),
    ("ftkit.checkpoint._mpi", "allgather"),
    ("ftkit.checkpoint._mpi", "bcast"),
    ("ftkit.checkpoint.recovery", "_read_located"),
]


def _wrap(spent: dict[str, list[float]], t0: list[float]) -> None:
    """Wrap every function of :data:`PHASES` this ftkit has: its seconds and end time into ``spent``."""
    for module, name in PHASES:
        try:
            owner: Any = importlib.import_module(module)
        except ImportError:
            continue
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        fn = getattr(owner, attr, None) if owner is not None else None
        if fn is None:
            continue
        key = f"{module.rsplit('.', 1)[1]}.{name}"

        def timed(*a: Any, _fn: Any = fn, _key: str = key, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                end = time.perf_counter()
                s = spent.setdefault(_key, [0.0, 0.0, 0.0])
                s[0] += end - start
                s[1] = end - t0[0]
                s[2] += 1

        functools.update_wrapper(timed, fn)
        setattr(owner, attr, timed)


def job(config: str, mib: int) -> int:
    """One restart job (every rank): time the phases, check the data, print the slowest rank's figures."""
    import numpy as np
    from mpi4py import MPI

    sys.path.insert(0, str(REPO / "benchmarks" / "fti"))
    from ckpt_ftkit import CHUNK, fill_expected

    import ftkit.checkpoint.opening  # noqa: F401 - the modules to wrap, imported before the timing
    from ftkit import Checkpointer

    spent: dict[str, list[float]] = {}
    t0 = [0.0]
    _wrap(spent, t0)
    n = (mib << 20) // 8
    buf = np.zeros(n, np.uint64)
    world = MPI.COMM_WORLD
    world.Barrier()
    t0[0] = time.perf_counter()
    start = MPI.Wtime()
    ck = Checkpointer(config, world)
    init_s = MPI.Wtime() - start
    ck.protect("buf", buf)
    ck.recover()
    restart_s = MPI.Wtime() - start
    rank = world.Get_rank()
    ok = all(np.array_equal(buf[i:i + CHUNK], fill_expected(np.empty(min(CHUNK, n - i), np.uint64), i, rank))
             for i in range(0, n, CHUNK))
    names = sorted(set().union(*world.allgather(sorted(spent))))
    rows = [(k, world.allreduce(spent.get(k, [0.0])[0], op=MPI.MAX),
             world.allreduce(spent.get(k, [0.0, 0.0])[1], op=MPI.MAX),
             int(spent.get(k, [0, 0, 0])[2])) for k in names]
    slowest = [world.allreduce(x, op=MPI.MAX) for x in (init_s, restart_s)]
    ok = world.allreduce(ok, op=MPI.LAND)
    ck._close()  # the checkpoint stays for the next restart
    if rank == 0:
        text = ",".join(f"{k}:{s:.3f}@{e:.3f}x{c}" for k, s, e, c in rows)
        print(f"PROBERESULT ok={int(ok)} init_s={slowest[0]:.4f} restart_s={slowest[1]:.4f} phases={text}",
              flush=True)
    return 0 if ok else 1


def driver(a: argparse.Namespace) -> int:
    """Bring up a cluster, checkpoint once, restart ``--repeats`` times with each tree, print a summary."""
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "benchmarks" / "fti"))
    from tools.cluster.vcluster import ClusterUnavailable, down, up
    from tools.cluster.vcluster._sys import check_capable

    try:
        check_capable()
    except ClusterUnavailable as exc:
        print(f"no virtual cluster here: {exc}")
        return 77
    import cluster_sbs

    tag = f"rp{os.getpid() % 10000}"
    base = Path(f"/var/tmp/ftkit-vcluster-{tag}")
    c = up(a.hosts, 0, max(256, 4 * a.mib * a.per_host + 64), base, prefix=tag)
    trees = {"A": str(Path(a.src_a).resolve()), "B": str(Path(a.src_b).resolve())}
    results: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    try:
        cfg = cluster_sbs.make_config(c, "ftkit", a.level, a.per_host, "probe")
        env = {**os.environ, **c.mpi_env()}
        argv = [str(cfg), "ckpt", str(a.mib), str(a.level)]
        ck = cluster_sbs.run(c, cluster_sbs.ftkit_command(c, a.per_host, argv), "probe ckpt", env)
        if ck.get("ok") != "1":
            print(f"the checkpoint failed: {ck}")
            return 1
        for rep in range(a.repeats):
            for name in ("AB" if rep % 2 == 0 else "BA"):
                cluster_sbs.lose_disks(c, a.level)  # the hosts the level must survive losing (L1: none)
                env_t = {**env, "PYTHONPATH": trees[name]}
                cmd = cluster_sbs.build_mpirun_command(
                    a.hosts * a.per_host, [sys.executable, __file__, "--job", str(cfg), "--mib", str(a.mib)])
                cmd[1:1] = ["--host", c.hostlist(c.hosts, a.per_host), "-x", f"PYTHONPATH={trees[name]}"]
                out = subprocess.run(c.login(cmd, cwd=c.shared), cwd=c.shared, env=env_t, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=a.job_timeout,
                                     stdin=subprocess.DEVNULL)
                line = next((x for x in out.stdout.splitlines() if x.startswith("PROBERESULT")), None)
                if line is None:
                    print(f"[{rep}] {name}: no result, rc {out.returncode}\n{out.stdout[-3000:]}", flush=True)
                    continue
                fields = dict(kv.split("=", 1) for kv in line.split()[1:])
                phases = {k: float(v.split("@")[0]) for k, v in
                          (p.split(":") for p in fields["phases"].split(","))}
                results[name].append({"restart_s": float(fields["restart_s"]), "ok": fields["ok"],
                                      "phases": phases})
                print(f"[{rep}] {name}: {line}", flush=True)
    finally:
        down(base, tag)
    for name, rows in results.items():
        if not rows:
            continue
        med = statistics.median(r["restart_s"] for r in rows)
        keys = sorted(set().union(*(r["phases"] for r in rows)))
        ph = ", ".join(f"{k} {statistics.median(r['phases'].get(k, 0.0) for r in rows):.3f}" for k in keys)
        print(f"{name} ({trees[name]}): restart_s median {med:.3f} over {len(rows)} "
              f"(all ok: {all(r['ok'] == '1' for r in rows)}); phases: {ph}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job", default=None, help=argparse.SUPPRESS)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--src-a", default="/work/main/src", help="tree A (old code), first on PYTHONPATH")
    p.add_argument("--src-b", default=str(REPO / "src"), help="tree B (new code)")
    p.add_argument("--job-timeout", type=float, default=240.0)
    a = p.parse_args()
    if a.job:
        return job(a.job, a.mib)
    return driver(a)


if __name__ == "__main__":
    sys.exit(main())
