"""``ftkit launch --restarts N``: the relaunch loop on emulated nodes of this host, host probes, bad input.

Host exclusion across real hosts (power off, spare hosts, srun, MPICH) is checked on the virtual cluster
(tests/cluster/test_relaunch_cluster.py, in the cluster matrix).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftkit.errors import LaunchError
from ftkit.launch import build_launch_command, host_arguments
from ftkit.relaunch import RelaunchPlan, flush_on_hosts, probe_hosts, recovery_line

from .checkpoint._util import HEAT, digest_of, run_heat, write_config

TIMEOUT = 240


def _ftkit_launch(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                  timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftkit", "launch", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)


@pytest.mark.parametrize("args, message", [
    (["--restarts", "-1"], "--restarts and --spare-nodes must be >= 0"),
    (["--restarts", "1", "--spare-nodes", "-2"], "must be >= 0"),
    (["--restarts", "2"], "--restarts needs --config FILE"),
    (["--restarts", "1", "--config", "ftkit.ini", "--spare-nodes", "1"], "--spare-nodes needs a host list"),
    (["--hosts", "a,b", "-n", "3"], "do not spread evenly over the 2 host"),
    (["--hosts", "a,a"], "repeated"),
    (["--hosts", "a,b,c", "--restarts", "1", "--config", "ftkit.ini", "--spare-nodes", "2"],
     "leave 1 for the run, but it needs at least 2"),
    (["--end-time", "2026-12-05T18:00:00"], "has no time zone"),
    (["--end-time", "tomorrow"], "is not a time"),
    (["--restarts", "1", "--config", "ftkit.ini", "--recovery-time", "0"],
     "--recovery-time must be a positive"),
    (["--restarts", "1", "--config", "missing.ini"], "cannot read config file"),
])
def test_bad_input_is_refused_with_exit_2_before_anything_runs(tmp_path, args, message):
    write_config(tmp_path, ckpt_l2=10, group_size=2)
    marker = tmp_path / "ran"
    n = [] if "-n" in args else ["-n", "4"]
    proc = _ftkit_launch(*n, *args, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert proc.returncode == 2, proc
    assert message in proc.stderr, proc.stderr
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_each_launcher_gets_its_host_list():
    assert host_arguments("openmpi", ["a", "b"], 4) == ["--host", "a:2,b:2"]
    assert host_arguments("mpich", ["a", "b", "c"], 3) == ["-hosts", "a,b,c", "-ppn", "1"]
    assert host_arguments("srun", ["b", "c"], 4, exclude=["a"]) == [
        "-N", "2", "--nodelist=b,c", "--exclude=a", "--overlap"]
    with pytest.raises(LaunchError, match="also excluded"):
        host_arguments("srun", ["a", "b"], 2, exclude=["a"])
    with pytest.raises(LaunchError, match="no host left"):
        host_arguments("openmpi", [], 2)
    name, cmd = build_launch_command(4, ["/py"], launcher="openmpi", hosts=["n1", "n2"])
    assert cmd[1:3] == ["--host", "n1:2,n2:2"] and cmd[-1] == "/py"
    with pytest.raises(LaunchError, match="--spares with a host list"):
        build_launch_command(4, ["/py"], launcher="openmpi", hosts=["n1", "n2"], spares=1)


def test_dry_run_shows_the_first_run_without_the_spare_hosts(tmp_path):
    write_config(tmp_path, ckpt_l1=10)
    proc = _ftkit_launch("-n", "4", "--hosts", "n1,n2,n3", "--spare-nodes", "1", "--restarts", "2",
                         "--config", "ftkit.ini", "--dry-run", "--", "/bin/true", cwd=tmp_path)
    assert proc.returncode == 0, proc
    assert "--host n1:2,n2:2 " in proc.stdout and "n3" not in proc.stdout


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A stand-in ssh agent (``agent HOST COMMAND``) for three kinds of host: ``ok*`` runs COMMAND here,
    ``dead*`` does not answer (exit 255, as ssh), ``hung*`` never answers."""
    path = tmp_path / "agent"
    path.write_text('#!/bin/sh\nhost=$1; shift\ncase $host in\n'
                    '  dead*) echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255 ;;\n'
                    '  hung*) exec sleep 600 ;;\nesac\nexec /bin/sh -c "$*"\n')
    path.chmod(0o755)
    monkeypatch.setenv("PRTE_MCA_plm_ssh_agent", str(path))
    return path


def test_probe_finds_hosts_that_do_not_answer_and_broken_local_directories(tmp_path, agent):
    local = tmp_path / "local"
    gone = probe_hosts("openmpi", ["ok1", "dead1", "hung1", "ok2"], local, timeout=5)
    assert sorted(gone) == ["dead1", "hung1"], gone
    assert "No route to host" in gone["dead1"] and "no answer in 5 s" in gone["hung1"]
    assert local.is_dir() and list(local.iterdir()) == []  # the probe file is removed again
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    gone = probe_hosts("openmpi", ["ok1"], blocked / "local", timeout=30)
    assert list(gone) == ["ok1"] and "failed its write/read check" in gone["ok1"], gone


def test_plan_needs_as_many_hosts_as_a_group(tmp_path, monkeypatch):
    from ftkit.config import Config

    monkeypatch.chdir(tmp_path)  # relative directories are the program's: relative to where it runs

    cfg = Config.from_file(write_config(tmp_path, ckpt_l2=10, group_size=3))
    plan = RelaunchPlan.build(1, "openmpi", ["a", "b", "c", "d"], 1, cfg, None, None)
    assert plan.min_hosts == 3 and plan.meta_dir == (tmp_path / "run" / "meta").resolve()
    with pytest.raises(LaunchError, match="needs at least 3"):
        RelaunchPlan.build(1, "openmpi", ["a", "b", "c"], 1, cfg, None, None)
    assert RelaunchPlan.build(1, "openmpi", ["a"], 0, Config.from_file(write_config(tmp_path, ckpt_l1=10)),
                              None, None).min_hosts == 1


HEAT_ARGS = ("--steps", "40", "--size", "48", "--config", "ftkit.ini")


def test_a_failed_run_is_relaunched_and_completes_bit_for_bit(tmp_path):
    """Rank 1 is SIGKILLed at step 25 of the first run; the relaunch recovers checkpoint 20 (L2) and the
    command ends 0 with the failure-free run's digest; the one relaunch line names the checkpoint."""
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    for d in (ref_dir, run_dir):
        write_config(d, ckpt_l2=10, group_size=2)
    ref = run_heat(ref_dir, 4, *HEAT_ARGS[:-2]).check()
    proc = _ftkit_launch("-n", "4", "--node-size", "2", "--restarts", "3", "--config", "ftkit.ini", "--",
                         "python", str(HEAT), *HEAT_ARGS, "--kill-at", "25", "--kill-rank", "1", cwd=run_dir)
    assert proc.returncode == 0, proc
    assert digest_of(proc.stdout) == digest_of(ref.stdout) is not None, proc
    relaunches = [ln for ln in proc.stderr.splitlines() if "ftkit launch: relaunch" in ln]
    assert len(relaunches) == 1, proc.stderr
    assert "relaunch 1/3 after exit code" in relaunches[0] and "on the same placement" in relaunches[0]
    assert "recovering checkpoint 2 (L1,L2," in relaunches[0], relaunches
    assert "recovered checkpoint 2 from level 1 at step 20" in proc.stdout, proc  # the one the line named
    assert "completed after 1 relaunch(es)" in proc.stderr


def test_the_exit_code_is_the_applications_once_the_relaunches_are_used_up(tmp_path):
    write_config(tmp_path, ckpt_l1=10)
    counter = tmp_path / "runs"
    code = (f"import os; from mpi4py import MPI\n"
            f"if MPI.COMM_WORLD.rank == 0: open({str(counter)!r}, 'a').write('x')\n"
            "MPI.COMM_WORLD.Barrier(); os._exit(3)")
    proc = _ftkit_launch("-n", "2", "--restarts", "1", "--config", "ftkit.ini", "--", "python", "-c", code,
                         cwd=tmp_path)
    assert proc.returncode == 3, proc
    assert counter.read_text() == "xx"
    assert "no relaunch left (--restarts 1 used)" in proc.stderr, proc.stderr
    assert "no committed checkpoint" in proc.stderr  # the relaunch line says it starts from the beginning


def test_no_relaunch_without_time_to_recover_before_the_end(tmp_path):
    write_config(tmp_path, ckpt_l1=10)
    counter = tmp_path / "runs"
    code = (f"import os; from mpi4py import MPI\n"
            f"if MPI.COMM_WORLD.rank == 0: open({str(counter)!r}, 'a').write('x')\n"
            f"assert os.environ['FTKIT_END_TIME'] == os.environ['WANT']; os._exit(5)")
    end = time.time() + 3600
    proc = _ftkit_launch("-n", "2", "--restarts", "3", "--config", "ftkit.ini", "--end-time", str(end),
                         "--recovery-time", "7200", "--", "python", "-c", code, cwd=tmp_path,
                         env={**os.environ, "WANT": f"{end:.3f}"})
    assert proc.returncode == 5, proc
    assert counter.read_text() == "x"
    assert "less than the 7200 s a run needs to recover and checkpoint: not relaunched" in proc.stderr, proc


def test_flush_before_a_smaller_relaunch_puts_the_newest_checkpoint_at_l4(tmp_path, agent):
    """The loop's flush, through the (stand-in) agent, as before a relaunch on fewer hosts."""
    write_config(tmp_path, ckpt_l2=10, group_size=2)
    failed = run_heat(tmp_path, 4, *HEAT_ARGS[:-2], "--kill-at", "25", "--kill-rank", "1")
    assert failed.returncode != 0, failed
    meta = tmp_path / "run" / "meta"
    assert "recovering checkpoint 2 (L1,L2," in recovery_line(meta)
    assert flush_on_hosts("openmpi", ["ok1"], meta, timeout=120) == "flushed to L4 first"
    assert "recovering checkpoint 2 (L1,L2,L4," in recovery_line(meta)
    failed_flush = flush_on_hosts("openmpi", ["dead1"], meta)
    assert "flush to L4 incomplete (dead1: ssh: connect to host dead1" in failed_flush


def test_the_lock_of_a_gone_host_is_released_and_no_other(tmp_path):
    from ftkit.relaunch import _release_lock_of_gone_host

    lock = tmp_path / "ftkit.lock"
    lock.write_text('{"host": "node2", "pid": 12, "started": 1.0, "token": "x"}')
    _release_lock_of_gone_host(tmp_path, {"node3": "no answer"})
    assert lock.exists()
    _release_lock_of_gone_host(tmp_path, {"node2": "no answer"})
    assert not lock.exists()


def test_hosts_are_dropped_as_they_die_until_too_few_are_left_for_the_groups(tmp_path, monkeypatch):
    """The whole ``ftkit launch`` path with MPICH's ``-hosts``, Hydra and ssh stood in by scripts (real
    processes; the MPI runs themselves are on the virtual cluster): run 1 on h1,h2,h3 fails and h3 is found
    gone; run 2 on h1,h2 fails and h2 is gone too: one host is fewer than group_size 2, so no third run,
    exit code the application's (3)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runs = tmp_path / "runs"
    (bin_dir / "mpiexec.mpich").write_text(
        f'#!/bin/sh\necho "$*" >> {runs}\nn=$(wc -l < {runs})\n'
        f'[ "$n" = 1 ] && touch {tmp_path}/dead.h3\n[ "$n" = 2 ] && touch {tmp_path}/dead.h2\nexit 3\n')
    agent = bin_dir / "agent"
    agent.write_text(f'#!/bin/sh\n[ -e {tmp_path}/dead.$1 ] && '
                     '{ echo "ssh: $1: No route to host" >&2; exit 255; }\nshift; exec /bin/sh -c "$*"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    write_config(tmp_path, ckpt_l2=10, group_size=2)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HYDRA_LAUNCHER_EXEC": str(agent)}
    proc = _ftkit_launch("--launcher", "mpich", "--hosts", "h1,h2,h3", "-n", "6", "--restarts", "5",
                         "--config", "ftkit.ini", "--", "/bin/true", cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc
    placed = runs.read_text().splitlines()
    assert len(placed) == 2, placed
    assert "-hosts h1,h2,h3 -ppn 2 -n 6" in placed[0] and "-hosts h1,h2 -ppn 2 -n 4" in placed[1], placed
    relaunch = [ln for ln in proc.stderr.splitlines() if "relaunch 1/5" in ln]
    assert len(relaunch) == 1, proc.stderr
    assert "on 2 host(s) h1,h2; excluded: h3 (no answer (ssh: h3: No route" in relaunch[0]
    assert "flush to L4 incomplete" in relaunch[0]  # no run to flush: a smaller relaunch flushes first
    assert "only 1 healthy host(s) are left (h1; gone: h2 (" in proc.stderr, proc.stderr
    assert "fewer than the 2 its groups need (group_size): not relaunched" in proc.stderr


def test_end_time_exported_to_the_ranks_stops_the_run_with_a_final_checkpoint_and_no_relaunch(tmp_path):
    """``--end-time`` 30 s ahead (inside the default 60 s exit margin): every rank's should_exit() turns true,
    an L4 checkpoint is taken, the job ends 0 and is not relaunched; the next job continues bit for bit."""
    from ftkit.storage.manifest import read_manifest

    from .checkpoint.test_should_exit import APP, SIZE, STEPS, _ends, _reference

    write_config(tmp_path, ckpt_l1=50)
    app = ["--", "python", str(APP), "--steps", str(STEPS), "--size", str(SIZE)]
    end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30))  # ISO 8601 with a zone
    first = _ftkit_launch("-n", "2", "--end-time", end, "--restarts", "2", "--config", "ftkit.ini", *app,
                          cwd=tmp_path)
    assert first.returncode == 0, first
    ((done, flag),) = _ends(first.stdout, 2)
    assert flag == "exit=1" and done < STEPS, first.stdout
    assert "the allocation ends in" in first.stderr, first.stderr  # no other source of an end here
    assert "relaunch" not in first.stderr
    manifest = read_manifest(tmp_path / "run" / "meta")
    assert manifest is not None and manifest.newest_first()[0].level == 4
    second = _ftkit_launch("-n", "2", *app, cwd=tmp_path)
    assert second.returncode == 0, second
    assert f"digest {_reference()}" in second.stdout, second.stdout


def test_docs_cli_lists_every_launch_option_with_its_metavar():
    # docs/cli.md has one line per `ftkit launch` option, as `ftkit launch --help` prints it
    from ftkit.cli import build_parser

    parser = build_parser("launch")
    launch = parser._subparsers._group_actions[0].choices["launch"]  # noqa: SLF001
    doc = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    section = doc[doc.index("## `ftkit launch`"):]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    for action in launch._actions:  # noqa: SLF001
        if not action.option_strings or action.dest == "help":
            continue
        name = max(action.option_strings, key=len)
        row = next((r for r in rows if f"`{name}" in r.split("|")[1]), None)
        assert row is not None, f"docs/cli.md has no line for ftkit launch {name}"
        if action.metavar:
            assert f"{name} {action.metavar}" in row, row
        assert action.help, f"ftkit launch {name} has no help text"


def test_a_spare_host_in_a_gone_hosts_place_moves_nobody_so_no_flush():
    # The relaunch flushes to L4 only when a rank may land away from its node-local files (benchmark: the
    # flush took 0.5 s of a spare-host relaunch that needed none: L2 rebuilds the lost host's files).
    from ftkit.relaunch import _moved

    gone = {"node2": "no answer"}
    assert not _moved(["node1", "node2", "node3"], ["node1", "node5", "node3"], gone)  # spare in place
    assert _moved(["node1", "node2", "node3"], ["node1", "node3"], gone)                # fewer hosts
    assert _moved(["node1", "node2", "node3"], ["node3", "node5", "node1"], gone)       # a live host moved
