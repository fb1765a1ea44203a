"""FTI 1.6 and ftkit side by side on the virtual cluster: checkpoint, host fault, recovery at L1-L4.

    mpislot .venv/bin/python benchmarks/fti/cluster_sbs.py [--hosts 4] [--per-host 1] [--mib 1]
                                                           [--levels 1,2,3,4]

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

FTI runs under Debian's MPICH (the system ``mpicc`` ``build_fti.sh`` uses; Hydra over the cluster's ssh
agent, UCX over TCP), ftkit under the Open MPI 5 wheel's ``mpirun`` as ``ftkit launch`` builds it. It prints
one table: each run's result and the times both programs report (slowest rank, MPI_Wtime) with the ratio
ftkit / FTI. Meant as a correctness run at a tiny size; on a busy machine the times are not measurements
(they are printed, not recorded). The output of every run goes to ``$FTI_ROOT/cluster-sbs.log``.

Status on the test machine (Debian 12, MPICH 4.0.2 with UCX over TCP between the hosts): FTI's checkpoint
completes (its metadata is written on the shared directory), but every rank of ``ckpt_fti`` then hangs in
``MPI_Finalize`` (rank 0 spinning in ``uct_tcp_iface_progress``, the others in the PMI barrier; gdb) and
rank 0's result line never reaches ``mpiexec``'s output, so the FTI column stays FAILED (``timeout``). ftkit's
own programs under MPICH are not affected (ftkit bounds ``MPI_Finalize`` with ``SIGALRM``). ``--job-timeout``
bounds each run (default 120 s).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from run_sbs import ROOT, build_fti  # noqa: E402  (this directory's driver: FTI's build)
from tools.cluster.vcluster import ClusterUnavailable, down, faults, mpich, up  # noqa: E402
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


def make_config(c, system: str, level: int, per_host: int) -> Path:  # type: ignore[no-untyped-def]
    """The shared configuration of ``system`` for ``level``: local files on each host's disk."""
    d = c.shared / f"{system}-L{level}"
    for sub in ("global", "meta"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    text = (HERE / "config.template.ini").read_text()
    for key, value in {"@DIR@": str(d), "@HEAD@": "0", "@NODE_SIZE@": str(per_host), "@INLINE@": "1",
                       "@GROUP@": str(len(c.hosts))}.items():
        text = text.replace(key, value)
    text = text.replace(f"ckpt_dir = {d}/local", f"ckpt_dir = {c.local}/{system}-L{level}")
    text = text.replace("local_test = 1", "local_test = 0")
    cfg = d / "config.ini"
    cfg.write_text(text)
    return cfg


def fti_command(c, fti: Path, per_host: int, args: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """``ckpt_fti`` under Hydra on every host; ``fti`` is its copy on the shared directory (the build is
    under /tmp, which each host has its own of), its ``libfti.so`` beside it."""
    libs = f"{fti.parent}:{mpich.env(c)['LD_LIBRARY_PATH']}"
    # stdbuf: Hydra's mpiexec buffers what the ranks print when its stdout is a pipe (the result line came
    # only at its exit, which MPICH's finalize hang delayed forever)
    hydra = mpich.command(c, c.hosts, per_host, [str(fti), *args], {"LD_LIBRARY_PATH": libs})
    return ["stdbuf", "-oL", *hydra]


def ftkit_command(c, per_host: int, args: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """``ckpt_ftkit.py`` under the wheel's mpirun as ``ftkit launch`` builds it, on every host."""
    cmd = build_mpirun_command(len(c.hosts) * per_host, [sys.executable, str(HERE / "ckpt_ftkit.py"), *args])
    cmd[1:1] = ["--host", c.hostlist(c.hosts, per_host)]
    return cmd


def run(c, cmd: list[str], what: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Run ``cmd`` on the login node (bounded); return its BENCHRESULT fields plus ``exit``.

    A job whose ranks printed their result but do not end within :data:`AFTER_RESULT` seconds is killed and
    its ``exit`` is ``finalize-hung``: Debian's MPICH with UCX over TCP between the hosts hangs in
    ``MPI_Finalize`` here (one rank spinning in ``uct_tcp_iface_progress``, the others waiting in the PMI
    barrier); the checkpoint is complete by then (``FTI_Finalize`` and the result line come first).
    """
    p = subprocess.Popen(c.login(cmd, cwd=c.shared), cwd=c.shared, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         stdin=subprocess.DEVNULL, env={**os.environ, **c.mpi_env()})
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


def ratio(a: str | None, b: str | None) -> str:
    try:
        return f"{float(a) / float(b):.2f}"  # type: ignore[arg-type]
    except (TypeError, ValueError, ZeroDivisionError):
        return "-"


def level_row(c, fti: Path, level: int, per_host: int,  # type: ignore[no-untyped-def]
              mib: int) -> tuple[str, bool]:
    """Checkpoint with both systems, lose the level's disks, recover with both; one table row."""
    systems = SYSTEMS
    cfg = {s: make_config(c, s, level, per_host) for s in systems}
    build = {"fti": lambda a: fti_command(c, fti, per_host, a),
             "ftkit": lambda a: ftkit_command(c, per_host, a)}
    ck = {s: run(c, build[s]([str(cfg[s]), "ckpt", str(mib), str(level)]), f"{s} L{level} ckpt")
          for s in systems}
    lose_disks(c, level)
    rec = {s: run(c, build[s]([str(cfg[s]), "recover", str(mib), "0"]), f"{s} L{level} recover")
           for s in systems}
    ended = ("0", "finalize-hung")   # see run(): the MPICH finalize hang comes after the result
    ok = {s: ck[s].get("ok") == "1" and rec[s].get("ok") == "1" and ck[s]["exit"] in ended
          and rec[s]["exit"] in ended for s in systems}
    for s in ("fti", "ftkit"):
        ck.setdefault(s, {})
        rec.setdefault(s, {})
    lost = ",".join(LOST[level]) or "-"
    shown = {s: "-" if s not in systems else "ok" if ok[s] else "FAILED" for s in ("fti", "ftkit")}
    row = (f"| L{level} | {lost} | {shown['fti']} | {shown['ftkit']} | "
           f"{ck['fti'].get('ckpt_s', '-')} | {ck['ftkit'].get('ckpt_s', '-')} | "
           f"{ratio(ck['ftkit'].get('ckpt_s'), ck['fti'].get('ckpt_s'))} | "
           f"{rec['fti'].get('restart_s', '-')} | "
           f"{rec['ftkit'].get('restart_s', '-')} | "
           f"{ratio(rec['ftkit'].get('restart_s'), rec['fti'].get('restart_s'))} |")
    return row, all(ok.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--per-host", type=int, default=1)
    ap.add_argument("--mib", type=int, default=1)
    ap.add_argument("--levels", default="1,2,3,4")
    ap.add_argument("--disk-mb", type=int, default=256)
    ap.add_argument("--job-timeout", type=float, default=120.0)
    ap.add_argument("--systems", default="fti,ftkit", help="fti,ftkit (default), or one of them")
    args = ap.parse_args()
    JOB_TIMEOUT[0] = args.job_timeout
    SYSTEMS[:] = args.systems.split(",")
    try:
        check_capable()
        mich = mpich.mpiexec()
    except ClusterUnavailable as exc:
        print(f"no virtual cluster here: {exc}")
        return 77
    built = build_fti()
    if built is None:
        return 3
    tag = f"fs{os.getpid() % 100000}"
    base = Path(f"/var/tmp/ftkit-vcluster-{tag}")
    down(base, tag)
    c = up(args.hosts, 0, args.disk_mb, base, prefix=tag)
    rows, all_ok = [], True
    try:
        fti = c.shared / "fti-bin" / "ckpt_fti"   # the build is under /tmp: every host has its own /tmp
        fti.parent.mkdir()
        shutil.copy2(built, fti)
        lib = next(p for p in (ROOT / "install" / "lib", ROOT / "install" / "lib64") if p.is_dir())
        for so in lib.glob("libfti.so*"):
            shutil.copy2(so, fti.parent / so.name, follow_symlinks=True)
        print(f"{args.hosts} hosts x {args.per_host} rank(s), {args.mib} MiB per rank; FTI under {mich}, "
              f"ftkit under the Open MPI 5 wheel; log: {LOG}", flush=True)
        for level in (int(x) for x in args.levels.split(",")):
            row, ok = level_row(c, fti, level, args.per_host, args.mib)
            rows.append(row)
            all_ok &= ok
            print(row, flush=True)
    finally:
        left = [r for r in down(base, tag) if r.startswith("killed") and int(r.split()[1]) > 1]
        if left:
            print(f"processes were left on the hosts: {left}")
            all_ok = False
    print("\n| level | disks lost | FTI | ftkit | FTI ckpt s | ftkit ckpt s | ftkit/FTI | FTI restart s | "
          "ftkit restart s | ftkit/FTI |\n|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("(tiny size on a shared machine: a correctness run; the times are not measurements)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
