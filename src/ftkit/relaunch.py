"""``ftkit launch --restarts N``: relaunch a run that did not complete, on the hosts that are still healthy.

SCR's ``scr_srun`` loop inside one allocation. :func:`run_with_restarts` runs the job; when it ends without
completing (a non-zero exit code: the application's own), it

1. probes every host of the run and every held-back spare host (:func:`probe_hosts`, all at once, each
   bounded by :data:`PROBE_TIMEOUT_S`): a host is gone when it does not answer (the launcher's ssh agent:
   ``$PRTE_MCA_plm_ssh_agent`` for Open MPI, ``$HYDRA_LAUNCHER_EXEC`` for MPICH, else ``ssh``; under SLURM a
   one-task ``srun --overlap`` step on it), or when its node-local directory (``ckpt_dir``) fails a write,
   read and remove check (disk full, file system gone);
2. excludes the gone hosts and puts a held-back spare host in each one's place (``--spare-nodes K`` kept the
   last K hosts of the list out of the first run), so every other rank stays on the host holding its
   node-local files and L2/L3 rebuild the lost host's; without a spare the relaunch runs on fewer hosts, with
   the same number of ranks per host (an elastic restart: the checkpoint is read onto the new rank count).
   Ranks then land on other hosts than their files, so ``ftkit flush`` runs first on every remaining host
   (:func:`flush_on_hosts`: the newest checkpoint to L4, which every host reads). A run lock whose owner's
   host is gone is removed (it would look live for two minutes and refuse the relaunch);
3. stops, with one line saying why, when no relaunch is left, when fewer hosts are left than the
   configuration's groups need (``group_size`` nodes when L2 or L3 is on), or when the time left before the
   job's end (``--end-time``, ``[ftkit] end_time``, SLURM) is shorter than a run needs to recover and take a
   checkpoint (``--recovery-time``, else measured: from the last run's start to its first committed
   checkpoint, at least :data:`MIN_RECOVERY_S`);
4. otherwise prints one line (hosts excluded and why, the hosts it runs on, the checkpoint the manifest
   offers for recovery) and relaunches.

A run that ends with exit code 0 completed (or stopped cleanly for a walltime or halt request): no relaunch.
A run ended by the ``--timeout`` or by a signal to ``ftkit launch`` is not relaunched either (the scheduler is
ending the job). The exit code is the last run's. Without a host list (one host, emulated nodes) the job is
relaunched on the same placement and nothing is probed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .config import Config
from .errors import LaunchError
from .launch import MPIResult
from .walltime import job_end_time

__all__ = ["RelaunchPlan", "allocation_hosts", "probe_hosts", "flush_on_hosts", "run_with_restarts",
           "recovery_line", "MIN_RECOVERY_S", "PROBE_TIMEOUT_S", "FLUSH_TIMEOUT_S"]

#: Seconds a relaunch is assumed to need at least to recover and take its first checkpoint.
MIN_RECOVERY_S = 30.0
#: Seconds a host has to answer a probe.
PROBE_TIMEOUT_S = 15.0
#: Seconds the hosts have to flush the newest checkpoint to L4 before a relaunch on fewer hosts.
FLUSH_TIMEOUT_S = 900.0
_ALIVE = "ftkit-probe-alive"
_DISK_OK = "ftkit-probe-disk-ok"

#: Runs the job once on ``hosts`` (None: the launcher's placement) with ``exclude`` left out.
RunOnce = Callable[["list[str] | None", "list[str]"], MPIResult]


@dataclass
class RelaunchPlan:
    """What the relaunch loop works with.

    ``hosts``: every host the job may use, in order (None: no host list, relaunch in place); the last
    ``spare_nodes`` of them are held back as spares. ``min_hosts``: the fewest hosts a run can go on with.
    ``local_dir``: the node-local directory each host's probe checks. ``end_time`` (seconds since the epoch)
    and ``recovery_time`` (seconds, None: measured) decide whether a relaunch still has time.
    """

    restarts: int
    launcher: str
    hosts: list[str] | None = None
    spare_nodes: int = 0
    min_hosts: int = 1
    meta_dir: Path | None = None
    local_dir: Path | None = None
    end_time: float | None = None
    recovery_time: float | None = None
    excluded: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, restarts: int, launcher: str, hosts: list[str] | None, spare_nodes: int,
              config: Config | None, end_time: float | None, recovery_time: float | None) -> RelaunchPlan:
        """Check the options and make the plan. The job's end is the configuration's ``end_time`` if set (as
        the ranks read it), else ``end_time`` (``--end-time``), else ``$FTKIT_END_TIME`` or SLURM's.

        Raises
        ------
        LaunchError
            On a negative count, spare nodes without a host list or leaving no host for the first run, or a
            first run with fewer hosts than the configuration's groups need.
        """
        if restarts < 0:
            raise LaunchError(f"--restarts must be >= 0 (how many times to relaunch), got {restarts}")
        if spare_nodes < 0:
            raise LaunchError(f"--spare-nodes must be >= 0, got {spare_nodes}")
        if recovery_time is not None and not recovery_time > 0:
            raise LaunchError(f"--recovery-time must be a positive number of seconds, got {recovery_time}")
        if spare_nodes and hosts is None:
            raise LaunchError("--spare-nodes needs a host list: --hosts h1,h2,... or a SLURM allocation")
        min_hosts = 1
        if config is not None and (config.ckpt_l2 or config.ckpt_l3) and config.group_size >= 2:
            min_hosts = config.group_size
        if hosts is not None and len(hosts) - spare_nodes < max(1, min_hosts):
            raise LaunchError(f"{len(hosts)} host(s) with --spare-nodes {spare_nodes} leave "
                              f"{len(hosts) - spare_nodes} for the run, but it needs at least "
                              f"{max(1, min_hosts)} (group_size {min_hosts} with L2/L3 on): hold back fewer")
        if config is not None and str(config.end_time).strip():  # the ranks read it before FTKIT_END_TIME
            end_time = job_end_time(config.end_time)[0]
        elif end_time is None:
            end_time = job_end_time("")[0]  # $FTKIT_END_TIME, else SLURM's end
        return cls(restarts, launcher, hosts, spare_nodes, min_hosts,
                   Path(config.meta_dir).resolve() if config is not None else None,
                   Path(config.ckpt_dir).resolve() if config is not None else None, end_time, recovery_time)


def allocation_hosts(given: str | None) -> list[str] | None:
    """The host list: ``--hosts`` (``h1,h2`` or ``h1:2,h2:2``, slots ignored), else the SLURM allocation's
    (``scontrol show hostnames $SLURM_JOB_NODELIST``), else None.

    Raises
    ------
    LaunchError
        If ``given`` names no host, or SLURM's node list cannot be expanded.
    """
    if given is not None:
        hosts = [h.split(":")[0].strip() for h in given.split(",") if h.strip()]
        if not hosts:
            raise LaunchError(f"--hosts {given!r} names no host: give h1,h2,...")
        return hosts
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "").strip()
    if not nodelist:
        return None
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"cannot expand SLURM_JOB_NODELIST={nodelist!r} ({exc}): give --hosts") from exc
    hosts = out.stdout.split()
    if out.returncode != 0 or not hosts:
        raise LaunchError(f"scontrol show hostnames {nodelist!r} failed ({out.stderr.strip()}): give --hosts")
    return hosts


def _on_host(launcher: str, host: str, script: str) -> list[str]:
    """The command line that runs the shell ``script`` on ``host``: a one-task ``srun --overlap`` step inside
    the allocation, else the launcher's ssh agent (``$PRTE_MCA_plm_ssh_agent`` for Open MPI,
    ``$HYDRA_LAUNCHER_EXEC`` for MPICH, else ``ssh``)."""
    if launcher == "srun":
        return ["srun", "--overlap", "-N1", "-n1", f"--nodelist={host}", "-K", "/bin/sh", "-c", script]
    agent = (os.environ.get("PRTE_MCA_plm_ssh_agent") if launcher == "openmpi" else
             os.environ.get("HYDRA_LAUNCHER_EXEC")) or "ssh"
    return [*agent.split(), host, f"/bin/sh -c {_quote(script)}"]


def _probe_script(local_dir: Path | None) -> str:
    check = f"echo {_ALIVE}"
    if local_dir is not None:
        check += (f"; d={_quote(str(local_dir))}; f=\"$d/.ftkit-probe.$$\"; mkdir -p \"$d\" && "
                  f"echo ok > \"$f\" && read x < \"$f\" && [ \"$x\" = ok ] && rm -f \"$f\" && "
                  f"echo {_DISK_OK}")
    return check


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def probe_hosts(launcher: str, hosts: Sequence[str], local_dir: Path | None,
                timeout: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """Probe ``hosts`` at once; return ``{host: why it is gone}`` for each one that failed.

    Every probe is a real command on the host (see the module docstring); one that has not answered after
    ``timeout`` seconds is killed and its host counted as gone.
    """
    gone: dict[str, str] = {}
    for h, (rc, out, err) in _run_on_hosts(launcher, hosts, _probe_script(local_dir), timeout).items():
        last = (err.strip().splitlines() or [""])[-1][:160]
        if rc is None:
            gone[h] = f"no answer in {timeout:g} s"
        elif _ALIVE not in out:
            gone[h] = f"no answer ({last or f'exit code {rc}'})"
        elif local_dir is not None and _DISK_OK not in out:
            gone[h] = f"node-local directory {local_dir} failed its write/read check ({last or 'no reason'})"
    return gone


def _run_on_hosts(launcher: str, hosts: Sequence[str], script: str,
                  timeout: float) -> dict[str, tuple[int | None, str, str]]:
    """Run ``script`` on every host at once; ``{host: (exit code or None if killed at the timeout, out,
    err)}``."""
    procs = {h: subprocess.Popen(_on_host(launcher, h, script), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True) for h in hosts}
    deadline = time.monotonic() + timeout
    done: dict[str, tuple[int | None, str, str]] = {}
    for h, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            done[h] = (proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                pass
            out, err = proc.communicate()
            done[h] = (None, out, err)
    return done


def flush_on_hosts(launcher: str, hosts: Sequence[str], meta_dir: Path,
                   timeout: float = FLUSH_TIMEOUT_S) -> str:
    """Run ``ftkit flush META_DIR`` on every host at once (each copies to L4 what its node-local directory
    holds; the last one commits level 4, see :mod:`ftkit.storage.repair.flush`); return what came of it, for a
    line.

    A relaunch on fewer hosts needs it: ranks then land on other hosts than the ones holding their
    node-local files, so only L4 (the global directory) serves every rank.
    """
    argv = [sys.executable, "-m", "ftkit", "flush", str(meta_dir)]
    # Twice at most: hosts that end their copies at the same moment may each find the others' L4 files not
    # there yet and commit nothing; the second round finds every copy made (a flush is idempotent).
    for _ in range(2):
        results = _run_on_hosts(launcher, hosts, " ".join(_quote(a) for a in argv), timeout)
        if any(rc == 0 for rc, _, _ in results.values()):
            return "flushed to L4 first"
    why = [f"{h}: {((err + out).strip().splitlines() or [f'exit code {rc}'])[-1][:160]}"
           for h, (rc, out, err) in results.items()]
    return f"flush to L4 incomplete ({'; '.join(why)})"


def _read_manifest(meta_dir: Path):  # type: ignore[no-untyped-def]
    # Imported here: the storage package brings numpy, which a plain `ftkit launch` does not load.
    from .storage.manifest import read_manifest

    return read_manifest(meta_dir)


def recovery_line(meta_dir: Path | None) -> str:
    """Which checkpoint the manifest offers a relaunch (the newest with a complete level), for one line."""
    if meta_dir is None:
        return "it recovers the newest checkpoint its configuration finds"
    try:
        manifest = _read_manifest(meta_dir)
    except Exception as exc:  # a damaged manifest: the relaunch itself will say more
        return f"manifest in {meta_dir} unreadable ({exc})"
    entries = [e for e in (manifest.newest_first() if manifest else []) if e.complete_levels]
    if not entries:
        return f"no committed checkpoint in {meta_dir}: it starts from the beginning"
    e = entries[0]
    when = datetime.fromtimestamp(e.time, timezone.utc).strftime("%H:%M:%S UTC")
    levels = ",".join(f"L{lv}" for lv in e.complete_levels)
    return f"recovering checkpoint {e.id} ({levels}, committed {when}; an older one if its files are lost)"


def _needed_time(plan: RelaunchPlan, run_start: float) -> float:
    """Seconds a relaunch needs to recover and checkpoint: ``--recovery-time``, else the last run's time to
    its first committed checkpoint (at least :data:`MIN_RECOVERY_S`)."""
    if plan.recovery_time is not None:
        return plan.recovery_time
    measured = 0.0
    try:
        manifest = _read_manifest(plan.meta_dir) if plan.meta_dir is not None else None
    except Exception:
        manifest = None
    times = [e.time for e in (manifest.checkpoints if manifest else []) if e.time >= run_start]
    if times:
        measured = min(times) - run_start
    return max(MIN_RECOVERY_S, measured)


def _say(text: str) -> None:
    print(f"ftkit launch: {text}", file=sys.stderr, flush=True)


def _replace_gone(plan: RelaunchPlan, active: list[str], spares: list[str]) -> tuple[list[str], list[str]]:
    """Probe ``active`` and ``spares``; return the hosts of the next run and the spares still held back."""
    gone = probe_hosts(plan.launcher, active + spares, plan.local_dir)
    plan.excluded.update(gone)
    spares = [h for h in spares if h not in gone]
    nxt = []
    for h in active:
        if h not in gone:
            nxt.append(h)
        elif spares:
            nxt.append(spares.pop(0))
    return nxt, spares


def run_with_restarts(plan: RelaunchPlan, run_once: RunOnce) -> MPIResult:
    """Run the job, relaunching it as the module docstring says; return the last run's result."""
    hosts = list(plan.hosts) if plan.hosts is not None else None
    active = hosts[:len(hosts) - plan.spare_nodes] if hosts is not None else None
    spares = hosts[len(hosts) - plan.spare_nodes:] if hosts is not None and plan.spare_nodes else []
    attempt = 0
    while True:
        start = time.time()
        result = run_once(active, sorted(plan.excluded))
        if result.returncode == 0 or result.timed_out or result.ending_signal is not None:
            if result.returncode == 0 and attempt:
                _say(f"the run completed after {attempt} relaunch(es)")
            return result
        if attempt >= plan.restarts:
            if plan.restarts:
                _say(f"the run ended with exit code {result.returncode}; no relaunch left (--restarts "
                     f"{plan.restarts} used)")
            return result
        before, ended, spent = active, time.monotonic(), []
        if active is not None:
            active, spares = _replace_gone(plan, active, spares)
            spent.append(f"probes {time.monotonic() - ended:.2f} s")
            if len(active) < plan.min_hosts:
                _say(f"the run ended with exit code {result.returncode} and only {len(active)} healthy "
                     f"host(s) are left ({', '.join(active) or 'none'}; gone: {_gone_text(plan.excluded)}), "
                     f"fewer than the {plan.min_hosts} its groups need (group_size): not relaunched")
                return result
        if plan.end_time is not None:
            left, needed = plan.end_time - time.time(), _needed_time(plan, start)
            if left < needed:
                _say(f"the run ended with exit code {result.returncode}; {max(left, 0):.0f} s are left "
                     f"before the job's end, less than the {needed:.0f} s a run needs to recover and "
                     "checkpoint: not relaunched")
                return result
        attempt += 1
        where, flushed = "on the same placement", ""
        if active is not None and before is not None:
            where = (f"on {len(active)} host(s) {','.join(active)}; "
                     f"excluded: {_gone_text(plan.excluded) or 'none'}")
            _release_lock_of_gone_host(plan.meta_dir, plan.excluded)
            if _moved(before, active, plan.excluded) and plan.meta_dir is not None:
                t0 = time.monotonic()
                flushed = flush_on_hosts(plan.launcher, active, plan.meta_dir) + "; "
                spent.append(f"flush {time.monotonic() - t0:.2f} s")
        took = f" ({', '.join(spent)})" if spent else ""
        _say(f"relaunch {attempt}/{plan.restarts} after exit code {result.returncode}{took} {where}; "
             f"{flushed}{recovery_line(plan.meta_dir)}")


def _moved(before: list[str], after: list[str], gone: dict[str, str]) -> bool:
    """Whether a rank of the next run may land on another host than the one holding its node-local files:
    the host count changed, or a host that is not gone holds another position (a spare host taking a gone
    host's place moves nobody)."""
    return len(before) != len(after) or any(a != b and a not in gone
                                            for a, b in zip(before, after, strict=True))


def _release_lock_of_gone_host(meta_dir: Path | None, gone: dict[str, str]) -> None:
    """Remove the run lock when its owner's host is gone: the lock would look live for up to two minutes
    (its heartbeat is recent) and the relaunch would refuse to start (:mod:`ftkit.checkpoint.runlock`)."""
    import json

    from .storage.runactivity import LOCK_NAME

    if meta_dir is None:
        return
    path = meta_dir / LOCK_NAME
    try:
        owner = json.loads(path.read_bytes()[:4096].decode()).get("host", "")
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return
    if owner in gone:
        path.unlink(missing_ok=True)


def _gone_text(gone: dict[str, str]) -> str:
    return ", ".join(f"{h} ({why})" for h, why in sorted(gone.items()))

