"""Online recovery (issue 17) against the relaunch path, and the cost of idle spares.

A heat-like solver protects ``--mib`` MiB per rank (its band plus a payload array) and checkpoints at
``--level`` (2 or 3) every ``--interval`` steps, on ``--ranks`` ranks in emulated nodes of ``--node-size``.
One rank is SIGKILLed from outside once the run passes step ``--kill-at``. Measured, in one run of this
script (seconds, one clock for every process, ``time.monotonic``):

- **online** (``--spares`` spares): kill -> first step computed after the recovery, with the phases of
  the recovery (detection: kill -> this rank saw the failure; repair: agreement, shrink, spare promotion;
  adopt: the repaired communicator set up; restore: the protected arrays read back, the replacement's
  files rebuilt from its group, which re-establishes the redundancy);
- **relaunch** (no spares): kill -> the job is gone (ULFM detection, teardown) -> ``ftkit launch`` again,
  ``Checkpointer()``, ``recover()`` -> first step computed;
- **idle spares**: the error-free loop time with and without the spares (the target is <= 2 % slower).

Run: ``python benchmarks/bench_online.py --ranks 8 --node-size 2 --spares 2 --mib 16 --level 3``
(add ``--json FILE`` to keep the numbers). Not a test: timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()


# -- the worker (one MPI job) ------------------------------------------------------------------------------

def worker(a: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE.parents[1] / "examples"))
    import heat

    import ftkit
    from ftkit.failure import exit_without_finalize

    out = Path(a.dir)
    ckpt = ftkit.Checkpointer(str(out / "ftkit.ini"))
    comm = ckpt.comm
    (out / f"pid.{comm.rank}").write_text(str(os.getpid()))
    n = a.size
    start, stop = heat.row_band(n, comm.size, comm.rank)
    u = heat.initial_band(n, start, stop)
    payload = np.full(max(1, (a.mib << 20) // 8 - u.size), float(comm.rank))
    ckpt.protect("u", u)
    ckpt.protect("payload", payload)
    first_after: float | None = None
    t0 = time.monotonic()
    resumed = ckpt.restarted
    try:
        for step in ckpt.steps(a.steps):
            comm = ckpt.comm
            heat.exchange_halos(comm, u)
            heat.jacobi_rows(u, start, n)
            payload[step % payload.size] += 1.0
            if a.pause:
                time.sleep(a.pause)
            if first_after is None and (resumed or ckpt.recoveries):
                first_after = time.monotonic()
            ckpt.snapshot()
            if comm.rank == 0:
                (out / "progress").write_text(str(step))
    except Exception:  # noqa: BLE001 - the relaunch case (a raw MPI error on ckpt.comm without spares)
        exit_without_finalize(None, 2)  # this job is over; no MPI_Finalize (ompi#11404)
    loop = time.monotonic() - t0
    reports = ckpt.recoveries
    ckpt.finalize()
    if comm.rank == 0:
        r = reports[-1] if reports else None
        (out / f"result.{os.getpid()}.json").write_text(json.dumps({
            "loop_s": loop, "first_step_after": first_after, "restarted": resumed,
            "phases": None if r is None else {"detected": r.detected, "rebuilt": r.rebuilt,
                                               "adopted": r.adopted, "restored": r.restored,
                                               "level": r.level}}))
    if reports:
        exit_without_finalize(comm, 0)


# -- the driver ----------------------------------------------------------------------------------------------

CONFIG = """[basic]
ckpt_dir = {d}/run/local
glbl_dir = {d}/run/global
meta_dir = {d}/run/meta
group_size = {group}
ckpt_l{level} = {interval}
[ftkit]
interval_unit = iterations
l3_code = rs
failure_timeout = 120
"""


def _job(a: argparse.Namespace, d: Path, spares: int, steps: int) -> tuple[threading.Thread, list]:
    from ftkit.launch import run_mpi

    box: list = []
    cmd = [sys.executable, str(HERE), "--worker", "--dir", str(d), "--size", str(a.size), "--mib", str(a.mib),
           "--steps", str(steps), "--pause", str(a.pause)]

    def run() -> None:
        box.append(run_mpi(a.ranks, cmd, timeout=a.timeout, node_size=a.node_size, cwd=d, spares=spares))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _wait(test, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise SystemExit("bench_online: timed out waiting for the job")
        time.sleep(0.005)


def _kill_when_ready(d: Path, a: argparse.Namespace, thread: threading.Thread) -> float:
    from ftkit.inject import kill_pid

    def progressed() -> bool:
        try:
            return int((d / "progress").read_text()) >= a.kill_at
        except (FileNotFoundError, ValueError):
            return not thread.is_alive()

    _wait(progressed, a.timeout)
    pid = int((d / f"pid.{a.victim}").read_text())
    t_kill = time.monotonic()
    kill_pid(pid)
    return t_kill


def _results(d: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(d.glob("result.*.json"), key=os.path.getmtime)]


def _fresh(root: Path, name: str, a: argparse.Namespace) -> Path:
    d = root / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    group = max(2, min(4, a.ranks // a.node_size))
    (d / "ftkit.ini").write_text(CONFIG.format(d=d, group=group, level=a.level, interval=a.interval))
    return d


def online_case(a: argparse.Namespace, root: Path) -> dict:
    d = _fresh(root, "online", a)
    thread, box = _job(a, d, a.spares, a.steps)
    t_kill = _kill_when_ready(d, a, thread)
    thread.join(a.timeout + 60)
    res = _results(d)[-1]
    ph = res["phases"]
    return {"kill_to_first_step_s": res["first_step_after"] - t_kill, "detection_s": ph["detected"] - t_kill,
            "repair_s": ph["rebuilt"] - ph["detected"], "adopt_s": ph["adopted"] - ph["rebuilt"],
            "restore_and_rebuild_s": ph["restored"] - ph["adopted"], "level": ph["level"],
            "exit": box[0].returncode if box else None}


def relaunch_case(a: argparse.Namespace, root: Path) -> dict:
    d = _fresh(root, "relaunch", a)
    thread, _ = _job(a, d, 0, a.steps)
    t_kill = _kill_when_ready(d, a, thread)
    thread.join(a.timeout + 60)
    t_gone = time.monotonic()
    thread, box = _job(a, d, 0, a.steps)
    thread.join(a.timeout + 60)
    res = [r for r in _results(d) if r["restarted"]][-1]
    return {"kill_to_first_step_s": res["first_step_after"] - t_kill, "kill_to_job_gone_s": t_gone - t_kill,
            "relaunch_to_first_step_s": res["first_step_after"] - t_gone,
            "exit": box[0].returncode if box else None}


def _cpu_by_role(d: Path, napp: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by the processes of the job in ``d`` (those whose command
    line names ``d``): application ranks, and spares (world rank >= ``napp``, ``OMPI_COMM_WORLD_RANK``)."""
    from ftkit._jobproc import proc_stat

    tick = os.sysconf("SC_CLK_TCK")
    totals = [0.0, 0.0]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if str(d).encode() not in (proc / "cmdline").read_bytes():
                continue
            fields = proc_stat(int(proc.name))
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if fields is None:
            continue
        ranks = [int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK=")]
        if ranks:
            totals[ranks[0] >= napp] += (int(fields[11]) + int(fields[12])) / tick
    return totals[0], totals[1]


def _loop_cpu(d: Path, thread: threading.Thread, a: argparse.Namespace) -> tuple[float, float]:
    """CPU seconds of the application ranks and of the idle spares during the job's loop: from its first
    step (rank 0's ``progress`` file appears) to its last (``progress`` names the last step)."""
    progress = d / "progress"
    _wait(lambda: progress.exists() or not thread.is_alive(), a.timeout)
    start = _cpu_by_role(d, a.ranks)
    last = str(a.idle_steps - 1)

    def at_end() -> bool:
        try:
            return progress.read_text() == last or not thread.is_alive()
        except OSError:
            return False

    _wait(at_end, a.timeout)
    end = _cpu_by_role(d, a.ranks)
    return end[0] - start[0], end[1] - start[1]


def idle_case(a: argparse.Namespace, root: Path) -> dict:
    """The error-free loop without and with idle spares, alternated ``--idle-repeats`` times; the slowdown
    is reported from the best run of each and as the median of the ratios of consecutive pairs, and the
    CPU time of the idle spares against that of the application ranks (sampled from ``/proc``, which the
    machine's load does not distort)."""
    times: dict[int, list[float]] = {}
    cpu_app, cpu_spares = [], []
    for _ in range(a.idle_repeats):
        for spares in (0, a.spares):
            d = _fresh(root, f"idle{spares}", a)
            thread, _ = _job(a, d, spares, a.idle_steps)
            if spares:
                app, idle = _loop_cpu(d, thread, a)
                cpu_app.append(app)
                cpu_spares.append(idle)
            thread.join(a.timeout + 60)
            times.setdefault(spares, []).append(_results(d)[-1]["loop_s"])
    base, with_spares = min(times[0]), min(times[a.spares])
    pairs = sorted(w / b for b, w in zip(times[0], times[a.spares], strict=True))
    return {"loop_without_spares_s": base, "loop_with_spares_s": with_spares,
            "slowdown_pct": 100.0 * (with_spares / base - 1.0),
            "median_pair_slowdown_pct": 100.0 * (pairs[len(pairs) // 2] - 1.0),
            "loops_without_s": times[0], "loops_with_s": times[a.spares],
            "spares_cpu_s": cpu_spares, "app_cpu_s": cpu_app,
            "spares_cpu_pct_of_app": 100.0 * sum(cpu_spares) / max(sum(cpu_app), 1e-9)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--node-size", type=int, default=2)
    p.add_argument("--spares", type=int, default=2)
    p.add_argument("--mib", type=int, default=16, help="protected MiB per rank")
    p.add_argument("--level", type=int, choices=(2, 3), default=3)
    p.add_argument("--interval", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--size", type=int, default=256, help="heat grid size")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--idle-steps", type=int, default=200)
    p.add_argument("--idle-repeats", type=int, default=2, help="alternations of the idle-spares comparison")
    p.add_argument("--pause", type=float, default=0.01, help="seconds of 'compute' per step")
    p.add_argument("--kill-at", type=int, default=25)
    p.add_argument("--victim", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", default=None)
    p.add_argument("--cases", default="online,relaunch,idle", help="comma-separated: online, relaunch, idle")
    a = p.parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    root = Path(tempfile.mkdtemp(prefix="ftkit-bench-online-"))
    try:
        cases = {"online": online_case, "relaunch": relaunch_case, "idle": idle_case}
        report: dict = {"ranks": a.ranks, "node_size": a.node_size, "spares": a.spares, "mib": a.mib,
                        "level": a.level}
        for name in a.cases.split(","):
            if name not in cases:
                p.error(f"--cases: unknown case {name!r} (choose from {', '.join(cases)})")
            report[name] = cases[name](a, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if "online" in report and "relaunch" in report:
        report["online_over_relaunch"] = (report["online"]["kill_to_first_step_s"]
                                          / report["relaunch"]["kill_to_first_step_s"])
    print(json.dumps(report, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
