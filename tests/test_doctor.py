"""``ftkit doctor``: what it reports standalone, under the launcher, and for a mis-launched process."""

from __future__ import annotations

import os
import subprocess
import sys

from ftkit.launch import run_mpi

from .conftest import MPI_TIMEOUT

DOCTOR = [sys.executable, "-m", "ftkit", "doctor"]


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI", "PMIX", "SLURM_", "MPI_LOCALNRANKS", "FTKIT_"))}
    env.update(extra)
    return env


def _field(out: str, name: str) -> str:
    return next(line.split(None, 1 + name.count(" "))[-1] for line in out.splitlines()
                if line.strip().startswith(name))


def test_help_says_what_it_checks():
    proc = subprocess.run([*DOCTOR, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for word in ("MPI library", "mpi4py", "launcher", "ULFM", "node-local", "free space"):
        assert word in " ".join(proc.stdout.split()), word


def test_standalone_report(tmp_path, small_disk):
    local = small_disk(4 << 20)
    ini = tmp_path / "ftkit.ini"
    ini.write_text(f"[basic]\nckpt_dir = {local}/ckpt\nglbl_dir = {tmp_path}/global\n"
                   f"meta_dir = {tmp_path}/meta\n")
    proc = subprocess.run([*DOCTOR, "--config", str(ini)], capture_output=True, text=True, timeout=300,
                          env=_clean_env(), cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert _field(out, "MPI library").startswith("Open MPI v5")
    assert "libmpi" in _field(out, "loaded")
    assert _field(out, "check").startswith("ok: COMM_WORLD has 1 rank")
    # A singleton has no fault tolerance switched on: said, with the reason and the way to enable it.
    assert _field(out, "ULFM").startswith("no: ") and "--with-ft ulfm" in _field(out, "ULFM")
    assert "ftkit launch" in _field(out, "to enable")
    assert f"from {ini}" in out
    assert f"{local}/ckpt [to be created under {local}]" in _field(out, "ckpt_dir")
    lines = out.splitlines()
    ckpt_fs = lines[next(i for i, line in enumerate(lines) if "ckpt_dir" in line) + 1]
    assert "node-local (tmpfs on " in ckpt_fs and "GiB free" in ckpt_fs
    assert not (local / "ckpt").exists()  # doctor creates nothing


def test_under_the_launcher_ulfm_is_on_and_every_rank_counted(tmp_path):
    r = run_mpi(3, DOCTOR, timeout=MPI_TIMEOUT, node_size=None, cwd=tmp_path).check()
    out = r.stdout
    assert out.count("ftkit doctor") == 1  # rank 0 reports for all
    assert _field(out, "ULFM").startswith("yes")
    assert _field(out, "check") == "ok: COMM_WORLD has 3 rank(s)"
    assert "(3 ranks)" in _field(out, "hosts")
    assert "OMPI_COMM_WORLD_SIZE=3" in _field(out, "launcher")


def test_mislaunched_process_is_a_problem(tmp_path):
    proc = subprocess.run(DOCTOR, capture_output=True, text=True, timeout=300,
                          env=_clean_env(PMI_SIZE="4", PMI_RANK="2"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _field(proc.stdout, "check").startswith("MISMATCH: ")
    assert "PROBLEM: launch mismatch" in proc.stdout and "PMI_SIZE=4" in proc.stdout
