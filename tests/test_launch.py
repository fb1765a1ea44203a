"""The launcher: command line, exit codes, hard timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftkit.errors import LaunchError
from ftkit.launch import build_mpirun_command

from .conftest import run_python

PROGRAMS = Path(__file__).parent / "programs"


def test_command_has_ulfm_detector_and_oversubscribe():
    cmd = build_mpirun_command(4, ["python", "x.py"], node_size=2, mpirun="mpirun")
    assert cmd[:3] == ["mpirun", "-n", "4"]
    assert "--oversubscribe" in cmd
    i = cmd.index("--with-ft")
    assert cmd[i + 1] == "ulfm"
    assert "mpi_ft_detector" in cmd
    assert "FTKIT_NODE_SIZE=2" in cmd
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert cmd[-2:] == ["python", "x.py"]


@pytest.mark.parametrize("n,node_size", [(0, None), (4, 3), (4, 0)])
def test_bad_launch_arguments(n, node_size):
    with pytest.raises(LaunchError):
        build_mpirun_command(n, ["python"], node_size=node_size, mpirun="mpirun")
    with pytest.raises(LaunchError):
        build_mpirun_command(2, [], mpirun="mpirun")


def test_runs_ranks_with_node_size():
    r = run_python(4, PROGRAMS / "hello.py", node_size=2, timeout=120).check()
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("rank"))
    assert lines == [f"rank {i} size 4 node_size 2" for i in range(4)]


def test_cli_forwards_exit_code():
    proc = subprocess.run([sys.executable, "-m", "ftkit", "launch", "-n", "2", "--timeout", "120", "--",
                           sys.executable, str(PROGRAMS / "hello.py"), "--exit-code", "3"],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 3, proc.stderr


def _processes_running(marker: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found.append(f"{entry}: {cmdline}")
    return found


def test_hard_timeout_kills_everything(tmp_path):
    # A private copy of the program, so processes of other runs cannot be mistaken for leftovers.
    program = tmp_path / "hang_private.py"
    program.write_text((PROGRAMS / "hang.py").read_text())
    r = run_python(2, program, timeout=10)
    assert r.timed_out
    assert r.elapsed < 60
    assert _processes_running(str(program)) == []  # no rank outlives the job


def test_job_whose_rank_is_killed_ends_and_leaves_nothing(tmp_path):
    program = tmp_path / "kill_one.py"
    program.write_text(
        "import os, signal, time\n"
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.rank == 1:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "time.sleep(2)\n"
        "print('survivor', MPI.COMM_WORLD.rank, flush=True)\n")
    r = run_python(3, program, timeout=120)
    assert not r.timed_out and r.elapsed < 60
    # Under ULFM a killed rank does not fail the job: the survivors carry on and finish.
    assert sorted(r.stdout.split("\n"))[1:] == ["survivor 0", "survivor 2"]
    assert _processes_running(str(program)) == []
