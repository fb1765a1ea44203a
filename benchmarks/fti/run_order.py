"""Order-aware side-by-side of FTI 1.6, ftkit and each level's floor: every system measured after each system.

    mpislot .venv/bin/python benchmarks/fti/run_order.py [--sizes 64,256] [--levels 1,2,3,4]
        [--min-runs 10] [--rounds R] [--settle full|sync|none] [--out FILE.jsonl]
        [--fti-builds mpich=/tmp/ftkit-fti,ompi41=/tmp/ftkit-fti-ompi]
        [--cases 64:3,256:3] [--over-target OLD.jsonl...] [--budget MIN] [--run-seconds-from OLD.jsonl...]
        [--plan-only]
    .venv/bin/python benchmarks/fti/run_order.py --summarize FILE.jsonl...

Why: a checkpoint call's cost may depend on what the job before it left (dirty pages, writeback in flight,
freed blocks, a full page cache). :mod:`run_sbs` alternates two systems, so each is always measured after
the other; here the run order of every case (MiB per rank, level; head = 0) is a chain of random Eulerian
circuits over all ordered pairs of systems (self-pairs included): with ``--rounds R`` every system is measured
exactly R times after each system, itself included, in a random order (``--seed``). A warm-up run (not
counted) opens each case, so the first counted run has a predecessor of the same case.

Before each run the state is made equal (``--settle``):

* ``full`` (default): the previous run's files are removed, ``sync``, the clean page cache dropped
  (``echo 1 > /proc/sys/vm/drop_caches``, when writable: as root), then a wait (50 ms steps, at most
  ``--settle-timeout`` s) until ``/proc/meminfo`` shows no Writeback and Dirty under 16 MiB;
* ``sync``: files removed and ``sync`` only (what :mod:`run_sbs` does);
* ``none``: files removed, nothing else: the previous job's dirty pages and writeback are left in place
  (the state a busy cluster gives).

Each row (JSONL) keeps the predecessor, the state found before the run (Dirty, Writeback, load, seconds
waited) and the program's figures: ``ckpt_s`` (slowest rank), and where the call's time went on the slowest
rank: ``cpu_s`` (the calling thread on a CPU), ``runq_s`` (waiting for a CPU: the machine's load, not the
program), ``blk_s`` (off CPU: I/O and sleeps), ``pcpu_s`` (CPU of all the process's threads), ``wmib``
(bytes sent to storage by all ranks during the call, ``/proc/<pid>/io``).

The table: per case and system, n, median and 90th percentile of the call; per predecessor the median;
ftkit ÷ FTI as median ÷ median, p90 ÷ p90 and p90 ÷ FTI's median (issue 37's check), per predecessor
(median ÷ median of the runs after the same predecessor); ftkit ÷ floor (median and p90 over the floor's
median; with ``--floor-direct`` over the better of the two floors' medians, buffered and direct L4). The
MPI of each system is printed with the table (FTI runs under the MPI ``build_fti.sh`` compiled it with,
ftkit under its own Open MPI 5).

Systems: FTI (one build by ``build_fti.sh``, or with ``--fti-builds NAME=ROOT,...`` one system ``fti-NAME``
per build, each launched with the mpirun of the MPI ``ROOT/ckpt_fti`` is linked to: ``mpirun.mpich`` or
``mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none``), ftkit, ``base`` (``--baseline-src``)
and the floor. The ratio table has one row per FTI system.

Runs: with ``k`` systems, ``rounds * k`` runs per system and case, ``rounds * k**2 + 1`` per case (warm-up
included); without ``--rounds``, the fewest rounds giving ``--min-runs`` (default 10) runs per system. The
count and an estimate are printed before the first run (:data:`RUN_SECONDS` per run on a quiet machine:
launch, settle, the job), and the time left after each case (from the runs so far); each run is killed
after 900 s. The issue's table (2 FTI builds, ftkit, floor: k = 4, 3 rounds = 12 runs per system, 49 per
case, 2 sizes x 4 levels = 392 runs) is estimated at 18 minutes (``order_plan.RUN_SECONDS``; about 12 at the
pace of the last quiet table: ``--run-seconds-from`` its rows for the estimate).

A window of a given length (:mod:`order_plan`): ``--budget MIN`` takes as many rounds as fit (at most those of
``--min-runs``, never under 6 runs per system: 2 rounds with 4 systems), stops before any run when even that
does not fit, and after each case fits the cases left at the pace measured so far (fewer rounds if
needed); ``--cases MIB:LEVEL,...`` or ``--over-target OLD.jsonl`` (only the cases where ftkit missed a
target on its 90th percentile in saved rows) measures fewer cases; ``--plan-only`` prints the plan and its
estimate and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_sbs  # noqa: E402  (the same launch commands, configuration and FTI build)
from devstat import device_now  # noqa: E402  (the device's counters)
from order_plan import (  # noqa: E402
    BUDGET_MIN_RUNS,
    RUN_SECONDS,
    grid_estimate_s,
    is_floor,
    is_fti,
    load_rows,
    plan_cases,
    plan_rounds,
    quantile,
    replan_rounds,
    row_value,
    run_seconds_from,
)

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
DIRTY_QUIET_MIB = 16


def meminfo_mib() -> dict[str, int]:
    """Dirty and Writeback of ``/proc/meminfo``, MiB."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key in ("Dirty", "Writeback"):
                out[key] = int(value.split()[0]) // 1024
    return out


def settle(mode: str, leftovers: list[Path], timeout: float) -> dict:
    """Remove the previous run's files and bring the machine to the state ``mode`` asks; return what it found
    (Dirty/Writeback before and after, seconds it took, whether the clean cache was dropped, MiB the device
    discarded meanwhile: the removed files' blocks, on a file system mounted with ``discard``)."""
    t0 = time.monotonic()
    disc0 = device_now(str(run_sbs.ROOT))[1]
    for d in leftovers:
        shutil.rmtree(d, ignore_errors=True)
    found = meminfo_mib()
    dropped = False
    if mode in ("full", "sync"):
        subprocess.run(["sync"], check=False)
    if mode == "full":
        try:
            DROP_CACHES.write_text("1\n")
            dropped = True
        except OSError:
            pass
        while time.monotonic() - t0 < timeout:
            m = meminfo_mib()
            if m["Writeback"] == 0 and m["Dirty"] < DIRTY_QUIET_MIB:
                break
            time.sleep(0.05)
    now = meminfo_mib()
    return {"dirty_found": found["Dirty"], "wb_found": found["Writeback"], "dirty_before": now["Dirty"],
            "wb_before": now["Writeback"], "settle_s": round(time.monotonic() - t0, 3), "dropped": dropped,
            "settle_discmib": round(device_now(str(run_sbs.ROOT))[1] - disc0, 1)}


def eulerian_order(systems: list[str], rounds: int, rng: random.Random) -> list[str]:
    """A run order in which every ordered pair (a, b) of ``systems`` (a = b too) follows ``rounds`` times.

    ``rounds`` random Eulerian circuits of the complete directed graph with loops, chained at their common
    end: ``rounds * k**2 + 1`` runs for ``k`` systems; the first is the warm-up's predecessor slot.
    """
    order = [rng.choice(systems)]
    for _ in range(rounds):
        edges = {a: rng.sample(systems, len(systems)) for a in systems}   # each node's out-edges, shuffled
        stack, circuit = [order[-1]], []
        while stack:                                                      # Hierholzer
            v = stack[-1]
            if edges[v]:
                stack.append(edges[v].pop())
            else:
                circuit.append(stack.pop())
        order.extend(circuit[::-1][1:])
    return order


def mpi_name(cmd: list[str]) -> str:
    """``MPICH 4.0.2`` / ``Open MPI 4.1.4`` from an ``mpirun --version`` or mpi4py's library version."""
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Version:") and "HYDRA" in text:
            return "MPICH " + line.split()[-1]
        if "(OpenRTE)" in line or "(Open MPI)" in line:   # mpirun.openmpi --version: "... (OpenRTE) 4.1.4"
            return "Open MPI " + line.split()[-1]
        if "Open MPI" in line or "MPICH Version" in line:
            words = line.replace(",", " ").split()
            return " ".join(words[:3]) if "Open" in line else "MPICH " + words[-1]
    return text.strip().splitlines()[0] if text.strip() else "?"


OMPI_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def fti_launcher_for(binary: Path) -> tuple[list[str], list[str]]:
    """The mpirun of the MPI ``binary`` is linked to (``ldd``) and the command that prints its version:
    ``mpirun.mpich`` (Hydra) for MPICH, ``mpirun.openmpi`` (with :data:`OMPI_FLAGS`) for Open MPI.

    Raises
    ------
    SystemExit
        When ``binary`` links both or neither (a build mixing two MPIs cannot be measured: rebuild it).
    """
    libs = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    mpich, ompi = "libmpich.so" in libs, "libmpi.so" in libs
    if mpich == ompi:
        raise SystemExit(f"{binary} links {'both MPICH and Open MPI' if mpich else 'no MPI library'}: "
                         "rebuild it with build_fti.sh (FTI_MPICC/FTI_MPICXX of one MPI)")
    run = "/usr/bin/mpirun.mpich" if mpich else "/usr/bin/mpirun.openmpi"
    return ([run] if mpich else [run, *OMPI_FLAGS]), [run, "--version"]


def fti_systems(args: argparse.Namespace) -> dict[str, tuple[Path, list[str], list[str]]]:
    """FTI systems to measure: name -> (ckpt_fti, mpirun command, version command).

    ``--fti-builds mpich=/tmp/ftkit-fti,ompi41=/tmp/ftkit-fti-ompi``: system ``fti-NAME`` per build root
    (``ROOT/ckpt_fti``, launched with the mpirun of the MPI it is linked to); otherwise one system ``fti``
    built by ``build_fti.sh`` (none with ``--no-fti``).
    """
    if args.no_fti:
        return {}
    if not args.fti_builds:
        binary = run_sbs.build_fti()
        return {"fti": (binary, run_sbs.fti_launcher(), ["/usr/bin/mpirun", "--version"])} if binary else {}
    out = {}
    for item in args.fti_builds.split(","):
        name, _, root = item.partition("=")
        binary = Path(root) / "ckpt_fti"
        if not name or not binary.is_file():
            raise SystemExit(f"--fti-builds: {item!r} is not NAME=ROOT with ROOT/ckpt_fti built "
                             "(build it: FTI_ROOT=ROOT FTI_MPICC=... bash benchmarks/fti/build_fti.sh)")
        out["fti-" + name] = (binary, *fti_launcher_for(binary))
    return out


def estimate_s(sizes: list[int], nlevels: int, runs_per_case: int, measured: dict[int, list[float]]) -> float:
    """Seconds the grid takes: runs per case x cases, at the median run time measured so far per size (or
    :data:`RUN_SECONDS`, interpolated by size)."""
    total = 0.0
    for mib in sizes:
        walls = measured.get(mib)
        per = statistics.median(walls) if walls else RUN_SECONDS.get(mib, 4.0 + mib / 64.0)
        total += per * runs_per_case * nlevels
    return total


def run_case(args: argparse.Namespace, mib: int, level: int, rng: random.Random) -> None:
    order = eulerian_order(args.systems, args.rounds, rng)
    print(f"case {mib} MiB L{level}: {len(order) - 1} runs, order {' '.join(order)}", flush=True)
    pred, leftovers = "-", []
    for i, system in enumerate(order):
        state = settle(args.settle, leftovers, args.settle_timeout)
        cfg = run_sbs.make_config(system, 0, args.group)
        load = run_sbs.load1()
        src = args.baseline_src if system == "base" else args.src if not is_fti(system) else None
        if is_fti(system):
            binary, launcher, _ = args.fti[system]
            cmd = [*launcher, "-n", str(args.ranks), str(binary), str(cfg), "ckpt", str(mib), str(level)]
        else:
            cmd = run_sbs.command(system, args, cfg, "floor" if is_floor(system) else "ckpt", mib, level, 0)
        t_run = time.monotonic()
        row = run_sbs.run_one(cmd, Path(args.out + ".log"), src, pycache=args.pycache)
        args.walls.setdefault(mib, []).append(time.monotonic() - t_run + state["settle_s"])
        row.update(system=system, mode="ckpt", pred=pred, run=i - 1, mib=mib, level=level, head=0,
                   load_before=load, settle=args.settle, time=time.time(), calls=args.calls,
                   floor_writeback=args.floor_writeback, floor_commit=args.floor_commit, **state)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        value = row.get("floor_s") or row.get("ckpt_s", "-")
        print(f"  {i - 1:3d} {pred:10s} -> {system:10s} exit={row['exit']} s={value} "
              f"cpu={row.get('cpu_s', '-')} runq={row.get('runq_s', '-')} blk={row.get('blk_s', '-')} "
              "dirty/wb found "
              f"{state['dirty_found']}/{state['wb_found']} load={load:.1f}", flush=True)
        pred, leftovers = system, [cfg.parent]
    for d in leftovers:
        shutil.rmtree(d, ignore_errors=True)


def best_floor(med: dict[str, float]) -> float | None:
    """The lower median of the floors measured (``floor``, ``floor-direct``): ftkit ÷ floor divides by it."""
    floors = [v for s, v in med.items() if is_floor(s)]
    return min(floors) if floors else None


def summarize(rows: list[dict], mpis: dict[str, str] | None = None) -> str:
    """Per case: each system's n, median, p90, median per predecessor, time split; the ratios."""
    good = [r for r in rows if r.get("run", -1) >= 0 and r["exit"] == 0 and str(r.get("ok", "1")) == "1"
            and (r.get("ckpt_s") or r.get("floor_s"))]
    names = {r["system"] for r in good}
    ftis = sorted(s for s in names if is_fti(s))
    systems = [*ftis, *(s for s in ("ftkit", "base", "floor", "floor-direct") if s in names)]
    by = defaultdict(list)
    for r in good:
        by[(r["mib"], r["level"], r["settle"], r["system"])].append(r)
    cases = sorted({k[:3] for k in by})
    lines = []
    if mpis:
        lines.append("MPI: " + ", ".join(f"{s} = {m}" for s, m in mpis.items()))
    head = ["MiB", "level", "settle", "system", "n", "median s", "p90 s",
            *(f"median after {p}" for p in systems), "cpu / runq / blk s (median)", "to disk MiB"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratio_lines = ["| MiB | level | settle | FTI | ftkit ÷ FTI median | p90 ÷ p90 | ftkit p90 ÷ FTI median | "
                   + " | ".join(f"÷ after {p}" for p in systems)
                   + " | ftkit ÷ floor median | p90 ÷ floor median | base ÷ FTI median / p90 |",
                   "|" + "---|" * (10 + len(systems))]
    for case in cases:
        med, p90 = {}, {}
        for s in systems:
            rs = by.get((*case, s), [])
            if not rs:
                continue
            xs = [row_value(r) for r in rs]
            med[s], p90[s] = statistics.median(xs), quantile(xs, 0.9)
            after = {p: [row_value(r) for r in rs if r["pred"] == p] for p in systems}
            split = " / ".join(f"{statistics.median(float(r.get(k, 'nan')) for r in rs):.3f}"
                               for k in ("cpu_s", "runq_s", "blk_s"))
            wmib = [float(r.get("wmib", "nan")) for r in rs]
            disk = f"{statistics.median(wmib):.0f}"
            cells = [str(case[0]), f"L{case[1]}", case[2], s, str(len(xs)), f"{med[s]:.3f}", f"{p90[s]:.3f}",
                     *(f"{statistics.median(a):.3f} ({len(a)})" if a else "-" for a in after.values()),
                     split, disk]
            lines.append("| " + " | ".join(cells) + " |")
        for fti in [f for f in ftis if f in med] if "ftkit" in med else []:
            fk = by[(*case, "ftkit")]
            ft = by[(*case, fti)]
            per_pred = []
            for p in systems:
                a = [row_value(r) for r in fk if r["pred"] == p]
                b = [row_value(r) for r in ft if r["pred"] == p]
                per_pred.append(f"{statistics.median(a) / statistics.median(b):.2f}" if a and b else "-")
            target = run_sbs.TARGETS[case[1]]
            fl = best_floor(med)
            ratio_lines.append(
                f"| {case[0]} | L{case[1]} | {case[2]} | {fti} | "
                f"**{med['ftkit'] / med[fti]:.2f}** ({target}) | "
                f"**{p90['ftkit'] / p90[fti]:.2f}** | {p90['ftkit'] / med[fti]:.2f} | "
                + " | ".join(per_pred)
                + (f" | {med['ftkit'] / fl:.2f} | {p90['ftkit'] / fl:.2f} |" if fl else " | - | - |")
                + (f" {med['base'] / med[fti]:.2f} / {p90['base'] / p90[fti]:.2f} |" if "base" in med
                   else " - |"))
        fl = best_floor(med)
        if "ftkit" in med and not any(f in med for f in ftis) and fl:
            ratio_lines.append(
                f"| {case[0]} | L{case[1]} | {case[2]} | - | - | - | - | " + " | ".join("-" for _ in systems)
                + f" | {med['ftkit'] / fl:.2f} | {p90['ftkit'] / fl:.2f} | - |")
    loads = [float(r["load_before"]) for r in good]
    foot = (f"\nload average before the runs: {min(loads):.1f}-{max(loads):.1f} "
            f"(median {quantile(loads, 0.5):.1f}); "
            "p90 = 90th percentile (linear interpolation); cpu = the calling thread on a CPU, runq = waiting "
            "for one (machine load), blk = off CPU (I/O, sleeps), slowest rank each" if loads else "")
    return "\n".join(lines) + "\n\n" + "\n".join(ratio_lines) + foot


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256", help="MiB per rank (comma-separated)")
    ap.add_argument("--levels", default="1,2,3,4")
    ap.add_argument("--rounds", type=int, default=None,
                    help="times each system runs after each system (default: enough for --min-runs)")
    ap.add_argument("--min-runs", type=int, default=10,
                    help="runs per system and case when --rounds is not given (rounded up to k per round)")
    ap.add_argument("--fti-builds", default=None, metavar="NAME=ROOT,...",
                    help="FTI builds to measure as separate systems fti-NAME, e.g. "
                         "mpich=/tmp/ftkit-fti,ompi41=/tmp/ftkit-fti-ompi (each under its own MPI's mpirun)")
    ap.add_argument("--settle", choices=("full", "sync", "none"), default="full")
    ap.add_argument("--settle-timeout", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--ranks", type=int, default=4, help="application ranks (one per emulated node)")
    ap.add_argument("--group", type=int, default=4, help="group_size")
    ap.add_argument("--no-fti", action="store_true", help="ftkit and the floors only")
    ap.add_argument("--no-floor", action="store_true", help="FTI and ftkit only")
    ap.add_argument("--floor-writeback", action="store_true",
                    help="the floors hand each 16 MiB piece to the device as they write it (as ftkit does)")
    ap.add_argument("--floor-direct", action="store_true",
                    help="also the floor whose L4 file is written with direct I/O (system floor-direct, as "
                         "ftkit's L4 writer for 64 MiB or more); ftkit ÷ floor takes the better floor")
    ap.add_argument("--floor-commit", action="store_true",
                    help="the floors also make their files' names durable and commit a manifest on rank 0 "
                         "(what a restartable checkpoint needs beyond the bytes: floors.py COMMIT)")
    ap.add_argument("--calls", type=int, default=1,
                    help="checkpoint calls per ftkit job, one barrier apart; the row's figures are the last "
                         "call's (a repeated L2/L3 call settles the previous one's copies: issue 37)")
    ap.add_argument("--out", default=str(run_sbs.ROOT / "order.jsonl"))
    ap.add_argument("--python", default=str(run_sbs.REPO / ".venv" / "bin" / "python"), help="ftkit's python")
    ap.add_argument("--src", default=None, help="ftkit's src directory to measure (PYTHONPATH; default: the "
                                                "venv's ftkit), e.g. a `git archive COMMIT src` snapshot")
    ap.add_argument("--baseline-src", default=None, help="src directory of an earlier ftkit: a fourth system "
                                                         "'base' (before/after a change in the same run)")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL", help="print the tables of saved rows and exit")
    ap.add_argument("--cases", default=None, metavar="MIB:LEVEL,...",
                    help="only these cases instead of --sizes x --levels, e.g. 64:1,64:3,256:3")
    ap.add_argument("--over-target", nargs="+", metavar="JSONL",
                    help="only the cases where ftkit misses a target (on its p90) in these saved rows")
    ap.add_argument("--budget", type=float, default=None, metavar="MIN",
                    help="fit into MIN minutes: as many rounds as fit (at most --min-runs' rounds, at least "
                         f"{BUDGET_MIN_RUNS} runs per system); exit before any run if even that does not fit")
    ap.add_argument("--run-seconds-from", nargs="+", metavar="JSONL",
                    help="seconds per run for the estimates from these saved rows (median gap per size)")
    ap.add_argument("--plan-only", action="store_true", help="print the plan and its estimate, run nothing")
    args = ap.parse_args()
    if args.summarize:
        print(summarize([json.loads(line) for f in args.summarize for line in open(f) if line.strip()]))
        return 0
    run_sbs.ROOT.mkdir(parents=True, exist_ok=True)
    args.pycache = run_sbs.ROOT / "pycache"
    args.fti = fti_systems(args)
    args.systems = [*args.fti, "ftkit", *(["base"] if args.baseline_src else []),
                    *([] if args.no_floor else ["floor"]),
                    *(["floor-direct"] if args.floor_direct and not args.no_floor else [])]
    k = len(args.systems)
    cases = plan_cases(args)
    seconds = run_seconds_from(load_rows(args.run_seconds_from)) if args.run_seconds_from else {}
    fixed = args.rounds is not None
    if not fixed:   # every system at least --min-runs times per case; with --budget, what fits
        args.rounds = plan_rounds(k, cases, seconds, min_runs=args.min_runs,
                                  budget_s=None if args.budget is None else args.budget * 60)
    mpis = {name: mpi_name(version) for name, (_, _, version) in args.fti.items()}
    # The library version without MPI_Init: an initialized singleton leaves its shared-memory file behind.
    mpis["ftkit"] = mpi_name([args.python, "-c", "import mpi4py; mpi4py.rc.initialize = mpi4py.rc.finalize = "
                              "False; from mpi4py import MPI; print(MPI.Get_library_version())"])
    per_case = args.rounds * k * k
    args.walls = {}
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    per_run = ", ".join(f"{m} MiB {seconds.get(m, RUN_SECONDS.get(m, 4.0 + m / 64.0)):.1f} s"
                        for m in sorted({m for m, _ in cases}))
    print(f"uptime: {uptime}; MPI {mpis}\n{k} systems ({' '.join(args.systems)}), {args.rounds} rounds: "
          f"{args.rounds * k} runs per system and case, {per_case + 1} runs per case (warm-up included), "
          f"{len(cases)} cases ({' '.join(f'{m}:L{lv}' for m, lv in cases)}); estimate "
          f"{grid_estimate_s(cases, per_case + 1, seconds) / 60:.0f} min "
          f"(per run: {per_run}{' from saved rows' if seconds else ' on a quiet machine'}; each run is "
          "killed after 900 s)", flush=True)
    if args.plan_only or not cases:
        return 0
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    for ci, (mib, level) in enumerate(cases):
        run_case(args, mib, level, rng)
        left = cases[ci + 1:]
        if args.budget is not None and not fixed and left:   # fit what is left, at the pace measured
            rounds, args.rounds = args.rounds, replan_rounds(args, k, left, time.monotonic() - t0, args.walls)
            per_case = args.rounds * k * k
            if args.rounds != rounds:
                print(f"  --budget: {args.rounds * k} runs per system from now on", flush=True)
        rest = sum(estimate_s([m], 1, per_case + 1, args.walls or seconds) for m, _ in left)
        print(f"  {(time.monotonic() - t0) / 60:.1f} min so far; about {rest / 60:.0f} min left "
              f"({len(left)} cases)", flush=True)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}; "
          f"{(time.monotonic() - t0) / 60:.1f} min")
    print(summarize([json.loads(line) for line in open(args.out) if line.strip()], mpis))
    return 0


if __name__ == "__main__":
    sys.exit(main())
