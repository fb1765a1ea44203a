"""Random online kill campaign (issue 17): victims SIGKILLed from outside by PID while the heat solver runs
with spare ranks in ``for step in ckpt.steps(n)``.

usage: python benchmarks/online_campaign.py [--trials 60] [--seed 1] [--out results.jsonl] [--timeout 150]
       [--kinds rank,node,...]

Each trial is one job of ``tests/programs/online_heat.py`` (4 application ranks, 32x32 grid, 30 steps of
20 ms, L2 or RS-coded L3 every 5 steps, an L4 checkpoint every 10 steps in half the trials) with a random
victim kind (:data:`KINDS`, in turn):

``rank``       one random rank, at a random moment (a random step 4-19, then a random delay of 0-0.1 s);
``rank0``      rank 0 at a random moment;
``node``       both ranks of a random emulated node at once, its node-local directory deleted;
``inline``     a random rank stopped inside an inline L2/L3 checkpoint (before its post-processing), killed;
``post``       a random rank killed while its background thread makes an L2 partner copy (``inline_l2 = 0``);
``restore``    a random rank, then its L2 partner when it starts the online restore (during the recovery);
``partner``    a random rank, then, after a random delay (often during the recovery or right after it), the
               rank whose partner copy it held: a rank whose partner died;
``rank0pair``  rank 0 and its partner together, their nodes' directories deleted, on single-rank nodes.

The job gets as many spares as the trial kills ranks, or one fewer (spares exhausted) in a quarter of the
trials. Outcomes:

``exact``      the job finished (exit 0) with the failure-free field, bit for bit;
``error``      no result, every process that raised wrote the same OnlineRecoveryError (or, a kill after the
               loop had ended, the same ProcessFailure from ``finalize()``), and what it says a relaunch does
               is true: a relaunch (no spares) is run, and ends bit for bit when the message promised it
               (``recovers from it``), bit for bit or with a RecoveryError otherwise;
``wrong``      a different field, survivors that disagree, or a relaunch that broke the message's promise;
``hang``       a job that did not end within the hard timeout.

``wrong`` and ``hang`` are failures of ftkit. Prints one line per trial, a table per kind and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ftkit.inject import kill_pid, kill_together
from ftkit.launch import MPIResult, run_mpi
from ftkit.topology import plan_topology

PROGRAM = Path(__file__).resolve().parents[1] / "tests" / "programs" / "online_heat.py"
KINDS = ("rank", "rank0", "node", "inline", "post", "restore", "partner", "rank0pair")
OUTCOMES = ("exact", "error", "wrong", "hang")
NAPP, STEPS, PAUSE = 4, 30, 0.02
WAIT = 60.0  # s: bound of every wait for a condition of the running job


@dataclass(frozen=True)
class Trial:
    """One trial's parameters (steps are the heat solver's; delays in seconds)."""

    kind: str
    victim: int
    level: int           # 2 or 3
    l4: bool
    short_spares: bool   # one spare fewer than the ranks killed
    step: int            # the first kill once rank 0 has done this step (or the hold's --hold-after)
    delay: float         # first kill: a sixth of it after that step; second ("partner"): after the first
    node_size: int = 2


@dataclass
class Outcome:
    """What a trial ended with."""

    outcome: str
    seconds: float
    detail: str = ""
    killed: list[int] = field(default_factory=list)
    recoveries: int = 0
    at_step: int | None = None     # rank 0's last step done at the first kill (29: after the loop)


def draw(rng: random.Random, i: int, kinds: tuple[str, ...] = KINDS) -> Trial:
    """The ``i``-th trial's parameters (the kinds in turn, the rest random)."""
    kind = kinds[i % len(kinds)]
    return Trial(kind=kind, victim=0 if kind.startswith("rank0") else rng.randrange(NAPP),
                 level=2 if kind == "post" else rng.choice((2, 3)), l4=rng.random() < 0.5,
                 short_spares=rng.random() < 0.25, step=rng.randrange(4, 20), delay=rng.uniform(0.0, 0.6),
                 node_size=1 if kind == "rank0pair" else 2)


def _partner(t: Trial, rank: int) -> int:
    topo = plan_topology([r // t.node_size for r in range(NAPP)], rank, group_size=2, ckpt_dir="/nonexistent")
    return topo.partner(rank)


def _victims(t: Trial) -> list[int]:
    if t.kind == "node":
        first = t.victim - t.victim % t.node_size
        return list(range(first, first + t.node_size))
    if t.kind in ("restore", "partner", "rank0pair"):
        return [t.victim, _partner(t, t.victim)]
    return [t.victim]


def _config(d: Path, t: Trial) -> Path:
    lines = ["[basic]", "ckpt_dir = run/local", "glbl_dir = run/global", "meta_dir = run/meta",
             f"ckpt_l{t.level} = 5", "group_size = 2"]
    if t.l4:
        lines.append("ckpt_l4 = 10")
    if t.kind == "post":
        lines.append("inline_l2 = 0")
    lines += ["[ftkit]", "interval_unit = iterations", "failure_timeout = 60"]
    d.mkdir(parents=True, exist_ok=True)
    (d / "ftkit.ini").write_text("\n".join(lines) + "\n")
    return d / "ftkit.ini"


class _Job:
    def __init__(self, d: Path, spares: int, args: list[str], node_size: int, timeout: float) -> None:
        self.d, self.result = d, None
        self.at_step: int | None = None  # rank 0's last step done when the first victim was killed
        cmd = [sys.executable, str(PROGRAM), "--config", str(d / "ftkit.ini"), "--dir", str(d), *args]
        self.thread = threading.Thread(target=self._run, args=(spares, cmd, node_size, timeout), daemon=True)
        self.thread.start()

    def _run(self, spares: int, cmd: list[str], node_size: int, timeout: float) -> None:
        self.result: MPIResult | None = run_mpi(NAPP, cmd, timeout=timeout, node_size=node_size, cwd=self.d,
                                                spares=spares)

    def wait_for(self, test, what: str) -> bool:  # type: ignore[no-untyped-def]
        """Wait until ``test()`` or the job ended; False if the job ended first (or after WAIT)."""
        deadline = time.monotonic() + WAIT
        while not test():
            if not self.thread.is_alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def pid(self, rank: int) -> int | None:
        return self.read_pid(f"pid.{rank}")

    def read_pid(self, name: str) -> int | None:
        """The pid in ``<dir>/name``; None until it is there and complete (it exists empty for a moment)."""
        try:
            return int((self.d / name).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def progress(self) -> int:
        try:
            return int((self.d / "progress").read_text())
        except (FileNotFoundError, ValueError):
            return -1


def _kill(job: _Job, ranks: list[int], t: Trial, pids: dict[int, int]) -> list[int]:
    if job.at_step is None:
        job.at_step = job.progress()
    done = [r for r in ranks if (pids.get(r) or 0) > 0]  # never kill(0): that is this process group

    def lose_disks() -> None:  # while the ranks are stopped: no survivor or spare reads them first
        if t.kind in ("node", "rank0pair"):
            for node in sorted({r // t.node_size for r in ranks}):
                shutil.rmtree(job.d / "run" / "local" / f"node{node}", ignore_errors=True)

    kill_together([pids[r] for r in done], lose_disks)
    return done


def _kill_held(job: _Job) -> bool:
    """Kill the process that wrote ``<dir>/held`` once it has; False if the job ended first."""
    if not job.wait_for(lambda: job.read_pid("held") is not None, "the hold"):
        return False
    pid = job.read_pid("held")
    if pid is None or pid <= 0:  # never kill(0): that is this process group
        return False
    if job.at_step is None:
        job.at_step = job.progress()
    kill_pid(pid)
    return True


def _drive(job: _Job, t: Trial, victims: list[int]) -> list[int]:
    """Kill the trial's victims as its kind says; return the ranks killed."""
    if not job.wait_for(lambda: all(job.pid(r) is not None for r in range(NAPP)), "pid files"):
        return []
    pids = {r: pid for r in range(NAPP) if (pid := job.pid(r)) is not None and pid > 0}
    if t.kind in ("inline", "post"):
        return [t.victim] if _kill_held(job) else []
    if not job.wait_for(lambda: job.progress() >= t.step, f"step {t.step}"):
        return []
    time.sleep(t.delay / 6)  # 0-0.1 s: within the next ~5 steps
    if t.kind in ("node", "rank0pair"):
        return _kill(job, victims, t, pids)
    killed = _kill(job, victims[:1], t, pids)
    if t.kind == "restore":
        if _kill_held(job):
            killed.append(victims[1])
    elif t.kind == "partner":
        time.sleep(t.delay)
        killed += _kill(job, victims[1:], t, pids)
    return killed


def _digests(out: str) -> tuple[str | None, str | None]:
    got = re.search(r"^digest (\w+)$", out, re.M)
    ref = re.search(r"^reference (\w+)$", out, re.M)
    return (got.group(1) if got else None), (ref.group(1) if ref else None)


def _judge_error(d: Path, r: MPIResult, timeout: float) -> tuple[str, str]:
    """An ended job without a result: the same error everywhere, and the truth about a relaunch.

    The error is an OnlineRecoveryError (``online-error.*``), or another ftkit error (``error.*``: e.g. a
    ProcessFailure in ``finalize()`` when the kill landed after the loop had ended).
    """
    errors = {p.name: p.read_text() for p in [*d.glob("online-error.*"), *d.glob("error.*")]}
    if not errors:
        return "wrong", "no result and no ftkit error: " + (r.stderr[-600:] or r.stdout[-300:])
    if len(set(errors.values())) != 1:
        return "wrong", f"survivors disagree: {errors}"
    msg = next(iter(errors.values()))
    kind = "OnlineRecoveryError" if any(n.startswith("online-error") for n in errors) else msg.split(":")[0]
    for p in d.glob("error.*"):
        p.unlink()  # the relaunch writes its own
    promised = "recovers from it" in msg
    again = run_mpi(NAPP, [sys.executable, str(PROGRAM), "--config", str(d / "ftkit.ini"), "--dir", str(d),
                           "--steps", str(STEPS)], timeout=timeout, node_size=_node_size(d), cwd=d)
    got, ref = _digests(again.stdout)
    if again.timed_out:
        return "hang", "the relaunch hung"
    said = f"{len(errors)} same {kind}; relaunch"
    if got is not None and got == ref and again.returncode == 0:
        return "error", f"{said} exact ({'promised' if promised else 'no promise'})"
    if got is not None:
        return "wrong", f"{said} gave a different field"
    if promised:
        return "wrong", f"the message promised a relaunch, which failed: {again.stderr[-600:]}"
    relaunch_errors = [p.read_text() for p in d.glob("error.rank*")]
    if relaunch_errors and all(e.startswith("RecoveryError") for e in relaunch_errors):
        return "error", f"{said} cannot recover, as the message said"
    return "wrong", f"{said} failed otherwise: {again.stderr[-600:]}"


def _node_size(d: Path) -> int:
    return int((d / "node_size").read_text())


def run_trial(t: Trial, timeout: float, workdir: Path | None = None) -> Outcome:
    """Run one trial in a fresh directory (removed afterwards unless it went wrong); return its outcome."""
    d = Path(tempfile.mkdtemp(prefix="online-trial-", dir=workdir))
    _config(d, t)
    (d / "node_size").write_text(str(t.node_size))
    victims = _victims(t)
    spares = max(0, len(victims) - (1 if t.short_spares else 0))
    args = ["--steps", str(STEPS), "--pause", str(PAUSE)]
    if t.kind == "inline":
        args += ["--hold-stage", "before_post", "--hold-rank", str(t.victim), "--hold-after", str(t.step)]
    elif t.kind == "post":
        args += ["--hold-stage", "post", "--hold-rank", str(t.victim), "--hold-after", str(t.step)]
    elif t.kind == "restore":
        args += ["--hold-stage", "restore", "--hold-rank", str(victims[1])]
    start = time.monotonic()
    job = _Job(d, spares, args, t.node_size, timeout)
    killed = _drive(job, t, victims)
    job.thread.join(timeout + 60)
    r = job.result
    seconds = time.monotonic() - start
    if r is None or r.timed_out:
        return Outcome("hang", seconds, f"kept in {d}", killed, at_step=job.at_step)
    got, ref = _digests(r.stdout)
    recoveries = len(re.findall(r"^recovery dead=", r.stdout, re.M))
    if got is not None:
        exact = got == ref and r.returncode == 0 and not list(d.glob("online-error.*"))
        outcome = Outcome("exact" if exact else "wrong", seconds,
                          "" if exact else f"rc {r.returncode}, digest {got} vs {ref}; kept in {d}",
                          killed, recoveries, job.at_step)
    else:
        kind, detail = _judge_error(d, r, timeout)
        outcome = Outcome(kind, seconds, detail, killed, recoveries, job.at_step)
    if outcome.outcome not in ("wrong", "hang"):
        shutil.rmtree(d, ignore_errors=True)
    elif "kept" not in outcome.detail:
        outcome.detail += f"; kept in {d}"
    return outcome


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=150.0)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    kinds = tuple(a.kinds.split(","))
    rng = random.Random(a.seed)
    table: dict[str, Counter[str]] = {k: Counter() for k in kinds}
    rows = []
    for i in range(a.trials):
        t = draw(rng, i, kinds)
        o = run_trial(t, a.timeout)
        table[t.kind][o.outcome] += 1
        row = {**asdict(t), **asdict(o)}
        rows.append(row)
        print(f"{i:3d} {t.kind:9s} victim {t.victim} L{t.level}{'+L4' if t.l4 else ''} "
              f"{'short ' if t.short_spares else ''}step {t.step} delay {t.delay:.2f} killed {o.killed} "
              f"after step {o.at_step} -> "
              f"{o.outcome} ({o.recoveries} recoveries, {o.seconds:.1f} s) {o.detail[:300]}", flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    print(f"\n{'kind':10s}" + "".join(f"{k:>7s}" for k in OUTCOMES))
    for kind, c in table.items():
        print(f"{kind:10s}" + "".join(f"{c[k]:7d}" for k in OUTCOMES))
    total = sum(table.values(), Counter())
    print(f"{'all':10s}" + "".join(f"{total[k]:7d}" for k in OUTCOMES))
    print(json.dumps({"trials": a.trials, "seed": a.seed, **{k: total[k] for k in OUTCOMES}}))
    return 1 if total["wrong"] or total["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
