"""Driver of the FTI 1.6 / ftkit side-by-side benchmark, with each level's floor measured in the same run.

    python benchmarks/fti/run_sbs.py [--sizes 64,256] [--levels 1,2,3,4] [--heads 0,1] [--repeats 3]
                                     [--out /tmp/ftkit-fti/sbs.jsonl] [--max-wait 120]

For each case (MiB per rank, level, head) and repeat, interleaved (the order alternates between repeats):

* FTI: ``mpirun -n P ckpt_fti CONFIG ckpt MIB L``, then ``... recover MIB 0`` (the system's MPI, the one
  ``build_fti.sh`` compiled FTI with: Debian's Open MPI 4.1 or MPICH 4.0);
* ftkit: ``ftkit launch -n P --node-size S -- python ckpt_ftkit.py CONFIG ckpt|recover ...`` (this
  repository's venv, Open MPI 5 with ULFM);
* the floor of level L (``floors.py``, head 0 only: a floor has no head).

4 application ranks in 4 emulated nodes, group size 4 (head = 1: 8 processes, 2 per node, and the
post-processing of L2-L4 not inline), one configuration file for both systems (``config.template.ini``).
Every mpirun is also timed from outside (launch to exit: the whole-job wall time); ``sync`` runs between
runs, outside the timings. Before each case the driver waits for the 1-minute load average to drop under
``--load-limit`` (default 2.5), at most ``--max-wait`` seconds, and records the load it got.

``--baseline-src DIR`` adds a fourth system, ``base``: the same ftkit program with ``PYTHONPATH=DIR`` (a
``src`` directory of an earlier ftkit, e.g. ``git archive COMMIT src | tar -x -C /tmp/base``), so a change
is measured before and after in the same interleaved run.

Without FTI's source tarball (``build_fti.sh`` exits 3) only ftkit and the floors run. Rows go to a JSONL
file; the table (medians; ratio = median of the per-repeat ratios) is printed at the end, and
``--summarize FILE...`` prints it again from saved rows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ROOT = Path(os.environ.get("FTI_ROOT", "/tmp/ftkit-fti"))
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TARGETS = {1: 1.0, 2: 0.8, 3: 0.6, 4: 1.0}   # ftkit / FTI (issue 16)
FLOOR_TARGET = 1.15


def load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def wait_for_quiet(limit: float, max_wait: float) -> tuple[float, float]:
    """Wait (10 s steps, at most ``max_wait`` s) for the 1-minute load < ``limit``; return (load, waited)."""
    t0 = time.monotonic()
    while load1() >= limit and time.monotonic() - t0 < max_wait:
        time.sleep(min(10.0, max(0.0, max_wait - (time.monotonic() - t0))))
    return load1(), round(time.monotonic() - t0, 1)


def build_fti() -> Path | None:
    """Build FTI and ckpt_fti (idempotent); None (with the reason printed) when it cannot be built."""
    r = subprocess.run(["bash", str(HERE / "build_fti.sh")], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        print(f"FTI not available ({r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
              "): comparing ftkit with the floors only", flush=True)
        return None
    return Path(r.stdout.strip().splitlines()[-1])


def fti_launcher() -> list[str]:
    """The mpirun of the MPI FTI was built with (the system's ``mpicc``): Open MPI or MPICH's Hydra."""
    version = subprocess.run(["/usr/bin/mpirun", "--version"], capture_output=True, text=True).stdout
    if "HYDRA" in version:      # MPICH: oversubscription allowed and no binding by default
        return ["/usr/bin/mpirun"]
    return ["/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def make_config(system: str, head: int, group: int) -> Path:
    d = ROOT / "run" / system
    shutil.rmtree(d, ignore_errors=True)
    for sub in ("local", "global", "meta"):
        (d / sub).mkdir(parents=True)
    text = (HERE / "config.template.ini").read_text()
    for key, value in {"@DIR@": str(d), "@HEAD@": str(head), "@NODE_SIZE@": "2" if head else "1",
                       "@INLINE@": "0" if head else "1", "@GROUP@": str(group)}.items():
        text = text.replace(key, value)
    cfg = d / "config.ini"
    cfg.write_text(text)
    return cfg


def command(system: str, args: argparse.Namespace, cfg: Path, mode: str, mib: int, level: int,
            head: int) -> list[str]:
    nprocs, node = (2 * args.ranks, 2) if head else (args.ranks, 1)
    if system == "fti":
        return [*args.fti_mpirun, "-n", str(nprocs), str(args.fti_bin), str(cfg), mode, str(mib), str(level)]
    floor = system in ("floor", "floor-direct")                       # run_order.py --floor-direct
    program = HERE / ("floors.py" if floor else "ckpt_ftkit.py")
    writeback = str(int(getattr(args, "floor_writeback", False)))   # run_order.py --floor-writeback
    durable = str(int(getattr(args, "floor_commit", False)))        # run_order.py --floor-commit
    calls = int(getattr(args, "calls", 1) or 1)                       # run_order.py --calls
    extra = [str(cfg), mode, str(mib), str(level), *([str(calls)] if calls > 1 else [])] \
        if not floor else [str(cfg.parent), str(mib), str(level), str(args.group), writeback, durable,
                           str(int(system == "floor-direct"))]
    return [args.python, "-m", "ftkit", "launch", "-n", str(nprocs), "--node-size", str(node),
            "--timeout", "900", "--", args.python, str(program), *extra]


def run_one(cmd: list[str], log: Path, pythonpath: str | None = None, pycache: Path | None = None) -> dict:
    env = dict(os.environ, PATH=SYSTEM_PATH)
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    if pycache is not None:   # compiled once (warm-up) and reused, as an installed package's .pyc files are
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath   # ftkit launch forwards it to the ranks
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        out, _ = p.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)          # this driver's own job (its own session) only
        out, _ = p.communicate()
    wall = time.monotonic() - t0
    with open(log, "a") as f:
        f.write(f"### exit={p.returncode} wall={wall:.3f}\n$ {' '.join(cmd)}\n{out}\n")
    m = re.search(r"(?:BENCH|FLOOR)RESULT (.*)", out or "")
    row = dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}
    return {**row, "exit": p.returncode, "wall_s": round(wall, 3)}


def run_case(args: argparse.Namespace, mib: int, level: int, head: int, systems: list[str]) -> None:
    load, waited = wait_for_quiet(args.load_limit, args.max_wait)
    print(f"case {mib} MiB L{level} head {head}: load {load:.2f} after waiting {waited:.0f} s", flush=True)
    for rep in range(-1 if args.warmup else 0, args.repeats):
        order = systems if rep % 2 == 0 else systems[::-1]
        for system in order:
            if system == "floor" and head:
                continue
            cfg = make_config(system, head, args.group)
            modes = ("floor",) if system == "floor" else ("ckpt", "recover")
            for mode in modes:
                subprocess.run(["sync"], check=False)
                before = load1()
                row = run_one(command(system, args, cfg, mode, mib, level, head), Path(args.out + ".log"),
                              args.baseline_src if system == "base" else None, pycache=args.pycache)
                row.update(system=system, mode=mode, mib=mib, level=level, head=head, rep=rep,
                           load_before=before, case_load=load, waited_s=waited, time=time.time())
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"  rep {rep} {system:5s} {mode:7s} exit={row['exit']} ok={row.get('ok', '-')} "
                      f"ckpt={row.get('ckpt_s', '-')} restart={row.get('restart_s', '-')} "
                      f"floor={row.get('floor_s', '-')} wall={row['wall_s']} load={before}", flush=True)
            shutil.rmtree(cfg.parent, ignore_errors=True)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(rows: list[dict]) -> str:
    """The issue's table from saved rows: medians per system, ftkit / FTI and ftkit / floor."""
    by = defaultdict(dict)   # (head, mib, level, rep) -> (system, mode) -> row
    for r in rows:
        if r["rep"] >= 0 and r["exit"] == 0 and str(r.get("ok", "1")) == "1":
            by[(r["head"], r["mib"], r["level"], r["rep"])][(r["system"], r["mode"])] = r
    floors = defaultdict(list)
    for (_, mib, level, _), runs in by.items():
        if ("floor", "floor") in runs:
            floors[(mib, level)].append(float(runs[("floor", "floor")]["floor_s"]))
    cases = sorted({k[:3] for k in by})
    lines = ["| head | MiB | level | FTI ckpt s | ftkit ckpt s | ftkit ÷ FTI (target) | floor s | "
             "ftkit ÷ floor (≤ 1.15) | FTI restart s | ftkit restart s | restart ÷ | FTI job wall s | "
             "ftkit job wall s | wall ÷ (≤ 1.5) | before: ckpt s / restart s / wall s |", "|" + "---|" * 15]
    for case in cases:
        head, mib, level = case
        reps = [runs for k, runs in by.items() if k[:3] == case]

        def col(system: str, mode: str, key: str, reps: list[dict] = reps) -> float:
            return _median([float(r[(system, mode)][key]) for r in reps if (system, mode) in r])

        def paired(mode: str, key: str, reps: list[dict] = reps) -> float:
            pairs = [(r[("ftkit", mode)], r[("fti", mode)]) for r in reps
                     if ("ftkit", mode) in r and ("fti", mode) in r]
            return _median([float(a[key]) / float(b[key]) for a, b in pairs if float(b[key]) > 0])

        ftk = col("ftkit", "ckpt", "ckpt_s")
        floor = _median(floors.get((mib, level), []))
        cells = [str(head), str(mib), f"L{level}", f"{col('fti', 'ckpt', 'ckpt_s'):.3f}", f"{ftk:.3f}",
                 f"**{paired('ckpt', 'ckpt_s'):.2f}** ({TARGETS[level]})", f"{floor:.3f}",
                 f"**{ftk / floor:.2f}**" if not head else "-",
                 f"{col('fti', 'recover', 'restart_s'):.3f}", f"{col('ftkit', 'recover', 'restart_s'):.3f}",
                 f"{paired('recover', 'restart_s'):.2f}", f"{col('fti', 'ckpt', 'wall_s'):.2f}",
                 f"{col('ftkit', 'ckpt', 'wall_s'):.2f}", f"{paired('ckpt', 'wall_s'):.2f}",
                 f"{col('base', 'ckpt', 'ckpt_s'):.3f} / {col('base', 'recover', 'restart_s'):.3f} / "
                 f"{col('base', 'ckpt', 'wall_s'):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    loads = [float(r["load_before"]) for r in rows]
    if loads:
        lines.append(f"\nload average before the runs: {min(loads):.1f}-{max(loads):.1f} "
                     f"(median {_median(loads):.1f}); nan = not measured")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256", help="MiB per rank (comma-separated)")
    ap.add_argument("--levels", default="1,2,3,4")
    ap.add_argument("--heads", default="0", help="0, 1 or 0,1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4, help="application ranks (one per emulated node)")
    ap.add_argument("--group", type=int, default=4, help="group_size")
    ap.add_argument("--out", default=str(ROOT / "sbs.jsonl"))
    ap.add_argument("--load-limit", type=float, default=2.5)
    ap.add_argument("--max-wait", type=float, default=120.0, help="seconds to wait for the load per case")
    ap.add_argument("--warmup", action="store_true", help="one untimed repeat (rep -1) per case first")
    ap.add_argument("--no-fti", action="store_true", help="ftkit and the floors only")
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"), help="ftkit's python")
    ap.add_argument("--baseline-src", default=None, help="src directory of an earlier ftkit: system 'base'")
    ap.add_argument("--keep-env-bytecode", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE if the environment sets it (then every rank "
                         "compiles ftkit from source, ~0.8 s of CPU each); default: bytecode cached in "
                         "FTI_ROOT/pycache")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL", help="print the table of saved rows and exit")
    args = ap.parse_args()
    if args.summarize:
        print(summarize([json.loads(line) for f in args.summarize for line in open(f) if line.strip()]))
        return 0
    ROOT.mkdir(parents=True, exist_ok=True)
    args.pycache = None if args.keep_env_bytecode else ROOT / "pycache"
    args.fti_bin = None if args.no_fti else build_fti()
    args.fti_mpirun = fti_launcher() if args.fti_bin else []
    systems = [*(["fti"] if args.fti_bin else []), "ftkit", *(["base"] if args.baseline_src else []), "floor"]
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    for head in map(int, args.heads.split(",")):
        for mib in map(int, args.sizes.split(",")):
            for level in map(int, args.levels.split(",")):
                run_case(args, mib, level, head, systems)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(summarize([json.loads(line) for line in open(args.out) if line.strip()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
