"""The plan of :mod:`run_order`: which cases, how many rounds, and how long they take (``--cases``,
``--over-target``, ``--budget``, ``--run-seconds-from``), and the figures both need (quantiles, a row's
value)."""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

import run_sbs

#: Seconds per run used for the estimate before any run (a quiet machine: launch, settle, the job), unless
#: ``--run-seconds-from`` gives saved rows to take them from (:func:`run_seconds_from`). The last quiet table
#: (2026-12-05, load 0.2-4.4, settle full, FTI on MPICH, ftkit, floor) ran 1.3 s per run at 64 MiB and 2.3 s
#: at 256; a busy-machine smoke with both FTI builds (load 19, settle sync) 2.8 s at 64: these values leave
#: about 50 % for the Open MPI 4.1 build's slower launch. (They were 5 and 8 s: a 42-minute estimate for a
#: 12-18 minute table.)
RUN_SECONDS = {64: 2.0, 256: 3.5}
#: Fewest runs per system and case a ``--budget`` plan may have (the table's p90 needs a few).
BUDGET_MIN_RUNS = 6


def load_rows(files: list[str]) -> list[dict]:
    """The JSONL rows of ``files``."""
    return [json.loads(line) for f in files for line in open(f) if line.strip()]


def run_seconds_from(rows: list[dict]) -> dict[int, float]:
    """Seconds per run by MiB, from saved rows: the median gap between consecutive runs of a case (the
    ``time`` each row was written: settle, launch and the job together)."""
    times: dict[tuple[int, int, str], list[float]] = defaultdict(list)
    for r in rows:
        times[(int(r["mib"]), int(r["level"]), str(r.get("settle")))].append(float(r["time"]))
    gaps: dict[int, list[float]] = defaultdict(list)
    for (mib, _, _), ts in times.items():
        ts.sort()
        gaps[mib] += [b - a for a, b in zip(ts, ts[1:], strict=False)]
    return {mib: statistics.median(g) for mib, g in gaps.items() if g}


def over_target_cases(rows: list[dict]) -> list[tuple[int, int]]:
    """The cases (MiB, level) of saved rows where ftkit misses a target on its 90th percentile: p90 ÷ an FTI
    system's p90 above the level's target (``run_sbs.TARGETS``), or p90 ÷ the floor's median above
    ``run_sbs.FLOOR_TARGET``; a case without ftkit rows counts as missing."""
    by: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.get("run", -1) >= 0 and r["exit"] == 0 and str(r.get("ok", "1")) == "1" \
                and (r.get("ckpt_s") or r.get("floor_s")):
            by[(int(r["mib"]), int(r["level"]))][r["system"]].append(row_value(r))
    out = []
    for (mib, level), xs in sorted(by.items()):
        fk = xs.get("ftkit")
        misses = not fk or any(quantile(fk, 0.9) / quantile(v, 0.9) > run_sbs.TARGETS[level]
                               for s, v in xs.items() if is_fti(s))
        floors = [statistics.median(v) for s, v in xs.items() if is_floor(s)]
        if fk and floors:   # against the better floor (buffered, or direct with --floor-direct)
            misses = misses or quantile(fk, 0.9) / min(floors) > run_sbs.FLOOR_TARGET
        if misses:
            out.append((mib, level))
    return out


def plan_cases(args: argparse.Namespace) -> list[tuple[int, int]]:
    """The cases (MiB, level) to run: ``--cases``, else ``--sizes`` x ``--levels``; with ``--over-target``
    only those missing a target in the saved rows."""
    if args.cases:
        cases = [(int(m), int(lv)) for m, _, lv in (c.partition(":") for c in args.cases.split(","))]
    else:
        cases = [(int(m), int(lv)) for m in args.sizes.split(",") for lv in args.levels.split(",")]
    if args.over_target:
        missing = set(over_target_cases(load_rows(args.over_target)))
        cases = [c for c in cases if c in missing]
    return cases


def plan_rounds(k: int, cases: list[tuple[int, int]], per_run: dict[int, float], *, min_runs: int,
                budget_s: float | None) -> int:
    """Rounds per case for ``k`` systems: the fewest giving ``min_runs`` runs per system; with a budget
    (seconds) at most that, as many as fit, never under :data:`BUDGET_MIN_RUNS` runs per system.

    Raises
    ------
    SystemExit
        With a budget, when even the fewest rounds do not fit (naming the estimate and what to drop).
    """
    rounds = max(1, -(-min_runs // k))
    if budget_s is None:
        return rounds
    fewest = max(1, -(-BUDGET_MIN_RUNS // k))
    for r in range(rounds, fewest - 1, -1):
        if grid_estimate_s(cases, r * k * k + 1, per_run) <= budget_s:
            return r
    need = grid_estimate_s(cases, fewest * k * k + 1, per_run) / 60
    raise SystemExit(f"a budget of {budget_s / 60:.0f} min: even {fewest * k} runs per system and case take "
                     f"about {need:.0f} min for {len(cases)} cases: measure fewer cases (--cases, "
                     "--over-target FILE.jsonl) or fewer systems, or raise the budget")


def replan_rounds(args: argparse.Namespace, k: int, left: list[tuple[int, int]], spent_s: float,
                  walls: dict[int, list[float]]) -> int:
    """``--budget`` during the run: the rounds of the cases ``left``, at the pace measured so far (median
    seconds per run by size), in the budget's remaining time; never more than now, never under
    :data:`BUDGET_MIN_RUNS` runs per system (then over budget: said on stdout)."""
    pace = {m: statistics.median(w) for m, w in walls.items() if w}
    try:
        return min(args.rounds, plan_rounds(k, left, pace, min_runs=args.min_runs,
                                            budget_s=args.budget * 60 - spent_s))
    except SystemExit as exc:
        print(f"  over budget: {exc}; going on with the fewest rounds", flush=True)
        return max(1, -(-BUDGET_MIN_RUNS // k))


def grid_estimate_s(cases: list[tuple[int, int]], runs_per_case: int, per_run: dict[int, float]) -> float:
    """Seconds ``cases`` take at ``runs_per_case`` runs each, ``per_run`` seconds per run by MiB (else
    :data:`RUN_SECONDS`, interpolated by size)."""
    return sum(runs_per_case * per_run.get(m, RUN_SECONDS.get(m, 4.0 + m / 64.0)) for m, _ in cases)


def is_fti(system: str) -> bool:
    return system == "fti" or system.startswith("fti-")


def is_floor(system: str) -> bool:
    """``floor`` (buffered writes) or ``floor-direct`` (its L4 file with direct I/O: ``--floor-direct``)."""
    return system in ("floor", "floor-direct")


def quantile(xs: list[float], q: float) -> float:
    """Quantile ``q`` (linear interpolation between order statistics); nan for no data."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def row_value(r: dict) -> float:
    return float(r["floor_s"] if is_floor(r["system"]) else r["ckpt_s"])
