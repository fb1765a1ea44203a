"""Kill campaign for jobs under ``ftkit launch``: a job that loses a rank ends or goes on, never hangs.

usage: python benchmarks/plain_kill_campaign.py [--trials 40] [--seed 1] [--out results.jsonl]
       [--configs l1,l2,l3,l4] [--kinds plain,spare,launcher] [--nprocs 8] [--node-size 2] [--only 9]
       [--keep DIR] [--keep-failed DIR]

``--only I`` replays trial ``I`` of the seed alone (the trials before it are drawn, not run); ``--keep DIR``
keeps each trial's directory and output there (``DIR/<i>/``) for a look afterwards.

Each trial runs ``examples/heat.py --fti-loop`` (FTI's loop shape: ``while step < n: ...; snapshot()``, no
``ckpt.steps()``, no error handling) under ``ftkit launch`` with a random configuration (``--configs``: L1,
L2, L3 or L4 every few iterations; ``head`` 0 or 1; the FT thread on, ``inline_l2/l3/l4 = 0``, or off). Once
the first checkpoint is committed, the driver waits a random delay and, from outside, SIGKILLs one rank or
every rank of one emulated node (then deletes that node's local directory when the configuration has
redundancy: the node is lost), or SIGSTOPs one rank (hung, not dead: the ULFM detector declares it dead
after ``mpi_ft_detector_timeout``, set to 15 s here). Outcomes:

``ended``
    ``ftkit launch`` exited non-zero within the bound, its last line naming the checkpoint a relaunch uses
    (for a lost node: the one it names for that case), no process of the job left, and the relaunch
    recovered exactly that checkpoint and ended with the failure-free digest (bit for bit); or the
    application finished with that digest and ``ftkit launch`` then exited non-zero naming the rank it had
    to end (a stopped head that no rank talked to: killed once every other rank had ended);
``late``
    the job had finished before the kill landed (digest checked);
``hang``
    the job did not end within the bound (``failure_timeout`` 30 s + detector + 60 s);
``orphan``
    a process of the job was still running 60 s after ``ftkit launch`` exited;
``wrong``
    exit code 0 after a failure, no or another checkpoint recovered than announced, or a wrong digest.

``--kinds`` adds three more kinds of trial to these ``plain`` ones (``plain`` alone draws as the earlier
campaigns did, so their seeds replay):

``start``
    one rank SIGKILLed during the job's start-up, a random 0-2.5 s after its process appeared (before,
    inside or just after ``MPI_Init``, before any checkpoint). ``ended``: ``ftkit launch`` exited non-zero
    within the bound, no process left, its last line saying the rank ended before ``MPI_Init`` had
    completed (the other ranks would wait there for good) or naming the checkpoint a relaunch uses (none),
    and the relaunch ended with the failure-free digest.

``spare``
    ``--nprocs`` minus one node of application ranks running ``ckpt.steps()`` and one node's worth of
    ``--spares``; an application rank or node SIGKILLed, or a rank SIGSTOPped, at a random moment. Outcome
    ``recovered``: the online recovery completed and the job ended 0 with the failure-free digest; or
    ``ended``: it ended non-zero within the bound and the relaunch ended with that digest.
``launcher``
    ``ftkit launch --grace 5`` itself gets SIGTERM, SIGINT, SIGHUP or SIGKILL at a random moment after the
    first checkpoint, or runs under ``timeout -s TERM T`` (T random, 3-10 s). ``ended``: every process of
    the job gone within the grace period + 30 s of the signal, the exit code the signal's (``128 + sig``,
    124 for ``timeout``, -9 for SIGKILL), and the relaunch recovered the newest committed checkpoint (read
    from the manifest) and ended with the failure-free digest; ``orphan``/``hang``/``wrong`` otherwise.

A trial is also marked ``SILENT`` when ``ftkit launch``'s last line names a rank other than the victims
that ended with no reason given (a signal no note explains) or that was declared dead (a detector false
positive): every rank's end must be accounted for. The relaunch runs with ``ftkit launch``'s own detector
timeout (60 s), not the first job's 15 s.

Prints one line per trial and a table by configuration, and appends one JSON line per trial to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ftkit._jobproc import is_running, process_environ
from ftkit._wait import deadline_after, poll_until
from ftkit.errors import FtkitError, TimeoutFailure
from ftkit.inject import kill_together
from ftkit.storage.manifest import read_manifest

REPO = Path(__file__).resolve().parents[1]
HEAT = REPO / "examples" / "heat.py"
OUTCOMES = ("ended", "recovered", "late", "hang", "orphan", "wrong")
KINDS = ("plain", "spare", "launcher")
CONFIGS = ("l1", "l2", "l3", "l4")
#: The ULFM detector's settings for the trials (a SIGSTOPped rank is declared dead after the timeout).
DETECTOR = {"OMPI_MCA_mpi_ft_detector_period": "3", "OMPI_MCA_mpi_ft_detector_timeout": "15"}
STEPS, SIZE = 300, 48
#: ``--short-detector-relaunch``: relaunch with :data:`DETECTOR` too, as the campaigns before seed 3 did
#: (seed 2 trial 9: a rank of the relaunch was declared dead while it decoded a lost node's L3 group).
SHORT_DETECTOR_RELAUNCH = False


@dataclass(frozen=True)
class Trial:
    """One trial: configuration, what is killed and how, and when (seconds after the first checkpoint)."""

    config: str
    head: int
    thread: int
    victim: str      # "rank" or "node"
    sig: str         # "KILL" or "STOP"
    rank: int        # the rank killed, or a rank of the node killed
    delay: float
    nprocs: int = 8
    node_size: int = 2
    #: "plain" (no spares, the job ends), "start" (a plain job whose rank is killed during its start-up),
    #: "spare" (spares configured: online recovery) or "launcher" (a signal to ftkit launch itself; ``sig``
    #: is TERM, INT, HUP, KILL or "timeout": ``timeout -s TERM``)
    kind: str = "plain"
    #: Spare ranks (kind "spare"): started after the ``nprocs`` application ranks.
    spares: int = 0


@dataclass
class Outcome:
    outcome: str
    detail: str
    rc: int | None
    reported: int | None
    recovered: int | None
    seconds: float
    #: Ranks other than the victims that ftkit launch's last line says ended without a reason (a signal no
    #: note explains): every rank's end must be accounted for.
    silent: list[int] = field(default_factory=list)


def draw(rng: random.Random, configs: tuple[str, ...] = CONFIGS, nprocs: int = 8,
         node_size: int = 2, kinds: tuple[str, ...] = ("plain",)) -> Trial:
    """A random trial of one of ``kinds`` (with ``("plain",)`` alone: the draws of the earlier campaigns, so
    their seeds replay)."""
    kind = "plain" if kinds == ("plain",) else rng.choice(kinds)
    if kind == "start":
        return Trial(config=rng.choice(configs), head=rng.choice((0, 0, 1)), thread=rng.choice((0, 1)),
                     victim="rank", sig="KILL", rank=rng.randrange(nprocs),
                     delay=round(rng.uniform(0.0, 2.5), 2), nprocs=nprocs, node_size=node_size, kind=kind)
    if kind == "spare":
        # 6 application ranks on 3 emulated nodes and one node's worth of spares (8 processes); no heads
        sig = rng.choice(("KILL", "KILL", "STOP"))
        return Trial(config=rng.choice(configs), head=0, thread=rng.choice((0, 1)),
                     victim="rank" if sig == "STOP" else rng.choice(("rank", "rank", "node")), sig=sig,
                     rank=rng.randrange(nprocs - node_size), delay=round(rng.uniform(0.0, 3.0), 2),
                     nprocs=nprocs - node_size, node_size=node_size, kind=kind, spares=node_size)
    if kind == "launcher":
        sig = rng.choice(("TERM", "INT", "HUP", "KILL", "timeout"))
        return Trial(config=rng.choice(configs), head=rng.choice((0, 0, 1)), thread=rng.choice((0, 1)),
                     victim="launcher", sig=sig, rank=-1,
                     delay=round(rng.uniform(0.0, 3.0) if sig != "timeout" else rng.uniform(3.0, 10.0), 2),
                     nprocs=nprocs, node_size=node_size, kind=kind)
    sig = rng.choice(("KILL", "KILL", "KILL", "STOP"))
    return Trial(config=rng.choice(configs), head=rng.choice((0, 0, 1)), thread=rng.choice((0, 1)),
                 victim="rank" if sig == "STOP" else rng.choice(("rank", "node")), sig=sig,
                 rank=rng.randrange(nprocs), delay=round(rng.uniform(0.0, 3.0), 2), nprocs=nprocs,
                 node_size=node_size)


def write_config(d: Path, t: Trial) -> None:
    level = int(t.config[1])
    basic = {"ckpt_dir": "run/local", "glbl_dir": "run/global", "meta_dir": "run/meta", "head": t.head,
             "node_size": t.node_size, f"ckpt_l{level}": 5}
    if level in (2, 3):
        nodes = t.nprocs // t.node_size
        basic["group_size"] = nodes if t.kind == "spare" else 4 if level == 3 else 2
    if t.thread:
        basic.update({"inline_l2": 0, "inline_l3": 0, "inline_l4": 0})
    ftk = {"interval_unit": "iterations", "failure_timeout": 30}
    d.mkdir(parents=True, exist_ok=True)
    (d / "ftkit.ini").write_text("[basic]\n" + "".join(f"{k} = {v}\n" for k, v in basic.items())
                                 + "[ftkit]\n" + "".join(f"{k} = {v}\n" for k, v in ftk.items()))


def marked_pids(marker: str) -> list[int]:
    """Pids of the running processes whose command line holds ``marker`` (mpirun and its ranks)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
        except OSError:
            continue
        if is_running(int(entry)):
            found.append(int(entry))
    return found


def rank_pids(marker: str) -> dict[int, int]:
    """World rank -> pid of the running processes whose command line holds ``marker``."""
    found = {}
    for pid in marked_pids(marker):
        rank = (process_environ(pid) or {}).get("OMPI_COMM_WORLD_RANK")
        if rank is not None:
            found[int(rank)] = pid
    return found


def newest_committed(meta_dir: Path) -> int | None:
    """The id of the newest committed checkpoint in ``meta_dir``'s manifest (None: none)."""
    try:
        manifest = read_manifest(meta_dir)
    except (OSError, ValueError, FtkitError):
        return None
    done = [e for e in manifest.newest_first() if e.complete_levels] if manifest is not None else []
    return done[0].id if done else None


def committed(meta_dir: Path) -> bool:
    """Whether a checkpoint is committed in ``meta_dir`` (read from its manifest)."""
    return newest_committed(meta_dir) is not None


def wait_until(test, limit: float) -> bool:  # noqa: ANN001 - a condition
    """Poll ``test()`` until true (True) or ``limit`` seconds passed (False): the project's one poll loop."""
    try:
        poll_until(test, deadline_after(limit), "campaign condition", max_sleep=0.1)
    except TimeoutFailure:
        return False
    return True


def launch(d: Path, program: Path, *args: str, t: Trial, detector: bool = True,
           prefix: tuple[str, ...] = (), grace: float | None = None) -> subprocess.Popen[str]:
    """Start the trial's job; ``detector``: with the short detector timeout of :data:`DETECTOR` (the first
    job, where a SIGSTOPped rank must be declared dead), else ``ftkit launch``'s own (the relaunch: nothing
    hangs there, and a rank busy without an MPI call for 15 s on the loaded machine was declared dead: the
    detector's heartbeats come from the MPI progress engine). A spare trial runs ``ckpt.steps()`` with
    ``--spares``, the others FTI's loop; ``prefix`` goes before ``ftkit launch`` (``timeout -s TERM 9``),
    ``grace`` is its ``--grace``."""
    opts = ["--spares", str(t.spares)] if t.spares else []
    opts += ["--grace", str(grace)] if grace is not None else []
    loop = [] if t.kind == "spare" else ["--fti-loop"]
    cmd = [*prefix, sys.executable, "-m", "ftkit", "launch", "-n", str(t.nprocs), "--node-size",
           str(t.node_size), *opts, "--", sys.executable, str(program), *loop, "--steps", str(STEPS),
           "--size", str(SIZE), "--config", "ftkit.ini", *args]
    return subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(DETECTOR if detector else {})}, start_new_session=True)


def _finish(proc: subprocess.Popen[str], limit: float, marker: str) -> tuple[int | None, str, str]:
    """Wait for ``proc`` at most ``limit`` seconds; return its code (None: killed as hung) and output."""
    try:
        out, err = proc.communicate(timeout=limit)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        kill_left(marker)  # an orphaned mpirun would hold the output pipes open
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            out, err = "", ""
        return None, out, err


def kill_left(marker: str) -> None:
    """SIGKILL every process whose command line holds ``marker`` (clean-up after a failed trial)."""
    for pid in marked_pids(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def last_line(err: str) -> str:
    """The last line of a job's standard error, without the NUL bytes Open MPI's output forwarding sometimes
    leaves before it (seed 53 trial 19: ``\\0ftkit launch: the job failed: ...`` was judged wrong)."""
    text = err.replace("\0", "").strip()
    return text.splitlines()[-1] if text else ""


def _victims(t: Trial) -> list[int]:
    if t.victim == "rank":
        return [t.rank]
    first = t.rank - t.rank % t.node_size
    return list(range(first, first + t.node_size))


def silent_ranks(last: str, victims: list[int]) -> list[int]:
    """Ranks that ``ftkit launch``'s last line says were killed with no note saying why, or declared dead
    (alive but busy: a false positive of the detector), victims left out."""
    found: set[int] = set()
    for part in last.split("; "):
        m = re.search(r"ranks? ([\d,]+) (killed \(no exit seen|killed by SIG|declared dead)", part)
        if m:
            found |= {int(r) for r in m.group(1).split(",")}
    return sorted(found - set(victims))


def reference_digest() -> str:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ftkit_example_heat", HEAT)
    heat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heat)  # type: ignore[union-attr]
    return heat.digest(heat.reference(SIZE, STEPS))


def run_trial(t: Trial, workdir: Path, expected: str) -> Outcome:
    """Run one trial in ``workdir`` (made empty first) and judge it (see the module docstring)."""
    shutil.rmtree(workdir, ignore_errors=True)
    write_config(workdir, t)
    program = workdir / f"heat_{os.getpid()}_{time.monotonic_ns()}.py"  # a marker no other job has
    program.write_text(HEAT.read_text())
    run = {"plain": _plain_trial, "start": _plain_trial, "spare": _spare_trial,
           "launcher": _launcher_trial}[t.kind]
    return run(t, workdir, program, expected)


def _kill_victims(t: Trial, workdir: Path, program: Path) -> None:
    """SIGKILL (SIGSTOP) the trial's victims; a lost node's local directory goes with them when the
    configuration has redundancy."""
    pids = rank_pids(program.name)
    victims = [pids[r] for r in _victims(t) if r in pids]

    def lose_disk() -> None:  # while the node's processes are stopped: nobody reads it first
        if t.victim == "node" and t.config != "l1":
            for node_dir in (workdir / "run" / "local").glob(f"node{t.rank // t.node_size}"):
                shutil.rmtree(node_dir, ignore_errors=True)

    if t.sig == "KILL":
        kill_together(victims, lose_disk)  # a node's ranks at once (one ended on its own: it is ignored)
        return
    for pid in victims:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass  # it ended between the look and the stop: the job is finishing (judged below)
    lose_disk()


def _relaunch(t: Trial, workdir: Path, program: Path, expected: str,
              reported: int | None) -> tuple[str | None, int | None]:
    """Relaunch the trial's job (no kill, ``ftkit launch``'s own detector timeout); return what went wrong
    (None: the relaunch recovered checkpoint ``reported``, None meaning a fresh start, and ended with the
    failure-free digest) and the checkpoint it recovered."""
    again = launch(workdir, program, t=t, detector=SHORT_DETECTOR_RELAUNCH)
    rc2, out2, err2 = _finish(again, 300, program.name)
    (workdir / "relaunch.out").write_text(out2)
    (workdir / "relaunch.err").write_text(err2)
    got = re.search(r"recovered checkpoint (\d+)", out2)
    recovered = int(got.group(1)) if got else None
    digest2 = re.search(r"^digest ([0-9a-f]{16})$", out2, re.M)
    if rc2 != 0 or digest2 is None or digest2.group(1) != expected:
        # The error itself (e.g. a RecoveryError naming each rank's file, level and reason) is often far
        # above the last 300 characters (seed 48 trial 1 on 84094da kept only the exit hook's lines).
        error = re.search(r"^\S*(?:Error|Failure): .*$", err2, re.M)
        return (f"relaunch rc {rc2}: {error.group(0)[:1000] + ' ... ' if error else ''}"
                f"{err2.strip()[-300:]}"), recovered
    if recovered != reported:
        return f"announced checkpoint {reported}, relaunch recovered {recovered}", recovered
    return None, recovered


def _first_job(t: Trial, workdir: Path, program: Path, proc: subprocess.Popen[str]) -> tuple[
        int | None, str, str]:
    """Wait for the first commit (a ``start`` trial: for the victim's process), sleep the trial's delay,
    kill its victims and wait (bounded) for the job: ``(rc, stdout, last line of stderr)``, rc None for a
    hang; both streams kept in ``workdir``."""
    if t.kind == "start":
        wait_until(lambda: proc.poll() is not None or t.rank in rank_pids(program.name), 240)
    else:
        wait_until(lambda: proc.poll() is not None or committed(workdir / "run" / "meta"), 240)
    time.sleep(t.delay)
    _kill_victims(t, workdir, program)
    rc, out, err = _finish(proc, 30 + 15 + 60 + 60, program.name)
    (workdir / "first.out").write_text(out)
    (workdir / "first.err").write_text(err)
    return rc, out, last_line(err)


def _plain_trial(t: Trial, workdir: Path, program: Path, expected: str) -> Outcome:
    """A plain job loses a rank or a node: it ends non-zero naming the checkpoint the relaunch recovers.

    Length: one trial's script (start, kill, wait, leftovers, relaunch, judge), read top to bottom.
    """
    start = time.monotonic()
    proc = launch(workdir, program, "--pause", "0.02", t=t)
    try:
        rc, out, last = _first_job(t, workdir, program, proc)
        seconds = time.monotonic() - start
        if rc is None:
            return Outcome("hang", last, None, None, None, seconds)
        if not wait_until(lambda: not marked_pids(program.name), 60):
            return Outcome("orphan", str(marked_pids(program.name)), rc, None, None, seconds)
        digest = re.search(r"^digest ([0-9a-f]{16})$", out, re.M)
        if rc == 0:
            ok = digest is not None and digest.group(1) == expected
            return Outcome("late" if ok else "wrong", "finished before the kill" if ok else last, rc, None,
                           None, seconds)
        silent = silent_ranks(last, _victims(t))
        if digest is not None and digest.group(1) == expected and last.startswith("ftkit launch: the job "
                                                                                  "failed"):
            # The application finished (right result); a rank was ended after it (a hung head, killed).
            return Outcome("ended", f"finished, then: {last[:1000]}", rc, None, None, seconds, silent)
        m = re.search(r"recovers from checkpoint (\d+)", last)
        none = "no checkpoint is committed" in last or (
            t.kind == "start" and "before MPI_Init had completed" in last)
        if not last.startswith("ftkit launch: the job failed") or not (m or none):
            return Outcome("wrong", f"last line: {last[:300]}", rc, None, None, seconds)
        reported = int(m.group(1)) if m else None
        lost_node = t.victim == "node" and t.config != "l1"
        if lost_node and "else from checkpoint" in last:
            reported = int(last.split("else from checkpoint ")[1].split()[0])
        elif lost_node and "else it starts from the beginning" in last:
            reported = None
        problem, recovered = _relaunch(t, workdir, program, expected, reported)
        if problem is not None:
            return Outcome("wrong", f"{problem}: {last[:1000]}", rc, reported, recovered, seconds)
        return Outcome("ended", last[:1000], rc, reported, recovered, seconds, silent)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        kill_left(program.name)


def _spare_trial(t: Trial, workdir: Path, program: Path, expected: str) -> Outcome:
    """Spares configured (``ckpt.steps()``), an application rank or node killed or stopped: the online
    recovery completes and the job ends with the failure-free digest (``recovered``), or the job ends
    non-zero within the bound and a relaunch ends with that digest (``ended``)."""
    start = time.monotonic()
    proc = launch(workdir, program, "--pause", "0.02", t=t)
    try:
        rc, out, last = _first_job(t, workdir, program, proc)
        seconds = time.monotonic() - start
        if rc is None:
            return Outcome("hang", last, None, None, None, seconds)
        if not wait_until(lambda: not marked_pids(program.name), 60):
            return Outcome("orphan", str(marked_pids(program.name)), rc, None, None, seconds)
        digest = re.search(r"^digest ([0-9a-f]{16})$", out, re.M)
        right = digest is not None and digest.group(1) == expected
        if rc == 0:
            replaced = re.search(r"online recovery: ranks \[([\d, ]+)\] replaced", out)
            if not right:
                return Outcome("wrong", f"rc 0, digest {digest and digest.group(1)}: {last[:300]}", rc, None,
                               None, seconds)
            return Outcome("recovered" if replaced else "late", replaced.group(0) if replaced else
                           "finished before the kill", rc, None, None, seconds)
        m = re.search(r"recovers from checkpoint (\d+)", last)
        reported = int(m.group(1)) if m else None
        if t.victim == "node" and t.config != "l1" and "else from checkpoint" in last:
            reported = int(last.split("else from checkpoint ")[1].split()[0])
        newest = newest_committed(workdir / "run" / "meta")
        problem, recovered = _relaunch(t, workdir, program, expected, reported if m else newest)
        if problem is not None:
            return Outcome("wrong", f"{problem}: {last[:1000]}", rc, reported, recovered, seconds)
        return Outcome("ended", last[:1000], rc, reported, recovered, seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        kill_left(program.name)


#: How ``ftkit launch`` (or ``timeout``) exits after each launcher signal.
LAUNCHER_CODES = {"TERM": 128 + signal.SIGTERM, "INT": 128 + signal.SIGINT, "HUP": 128 + signal.SIGHUP,
                  "KILL": -signal.SIGKILL, "timeout": 124}
#: ``ftkit launch --grace`` in launcher trials, and the few seconds more the job may take to be gone.
GRACE, GONE_AFTER_GRACE = 5.0, 30.0


def _launcher_trial(t: Trial, workdir: Path, program: Path, expected: str) -> Outcome:
    """A signal to ``ftkit launch`` at a random moment (``timeout -s TERM``, SIGTERM, SIGINT, SIGHUP,
    ``kill -9``): every process of the job is gone within ``GRACE + GONE_AFTER_GRACE`` s of it, the exit
    code is the signal's, and a relaunch recovers the newest committed checkpoint bit for bit (``ended``).

    Length: one trial's script (start, signal, wait, leftovers, relaunch, judge), read top to bottom.
    """
    start = time.monotonic()
    prefix = ("timeout", "-s", "TERM", str(t.delay)) if t.sig == "timeout" else ()
    proc = launch(workdir, program, "--pause", "0.02", t=t, prefix=prefix, grace=GRACE)
    try:
        if t.sig == "timeout":
            sent = start + t.delay
        else:
            wait_until(lambda: proc.poll() is not None or committed(workdir / "run" / "meta"), 240)
            time.sleep(t.delay)
            sent = time.monotonic()
            if proc.poll() is None:
                os.kill(proc.pid, getattr(signal, f"SIG{t.sig}"))
        rc, out, err = _finish(proc, GRACE + 60 + (t.delay if t.sig == "timeout" else 0), program.name)
        (workdir / "first.out").write_text(out)
        (workdir / "first.err").write_text(err)
        last = last_line(err)
        if rc is None:
            return Outcome("hang", last, None, None, None, time.monotonic() - start)
        gone = wait_until(lambda: not marked_pids(program.name), max(1.0, sent + GRACE + GONE_AFTER_GRACE
                                                                     - time.monotonic()))
        seconds = time.monotonic() - sent  # from the signal to the last process gone
        if not gone:
            return Outcome("orphan", str(marked_pids(program.name)), rc, None, None, seconds)
        digest = re.search(r"^digest ([0-9a-f]{16})$", out, re.M)
        if rc == 0:
            ok = digest is not None and digest.group(1) == expected
            return Outcome("late" if ok else "wrong", "finished before the signal" if ok else last, rc, None,
                           None, seconds)
        if rc != LAUNCHER_CODES[t.sig]:
            return Outcome("wrong", f"exit code {rc}, expected {LAUNCHER_CODES[t.sig]}: {last[:300]}", rc,
                           None, None, seconds)
        newest = newest_committed(workdir / "run" / "meta")
        problem, recovered = _relaunch(t, workdir, program, expected, newest)
        if problem is not None:
            return Outcome("wrong", f"{problem}: {last[:1000]}", rc, newest, recovered, seconds)
        return Outcome("ended", f"rc {rc}, gone {seconds:.1f} s after the signal; {last[:300]}", rc, newest,
                       recovered, seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        kill_left(program.name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="append one JSON line per trial here")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--kinds", default="plain",
                   help="trial kinds, comma-separated: plain, start, spare, launcher (plain alone: the draws "
                        "of the earlier campaigns)")
    p.add_argument("--nprocs", type=int, default=8)
    p.add_argument("--node-size", type=int, default=2)
    p.add_argument("--only", type=int, action="append", default=None,
                   help="run only trial I of the seed (repeatable); the others are drawn, not run")
    p.add_argument("--keep", default=None, help="keep each trial's directory and output in KEEP/<i>")
    p.add_argument("--keep-failed", default=os.path.join(tempfile.gettempdir(), "ftkit-campaign-failed"),
                   help="where a hung, orphaned or wrong trial's output, configuration and metadata go "
                        "(without the checkpoint data) when --keep is not given (default: %(default)s)")
    p.add_argument("--short-detector-relaunch", action="store_true",
                   help="relaunch with the first job's 15 s detector timeout (as before seed 3)")
    args = p.parse_args(argv)
    global SHORT_DETECTOR_RELAUNCH
    SHORT_DETECTOR_RELAUNCH = args.short_detector_relaunch
    rng = random.Random(args.seed)
    expected = reference_digest()
    counts: dict[str, Counter[str]] = {}
    silent = 0  # trials in which a rank other than the victims ended with no reason given
    with tempfile.TemporaryDirectory(prefix="ftkit-plain-kill-") as tmp:
        for i in range(args.trials):
            t = draw(rng, tuple(args.configs.split(",")), args.nprocs, args.node_size,
                     tuple(args.kinds.split(",")))
            if args.only is not None and i not in args.only:
                continue
            workdir = Path(args.keep) / str(i) if args.keep else Path(tmp) / "trial"
            o = run_trial(t, workdir, expected)
            if o.outcome in ("hang", "orphan", "wrong") and not args.keep:
                kept = Path(args.keep_failed) / f"seed{args.seed}-trial{i}"
                shutil.rmtree(kept, ignore_errors=True)
                shutil.copytree(workdir, kept, ignore=shutil.ignore_patterns("local", "global"),
                                dirs_exist_ok=True)
                print(f"     (its output, configuration and metadata are kept in {kept})", flush=True)
            counts.setdefault(f"{t.kind} {t.config} head={t.head} thread={t.thread}",
                              Counter())[o.outcome] += 1
            silent += bool(o.silent)
            print(f"{i:4d} {t.kind} {t.config} head={t.head} thread={t.thread} {t.sig} {t.victim} {t.rank} "
                  f"+{t.delay:.2f}s: {o.outcome} ({o.seconds:.0f} s)"
                  f"{f' SILENT {o.silent}' if o.silent else ''} {o.detail[:160]}", flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps({"trial": asdict(t), "outcome": asdict(o)}) + "\n")
    total: Counter[str] = Counter()
    print(f"{'configuration':41s} " + " ".join(f"{o:>9s}" for o in OUTCOMES))
    for key in sorted(counts):
        total.update(counts[key])
        print(f"{key:41s} " + " ".join(f"{counts[key][o]:9d}" for o in OUTCOMES))
    print(f"{'total':41s} " + " ".join(f"{total[o]:9d}" for o in OUTCOMES))
    print(f"trials with a rank ended without a reason: {silent}")
    print(json.dumps({"trials": sum(total.values()), "seed": args.seed, "kinds": args.kinds,
                      **{o: total[o] for o in OUTCOMES}, "silent": silent}))
    return 0 if total["hang"] + total["orphan"] + total["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
