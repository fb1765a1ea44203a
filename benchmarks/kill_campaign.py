"""Random kill campaign for the resilient_ routines: a random rank SIGKILLed from outside at a random moment.

usage: python benchmarks/kill_campaign.py [--trials 200] [--seed 1] [--out results.jsonl] [--timeout 120]
       [--grids 3x2,2x3] [--max-delay S] [--setup in-call] [--modes store,protect] [--betas 0,0.5]
       [--routine gemm|symm|trsm|trmm|syrk|syr2k|geadd|tradd|tran[,...]|all] [--calls-before K]

``--routine`` takes one routine, a comma-separated list or ``all``: ``--trials`` trials are run for each, in
turn, with one table per routine and a summary (right / wrong / hung per routine) at the end.

Each trial is one MPI job (``tests/programs/linalg_kill_trial.py``) with a random grid (1x3, 3x1, 2x2, 2x3,
3x2, 3x3, in turn; ``--grids`` also takes 1x4, 4x1, 2x4 and other non-square shapes up to 8 ranks),
transpositions, ``beta`` (zero or not) and store (a directory, or operands saved beforehand with
``protect_operands``). The driver waits until the job is about to set up its failure
detector, sleeps a random delay and SIGKILLs a random rank by PID. The delay is uniform in [0, d], where d
is how long the whole call (set-up, protect, multiply, settle-up) took on that grid in a failure-free warm-up
trial, so that most kills land inside the call (``--max-delay`` instead fixes d and skips the warm-up).

``--setup in-call`` (issue 33: a kill at *any* moment of a call) times the kill from the moment
``resilient_pdgemm`` is called instead: nothing builds the failure detector beforehand, so in ``store`` mode
the call itself sets it up (after saving its inputs), and in ``protect`` mode ``protect_operands`` did (before
the window). Early kills: ``--setup in-call --max-delay 0.4``. A kill before the victim saved its inputs
(the first milliseconds of a ``store``-mode call, or of a ``beta != 0`` call, which saves C) cannot be
survived: nothing holds the victim's data; such trials end in ``failure`` with phase ``entry``.
``--routine trmm|syrk|syr2k`` (issue 33) runs ``resilient_pdtrmm`` (random SIDE UPLO TRANSA DIAG),
``resilient_pdsyrk`` or ``resilient_pdsyr2k`` (random UPLO TRANS) instead, in ``store`` or ``protect`` mode
(``protect_pdtrmm``, ``protect_pdsyrk``, ... before the call; so also ``symm`` and ``trsm``; the additions
``geadd``, ``tradd`` and ``tran`` run in ``store`` mode only); the job's rank 0 writes numpy's result, and the
rank-k updates' untouched triangle must equal the input bit for bit. ``symm`` (random SIDE UPLO), ``trsm`` (as
trmm), ``geadd`` (TRANS), ``tradd`` (UPLO TRANS) and ``tran`` likewise; the additions' results must equal
numpy's bit for bit (rounded as pdgeadd rounds), not only to within rounding. Their ``prepare`` step (building
the multiplied operands, a plain collective) cannot survive a death: a kill there ends in ``failure`` with
phase ``entry``/``setup``. ``--calls-before K`` runs K error-free calls on the protected handle before the
call the kill is timed for, which then rewrites in place the input files the previous call kept. Outcomes:

``exact``
    every survivor returned, and the result pieces they wrote, assembled, equal numpy's product (within
    1e-12 n max|C|) and cover every entry once the failed ranks are accounted for;
``failure``
    every survivor raised :class:`~ftkit.errors.ProcessFailure` naming the same ranks;
``late``
    the kill landed after the victim had finished the call (nothing to survive; counted apart);
``wrong``
    a result that differs from the product, or survivors that disagree (some returned, some raised);
``hang``
    the job did not end within the hard timeout.

After ``exact`` or ``failure`` the detail says ``LEFT`` and names the files if the call left any in the store
(counted in the summary's ``files_left``; the protected operands, whose handle the trial keeps, aside).

``wrong`` and ``hang`` are failures of ftkit. Each trial also records the phase the kill landed in, as rank
0 saw it (:data:`PHASES`): ``setup`` (the failure detector's), ``protect`` (saving the operands),
``entry`` (the call, before its detector set-up and steps: saving its inputs; ``--setup in-call`` only),
``multiply`` (the steps), ``settle`` (agreement, repair, recomputation), ``after`` (the call had returned
on rank 0), ``none`` (the job ended before the kill). Prints one line per trial, tables per grid and per
phase, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ftkit import inject
from ftkit.launch import run_mpi

PROGRAM = Path(__file__).resolve().parents[1] / "tests" / "programs" / "linalg_kill_trial.py"
GRIDS = ("1x3", "3x1", "2x2", "2x3", "3x2", "3x3")
TRANS = ("NN", "NT", "TN", "TT")
#: The flags drawn per routine (``--trans`` of the trial program).
FLAGS = {
    "gemm": TRANS,
    "symm": tuple(s + u for s in "LR" for u in "UL"),
    "trsm": tuple(s + u + t + d for s in "LR" for u in "UL" for t in "NT" for d in "NU"),
    "trmm": tuple(s + u + t + d for s in "LR" for u in "UL" for t in "NT" for d in "NU"),
    "syrk": tuple(u + t for u in "UL" for t in "NT"),
    "syr2k": tuple(u + t for u in "UL" for t in "NT"),
    "geadd": ("N", "T"),
    "tradd": tuple(u + t for u in "UL" for t in "NT"),
    "tran": ("-",),
}
#: The routines that take no protected operands (``store`` mode only).
ADDITIONS = ("geadd", "tradd", "tran")
OUTCOMES = ("exact", "failure", "late", "wrong", "hang")
PHASES = ("setup", "protect", "entry", "multiply", "settle", "after", "none")


@dataclass(frozen=True)
class Trial:
    """One trial's parameters (the delay is in seconds after the job signals its start)."""

    grid: str
    trans: str
    beta: float
    mode: str
    victim: int
    delay: float
    n: int = 96
    nb: int = 8
    step_pause: float = 0.02
    start_at_step: bool = False
    hold: str | None = None  # "setup"/"multiply": the victim stops just before it and waits to be killed
    setup: str = "before"  # "in-call": no detector built beforehand; the kill is timed from the call's start
    routine: str = "gemm"  # a key of FLAGS (``trans`` then holds that routine's flags)
    calls_before: int = 0  # error-free calls on the handle before the one the kill is timed for

    @property
    def nprocs(self) -> int:
        p, q = (int(x) for x in self.grid.split("x"))
        return p * q


@dataclass(frozen=True)
class TrialResult:
    """How a trial ended (see the module docstring), in which phase the kill landed, and its wall time (s)."""

    outcome: str
    detail: str
    seconds: float
    phase: str


def draw_trial(rng: random.Random, grid: str | None = None, max_delay: float = 1.5, *, setup: str = "before",
               modes: tuple[str, ...] = ("store", "protect"), betas: tuple[float, ...] = (0.0, 0.5),
               routine: str = "gemm", calls_before: int = 0) -> Trial:
    """Return a random trial (on ``grid`` if given) with a kill delay uniform in [0, ``max_delay``] s."""
    grid = grid or rng.choice(GRIDS)
    p, q = (int(x) for x in grid.split("x"))
    mode = rng.choice(modes) if routine not in ADDITIONS else "store"
    return Trial(grid, rng.choice(FLAGS[routine]), rng.choice(betas), mode,
                 rng.randrange(p * q), round(rng.uniform(0.0, max_delay), 3), setup=setup,
                 routine=routine, calls_before=calls_before)  # fmt: skip


def _killer(workdir: Path, victim: int, delay: float, job_over: threading.Event,
            killed_at: list[float]) -> threading.Thread:
    def run() -> None:
        started = workdir / "started"
        while not job_over.is_set() and not started.exists():
            job_over.wait(0.01)
        if job_over.wait(delay):
            return  # the job ended first: its pid may belong to another process by now
        pid_file = workdir / f"pid.{victim}"
        if pid_file.exists():
            killed_at.append(time.time())
            inject.kill_pid(int(pid_file.read_text()))

    return threading.Thread(target=run, daemon=True)


def read_marks(workdir: Path) -> list[tuple[str, float]]:
    """Rank 0's ``(phase, time.time())`` marks of a finished trial (empty if it wrote none)."""
    path = workdir / "marks"
    if not path.exists():
        return []
    marks = []
    for line in path.read_text().splitlines():
        name, _, when = line.partition(" ")
        marks.append((name, float(when)))
    return marks


def kill_phase(marks: list[tuple[str, float]], killed_at: float | None) -> str:
    """The phase (:data:`PHASES`) rank 0 was in when the kill was sent (``none``: no kill was sent).

    The multiply ends one median step time after the last step began (no mark says when the last step's
    local work is done); the settle-up runs from there until rank 0 returned.
    """
    if killed_at is None:
        return "none"
    phase_of = {"setup": "setup", "protect": "protect", "call": "entry", "returned": "after"}
    starts = [(phase_of[name], when) for name, when in marks if name in phase_of]
    steps = [when for name, when in marks if name == "step"]
    if steps:
        starts.append(("multiply", steps[0]))
        gap = float(np.median(np.diff(steps))) if len(steps) > 1 else 0.0
        starts.append(("settle", steps[-1] + gap))
    phase = "setup"
    for name, when in sorted(starts, key=lambda s: s[1]):
        if when <= killed_at:
            phase = name
    return phase


def _assemble(workdir: Path, ranks: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The result pieces of ``ranks`` put together: (matrix, how many pieces wrote each entry)."""
    got, count = np.zeros((n, n)), np.zeros((n, n), dtype=np.int64)
    for r in ranks:
        with np.load(workdir / f"out.{r}.npz", allow_pickle=False) as f:
            ix = np.ix_(f["rows"], f["cols"])
            got[ix] = f["c"]
            count[ix] += 1
    return got, count


def classify(trial: Trial, workdir: Path, stdout: str, timed_out: bool) -> tuple[str, str]:
    """Return ``(outcome, detail)`` of a finished trial (see the module docstring)."""
    if timed_out:
        return "hang", "hard timeout"
    done = {int(r): f for r, f in re.findall(r"DONE rank=(\d+) failed=(\[.*?\])", stdout)}
    failures = {int(r): f for r, f in re.findall(r"PROCESSFAILURE rank=(\d+) failed_ranks=(\[.*?\])", stdout)}
    fenced = {int(r) for r in re.findall(r"FENCED rank=(\d+)", stdout)}
    if failures and not done:
        verdicts = set(failures.values())
        silent = set(range(trial.nprocs)) - set(failures) - fenced
        # every rank that reported nothing must be one the survivors agreed is dead (it died: the victim, or
        # a rank the MPI library itself brought down after the kill, which the detail then names)
        if len(verdicts) == 1 and silent <= set(json.loads(next(iter(verdicts)))):
            extra = sorted(silent - {trial.victim})
            also = f"; ranks {extra} died too (not killed by the driver)" if extra else ""
            left = left_in_store(workdir)
            also += f" LEFT {left}" if left else ""
            return "failure", f"ProcessFailure {next(iter(verdicts))} on {sorted(failures)}{also}"
        return "wrong", f"survivors disagree or are missing: failures={failures} fenced={sorted(fenced)}"
    if failures and done:
        return "wrong", f"some survivors returned ({sorted(done)}), some raised ({sorted(failures)})"
    if not done:
        return "wrong", "no survivor reported anything"
    verdicts = set(done.values())
    if len(verdicts) != 1:
        return "wrong", f"survivors disagree on the failed ranks: {done}"
    failed = json.loads(verdicts.pop())
    with np.load(workdir / "ref.npz", allow_pickle=False) as f:  # numpy's result, by the job's rank 0
        ref, fixed, exact = f["ref"], f["fixed"], bool(f["exact"]) if "exact" in f.files else False
    with np.load(workdir / "inputs.npz", allow_pickle=False) as f:
        c_in = f["b"] if trial.routine in ("trmm", "trsm") else f["c"]
    if not failed:  # nobody failed during the call: every rank wrote its piece on the original grid
        if trial.victim not in done:
            return "late", "the victim was killed after the call returned everywhere else"
        ranks = sorted(done)
    else:
        ranks = sorted(done)
        if sorted(set(range(trial.nprocs)) - set(failed)) != ranks:
            return "wrong", f"returned on {ranks} but failed={failed}"
    got, count = _assemble(workdir, ranks, trial.n)
    if not (count == 1).all():
        return "wrong", f"result pieces cover {int((count == 0).sum())} entries 0 times, " \
                        f"{int((count > 1).sum())} more than once"  # fmt: skip
    if not np.array_equal(got[fixed], c_in[fixed]):
        return "wrong", f"the triangle not updated changed (failed={failed})"
    err = np.abs(got - ref)
    tol = 1e-12 * trial.n * max(1.0, float(np.abs(ref).max()))
    if err.max() > tol:
        rows, cols = np.nonzero(err > tol)
        bad = sorted({(int(i) // trial.nb, int(j) // trial.nb) for i, j in zip(rows, cols, strict=True)})
        return "wrong", f"max error {err.max():.3e} failed={failed} in blocks {bad[:8]}"
    if exact and not np.array_equal(got, ref):
        return "wrong", f"{int((got != ref).sum())} entries not bit for bit numpy's (failed={failed})"
    left = left_in_store(workdir)
    return "exact", f"failed={failed} maxerr={err.max():.1e}" + (f" LEFT {left}" if left else "")


def left_in_store(workdir: Path) -> list[str]:
    """What a call that returned, or failed on every survivor, left in the trial's store: nothing but the
    protected operands (whose handle the trial keeps) may be there."""
    store = workdir / "store"
    return sorted(p.name for p in store.glob("*") if not p.name.startswith("operands-"))


def run_trial(trial: Trial, workdir: Path, timeout: float, *, kill: bool = True) -> TrialResult:
    """Run one trial in ``workdir`` (an empty directory); ``kill=False`` runs it failure-free."""
    job_over = threading.Event()
    killed_at: list[float] = []
    killer = _killer(workdir, trial.victim, trial.delay, job_over, killed_at)
    if kill:
        killer.start()
    args = ["--grid", trial.grid, "--n", str(trial.n), "--nb", str(trial.nb), "--trans", trial.trans,
            "--beta", str(trial.beta), "--mode", trial.mode, "--step-pause", str(trial.step_pause),
            "--dir", str(workdir), "--setup", trial.setup, "--routine", trial.routine,
            "--calls-before", str(trial.calls_before)] \
        + (["--start-at-step"] if trial.start_at_step else []) \
        + (["--hold-rank", str(trial.victim), "--hold-at", trial.hold] if trial.hold else [])  # fmt: skip
    try:
        r = run_mpi(trial.nprocs, [sys.executable, str(PROGRAM), *args], timeout=timeout)
    finally:
        job_over.set()
        if kill:
            killer.join()
    outcome, detail = classify(trial, workdir, r.stdout, r.timed_out)
    if outcome in ("wrong", "hang"):
        detail += f"\n--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n{r.stderr[-3000:]}"
    phase = kill_phase(read_marks(workdir), killed_at[0] if killed_at else None)
    return TrialResult(outcome, detail, r.elapsed, phase)


def call_duration(grid: str, timeout: float, setup: str = "before", routine: str = "gemm",
                  calls_before: int = 0) -> float:
    """Seconds from ``started`` to rank 0's return in a failure-free trial on ``grid`` (a warm-up).

    Raises
    ------
    RuntimeError
        If the failure-free trial does not give the exact product.
    """
    trial = Trial(grid, FLAGS[routine][-1], 0.5, "store" if routine in ADDITIONS else "protect", 0, 0.0,
                  setup=setup, routine=routine, calls_before=calls_before)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ftkit-warmup-") as tmp:
        res = run_trial(trial, Path(tmp), timeout, kill=False)
        if res.outcome != "exact":
            raise RuntimeError(f"failure-free warm-up on {grid}: {res.outcome}: {res.detail}")
        started = float((Path(tmp) / "started").read_text())
        returned = [when for name, when in read_marks(Path(tmp)) if name == "returned"]
    return returned[0] - started


def _table(title: str, rows: list[str], counts: dict[str, Counter[str]], columns: tuple[str, ...]) -> None:
    print(f"\n{title:8} " + " ".join(f"{o:>8}" for o in columns))
    for g in rows:
        print(f"{g:8} " + " ".join(f"{counts[g][o]:8d}" for o in columns))
    total = sum(counts.values(), Counter())
    print(f"{'all':8} " + " ".join(f"{total[o]:8d}" for o in columns))


def campaign(routine: str, args: argparse.Namespace, rng: random.Random) -> dict[str, object]:
    """Run ``args.trials`` trials of ``routine``; print one line per trial and its tables; return its summary.

    Length: the trial loop with its printing and JSON lines, kept in one place so a trial line, its JSON line
    and its counts cannot drift apart.
    """
    grids = args.grids.split(",")
    t_start = time.monotonic()
    if args.max_delay is None:
        durations = {g: round(call_duration(g, args.timeout, args.setup, routine, args.calls_before), 3)
                     for g in grids}
    else:
        durations = dict.fromkeys(grids, args.max_delay)
    print(f"{routine}: kill delays uniform in [0, d] s, d per grid: {durations}", flush=True)
    counts: dict[str, Counter[str]] = {g: Counter() for g in grids}
    by_phase: dict[str, Counter[str]] = {p: Counter() for p in PHASES}
    left = 0  # trials whose call (returned or failed everywhere) left files in the store
    for i in range(args.trials):
        grid = grids[i % len(grids)]
        trial = draw_trial(rng, grid, durations[grid], setup=args.setup, modes=tuple(args.modes.split(",")),
                           betas=tuple(float(b) for b in args.betas.split(",")),
                           routine=routine, calls_before=args.calls_before)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="ftkit-kill-") as tmp:
            res = run_trial(trial, Path(tmp), args.timeout)
        counts[grid][res.outcome] += 1
        by_phase[res.phase][res.outcome] += 1
        left += " LEFT " in res.detail
        print(f"trial {i} {trial.routine} {trial.grid} {trial.trans} beta={trial.beta} {trial.mode} "
              f"{trial.setup} "
              f"victim={trial.victim} "
              f"delay={trial.delay:.3f}s phase={res.phase} -> {res.outcome} ({res.seconds:.1f}s): "
              f"{res.detail}", flush=True)  # fmt: skip
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps({**asdict(trial), "outcome": res.outcome, "phase": res.phase,
                                    "detail": res.detail[:2000], "elapsed": res.seconds}) + "\n")  # fmt: skip
    _table("grid", grids, counts, OUTCOMES)
    _table("phase", list(PHASES), by_phase, OUTCOMES)
    total = sum(counts.values(), Counter())
    summary = {"routine": routine, "trials": args.trials, "seed": args.seed,
               "seconds": round(time.monotonic() - t_start), "durations": durations,
               "per_grid": {g: dict(counts[g]) for g in grids},
               "per_phase": {p: dict(by_phase[p]) for p in PHASES}, "total": dict(total),
               "files_left": left}  # fmt: skip
    print(json.dumps(summary), flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200, help="trials per routine")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120.0, help="hard limit per trial (s)")
    ap.add_argument("--grids", default=",".join(GRIDS), help="comma-separated grids, taken in turn")
    ap.add_argument("--max-delay", type=float, default=None,
                    help="kill delays uniform in [0, this] s (default: each grid's measured call duration)")
    ap.add_argument("--setup", choices=("before", "in-call"), default="before",
                    help="in-call: no detector built beforehand, kills timed from the call's start")
    ap.add_argument("--modes", default="store,protect", help="store modes drawn from (store, protect)")
    ap.add_argument("--betas", default="0,0.5", help="beta values drawn from")
    ap.add_argument("--routine", default="gemm",
                    help=f"the resilient_ routine(s) run: one of {', '.join(FLAGS)}, a comma-separated list, "
                         "or all")  # fmt: skip
    ap.add_argument("--calls-before", type=int, default=0,
                    help="error-free calls before the one the kill is timed for (in protect mode, the call "
                         "then rewrites the inputs the previous one kept)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="append one JSON line per trial here")
    args = ap.parse_args(argv)
    routines = list(FLAGS) if args.routine == "all" else args.routine.split(",")
    unknown = [r for r in routines if r not in FLAGS]
    if unknown:
        ap.error(f"unknown routine(s) {unknown}; use {', '.join(FLAGS)} or all")
    rng = random.Random(args.seed)
    summaries = []
    for routine in routines:
        try:
            summaries.append(campaign(routine, args, rng))
        except RuntimeError as exc:  # its failure-free warm-up was wrong: count it, go on with the others
            print(f"{routine}: {exc}", flush=True)
            summaries.append({"routine": routine, "total": {"wrong": 1}})
    print(f"\n{'routine':8} {'right':>8} {'failure':>8} {'wrong':>8} {'hung':>8}   (right: exact result, or "
          "killed after the call; failure: every survivor raised ProcessFailure alike)")  # fmt: skip
    bad = 0
    for s in summaries:
        tot: dict[str, int] = s["total"]  # type: ignore[assignment]
        right = tot.get("exact", 0) + tot.get("late", 0)
        bad += tot.get("wrong", 0) + tot.get("hang", 0)
        print(f"{s['routine']:8} {right:8d} {tot.get('failure', 0):8d} {tot.get('wrong', 0):8d} "
              f"{tot.get('hang', 0):8d}")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
