"""What a lost host costs a run: ``ftkit launch --restarts`` against a failure-free run, a relaunch by hand
and online recovery with spare ranks (issue 32).

On the virtual cluster (``tools/cluster/vcluster``: root and network namespaces; 4 hosts + 1 spare host),
examples/heat.py runs on 8 ranks (2 per host) with an L2 checkpoint every ``--interval`` steps, under Open
MPI.
``node2`` is powered off at a random moment (``--seed``) of the computation: after the run's first committed
checkpoint, within the first 70 % of the failure-free run's remaining compute time.
Measured (seconds, this script's clock, lines of the job timestamped as they arrive):

- **free**: the failure-free run, total time;
- **restarts**: ``ftkit launch --hosts node1..node5 --spare-nodes 1 --restarts 3``: total time, and the
  relaunch overhead = power-off -> the relaunched run's ``heat: recovered`` line (detection, the job's end,
  the probes, the relaunch, ``Checkpointer()`` and the recovery);
- **by hand**: ``ftkit launch --hosts node1..node4``; when it has ended, the script at once runs it again on
  node1,node5,node3,node4 (what a job script does that knows which host died): the same two figures;
- **online**: 10 processes, the last two spare ranks (``spare_ranks = 2``, on node5), ULFM; node2's two ranks
  are SIGKILLed (a powered-off host takes its PRRTE daemon with it and ends the job, so online recovery is
  measured on a crash of the host's processes): total time, and the overhead = the recovery's phases as the
  run reports them.

Each faulted run must end 0 with the failure-free run's digest (checked; a mismatch is printed).

Where the relaunch overhead goes (``restarts``, from the timestamps of the job's lines): **end** = power-off
-> the relaunch line minus the probe and flush times it reports (the first run's end: detection by the
runtime, the survivors' agreement and exit), **probe** and **flush** (as the relaunch line says), **restart**
= the relaunch line -> ``heat: recovered`` (the relaunch's start, ``Checkpointer()`` and the recovery). ``by
hand``: **end** = power-off -> the first job's end, **restart** = the second job's start -> its ``heat:
recovered``.

``--repeats N`` runs every variant N times, in a shuffled order each round (no variant always runs after the
same one), and prints the median and p90 of each variant's overhead and total time, and each overhead's ratio
to online recovery's (median over median).

Run: ``python benchmarks/relaunch_overhead.py --repeats 5 --seed 3`` (``--smoke``: a tiny run that only shows
it works; ``--variants restarts,online`` a subset; ``--json FILE`` keeps the numbers). Not a test: timings on
a shared machine are noisy; nothing here records them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.cluster.vcluster import down, faults, up  # noqa: E402
from tools.cluster.vcluster.cluster import Cluster  # noqa: E402

HEAT = REPO / "examples" / "heat.py"
_FIRST_CKPT = r"checkpoint 1 at L2"
FTKIT = str(Path(sys.executable).with_name("ftkit"))


class Job:
    """A command on the login node, its output lines timestamped (``time.monotonic``) as they arrive."""

    def __init__(self, c: Cluster, argv: list[str], cwd: Path, timeout: float) -> None:
        self.lines: list[tuple[float, str]] = []
        self.start = time.monotonic()
        self.proc = subprocess.Popen(c.login(argv, cwd=cwd), cwd=cwd, start_new_session=True, text=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **c.mpi_env()})
        self.timeout = timeout
        self.readers = [threading.Thread(target=self._read, args=(pipe,), daemon=True)
                        for pipe in (self.proc.stdout, self.proc.stderr)]
        for t in self.readers:
            t.start()

    def _read(self, pipe) -> None:  # type: ignore[no-untyped-def]
        for line in pipe:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait(self) -> tuple[int, float]:
        """Exit code (-9 if killed at the timeout) and elapsed seconds."""
        try:
            rc = self.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            rc = -9
        for t in self.readers:
            t.join(30)
        return rc, time.monotonic() - self.start

    def wait_line(self, pattern: str) -> float:
        """Wait (bounded by the timeout) for a line matching ``pattern``; return when it came."""
        deadline = time.monotonic() + self.timeout
        while (hit := self.first(pattern)) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job ended or timed out before a line {pattern!r}:\n{self.text()}")
            time.sleep(0.02)
        return hit[0]

    def first(self, pattern: str, after: float = 0.0) -> tuple[float, str] | None:
        return next(((t, ln) for t, ln in self.lines if t >= after and re.search(pattern, ln)), None)

    def text(self) -> str:
        return "\n".join(ln for _, ln in self.lines)


def _config(c: Cluster, name: str, interval: int, spare_ranks: int = 0) -> Path:
    d = c.shared / name
    d.mkdir(parents=True, exist_ok=True)
    extra = f"spare_ranks = {spare_ranks}\n" if spare_ranks else ""
    (d / "ftkit.ini").write_text(
        f"[basic]\nckpt_dir = {c.local / name}\nglbl_dir = {d / 'global'}\nmeta_dir = {d / 'meta'}\n"
        f"group_size = 2\nckpt_l2 = {interval}\n[ftkit]\ninterval_unit = iterations\nfailure_timeout = 60\n"
        f"{extra}")
    return d


def _digest(text: str) -> str | None:
    m = re.search(r"^digest ([0-9a-f]{16})$", text, re.M)
    return m.group(1) if m else None


def _heat(a: argparse.Namespace) -> list[str]:
    return [sys.executable, str(HEAT), "--steps", str(a.steps), "--size", str(a.size), "--pause",
            str(a.pause), "--config", "ftkit.ini"]


def _launch(hosts: list[str], n: int, *opts: str) -> list[str]:
    return [FTKIT, "launch", "--launcher", "openmpi", "--hosts", ",".join(hosts), "-n", str(n), *opts, "--"]


def _reset(c: Cluster) -> None:
    for h in c.all_hosts:
        if not c.is_up(h):
            faults.reboot(c, h)


def run_free(c: Cluster, a: argparse.Namespace) -> dict:
    d = _config(c, "free", a.interval)
    job = Job(c, _launch(c.hosts, 8) + _heat(a), d, a.timeout)
    rc, total = job.wait()
    return {"rc": rc, "total_s": total, "digest": _digest(job.text())}


def run_restarts(c: Cluster, a: argparse.Namespace, at: float) -> dict:
    d = _config(c, "restarts", a.interval)
    job = Job(c, _launch(c.all_hosts, 8, "--spare-nodes", "1", "--restarts", "3", "--config", "ftkit.ini")
              + _heat(a), d, a.timeout)
    job.wait_line(_FIRST_CKPT)
    time.sleep(at)
    off = time.monotonic()
    faults.poweroff(c, "node2")
    rc, total = job.wait()
    rec = job.first(r"^heat: recovered", off)
    line = job.first(r"relaunch 1/") or (0.0, "")
    return {"rc": rc, "total_s": total, "digest": _digest(job.text()), "poweroff_after_s": off - job.start,
            "output": job.text(), "overhead_s": rec[0] - off if rec else None, "relaunch_line": line[1],
            "phases": _restart_phases(off, line, rec)}


def _restart_phases(off: float, line: tuple[float, str], rec: tuple[float, str] | None) -> dict[str, float]:
    """The overhead of ``--restarts`` by phase, from the relaunch line (its time and the times it reports)."""
    if not line[1] or rec is None:
        return {}
    took = {k: float(v) for k, v in re.findall(r"(probes|flush) (\d+\.\d+) s", line[1])}
    probe, flush = took.get("probes", 0.0), took.get("flush", 0.0)
    return {"end": line[0] - off - probe - flush, "probe": probe, "flush": flush, "restart": rec[0] - line[0]}


def run_by_hand(c: Cluster, a: argparse.Namespace, at: float) -> dict:
    d = _config(c, "byhand", a.interval)
    job = Job(c, _launch(c.hosts, 8) + _heat(a), d, a.timeout)
    job.wait_line(_FIRST_CKPT)
    time.sleep(at)
    off = time.monotonic()
    faults.poweroff(c, "node2")
    rc1, _ = job.wait()
    ended = time.monotonic()
    again = Job(c, _launch(["node1", "node5", "node3", "node4"], 8) + _heat(a), d, a.timeout)
    rc, _ = again.wait()
    rec = again.first(r"^heat: recovered")
    return {"rc_first": rc1, "rc": rc, "total_s": time.monotonic() - job.start,
            "digest": _digest(again.text()), "output": again.text(),
            "poweroff_after_s": off - job.start, "overhead_s": rec[0] - off if rec else None,
            "phases": {"end": ended - off, "restart": rec[0] - again.start} if rec else {}}


def run_online(c: Cluster, a: argparse.Namespace, at: float) -> dict:
    """Spare ranks on node5 (mpirun --host node1:2,...,node5:2, spare_ranks = 2); node2's ranks SIGKILLed."""
    from ftkit.launch import build_mpirun_command

    d = _config(c, "online", a.interval, spare_ranks=2)
    cmd = build_mpirun_command(10, _heat(a))
    cmd[1:1] = ["--host", c.hostlist(c.all_hosts, 2)]
    job = Job(c, cmd, d, a.timeout)
    job.wait_line(_FIRST_CKPT)
    time.sleep(at)
    killed = 0
    for p in c.processes("node2"):
        try:
            if HEAT.name.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                os.kill(p, signal.SIGKILL)
                killed += 1
        except OSError:
            pass
    rc, total = job.wait()
    line = (job.first(r"^heat: online recovery") or (0, ""))[1]
    phases = [float(x) for x in re.findall(r" (\d+\.\d+) s", line)]
    return {"rc": rc, "total_s": total, "digest": _digest(job.text()), "ranks_killed": killed,
            "overhead_s": sum(phases) if phases else None, "recovery_line": line, "output": job.text()}


VARIANTS = {"restarts": run_restarts, "by hand": run_by_hand, "online": run_online}


def _p90(xs: list[float]) -> float:
    """The 90th percentile (nearest rank) of ``xs``."""
    ys = sorted(xs)
    return ys[max(0, -(-9 * len(ys) // 10) - 1)]


def summary(results: dict[str, list[dict]]) -> list[str]:
    """One line per variant: median and p90 of the overhead and the total, the ratio of the median overhead
    to online recovery's, and the median of each phase."""
    medians = {name: statistics.median(xs) for name, runs in results.items()
               if (xs := [r["overhead_s"] for r in runs if r.get("overhead_s") is not None])}
    lines = []
    for name, runs in results.items():
        over = [r["overhead_s"] for r in runs if r.get("overhead_s") is not None]
        total = [r["total_s"] for r in runs]
        if not over:
            lines.append(f"{name:10}: {len(runs)} run(s), no overhead measured")
            continue
        ratio = (f", {medians[name] / medians['online']:.2f}x online" if name != "online" and
                 medians.get("online") else "")
        phases = sorted({k for r in runs for k in r.get("phases", {})})
        split = ", ".join(f"{k} {statistics.median([r['phases'][k] for r in runs if k in r.get('phases', {})]):.2f}"  # noqa: E501
                          for k in phases)
        lines.append(f"{name:10}: {len(over)} run(s), overhead median {statistics.median(over):.2f} s, p90 "
                     f"{_p90(over):.2f} s{ratio}; total median {statistics.median(total):.1f} s, p90 "
                     f"{_p90(total):.1f} s" + (f"; phases (median s): {split}" if split else ""))
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--interval", type=int, default=20, help="L2 checkpoint every N steps")
    p.add_argument("--pause", type=float, default=0.02, help="seconds of sleep per step (a longer run)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--repeats", type=int, default=1, help="runs of every variant (shuffled order each round)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="which variants (comma-separated)")
    p.add_argument("--timeout", type=float, default=900.0, help="bound for each job (s)")
    p.add_argument("--smoke", action="store_true", help="a tiny run: shows the script works, nothing more")
    p.add_argument("--json", default=None, help="write the numbers to this file")
    a = p.parse_args()
    names = [v.strip() for v in a.variants.split(",") if v.strip()]
    if a.repeats < 1 or not names or any(v not in VARIANTS for v in names):
        p.error(f"--repeats must be >= 1 and --variants a list of {', '.join(VARIANTS)}")
    if a.smoke:
        a.steps, a.size, a.interval, a.pause = 100, 64, 10, 0.05
    rng = random.Random(a.seed)
    tag = f"fr{os.getpid() % 10000}"
    base = Path(f"/var/tmp/ftkit-bench-relaunch-{tag}")
    c = up(4, 1, 64, base, prefix=tag)
    try:
        free = run_free(c, a)
        print(f"free      : rc {free['rc']}, {free['total_s']:.1f} s", flush=True)
        results: dict[str, list[dict]] = {name: [] for name in names}
        for round_ in range(a.repeats):
            order = list(names)
            rng.shuffle(order)
            for name in order:
                _reset(c)
                at = rng.uniform(0.0, 0.7) * (a.steps - a.interval) * a.pause
                r = VARIANTS[name](c, a, at)
                same = "bit for bit" if r["digest"] == free["digest"] and r["digest"] else "DIGEST DIFFERS"
                over = f"{r['overhead_s']:.2f} s" if r.get("overhead_s") is not None else "n/a"
                phases = ", ".join(f"{k} {v:.2f}" for k, v in r.get("phases", {}).items())
                print(f"[{round_ + 1}/{a.repeats}] {name:10}: rc {r['rc']}, {r['total_s']:.1f} s total "
                      f"(+{r['total_s'] - free['total_s']:.1f} s), fault {at:.1f} s after checkpoint 1, "
                      f"overhead {over}" + (f" ({phases})" if phases else "") + f", {same}", flush=True)
                if same != "bit for bit" or r["rc"] != 0:
                    print(r.get("output", "")[-3000:], flush=True)
                r.pop("output", None)
                results[name].append(r)
        print("summary:", flush=True)
        for line in summary(results):
            print(line, flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps({"free": free, "args": vars(a), **results}, indent=1))
    finally:
        down(base, tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
