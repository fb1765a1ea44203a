"""Shared test fixtures: running small programs under mpirun with a hard timeout."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ftkit.launch import MPIResult, run_mpi

REPO = Path(__file__).resolve().parents[1]

#: Default hard timeout (s) for one MPI job in a test; well below CI's limit.
MPI_TIMEOUT = float(os.environ.get("FTKIT_TEST_MPI_TIMEOUT", "180"))


def run_python(nprocs: int, script: str | os.PathLike[str], *args: str, timeout: float = MPI_TIMEOUT,
               node_size: int | None = None, env: dict[str, str] | None = None,
               cwd: str | os.PathLike[str] | None = None) -> MPIResult:
    """Run ``python script args`` on ``nprocs`` ranks under the ftkit launcher (ULFM on)."""
    return run_mpi(nprocs, [sys.executable, str(script), *args], timeout=timeout, node_size=node_size,
                   env=env, cwd=cwd)


def wait_for_int(path: Path, timeout: float) -> int | None:
    """The integer a program writes into ``path`` once it is there whole, or None after ``timeout`` seconds.

    ``Path.write_text`` creates the file before it writes: a reader that only waits for the file to exist can
    read it empty (seen once in CI: the killer thread of a test read "" and the rank was never killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(path.read_text())
        except (OSError, ValueError):  # not there yet, or not written yet
            time.sleep(0.05)
    return None


@pytest.fixture
def mpi_python():
    """The :func:`run_python` helper, as a fixture."""
    return run_python


@pytest.fixture
def small_disk(tmp_path):
    """Return a function ``make(size_bytes) -> Path`` mounting a real tmpfs of that size (a disk that fills).

    Writes past the size fail with a real ``ENOSPC``. Needs root (CI and the developers' machines run as
    root); every mount is unmounted at teardown.
    """
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("a size-limited tmpfs needs root to mount")
    mounts: list[Path] = []

    def make(size_bytes: int, name: str = "disk") -> Path:
        point = tmp_path / f"{name}{len(mounts)}"
        point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size_bytes)}", "tmpfs", str(point)],
                       check=True, timeout=30)
        mounts.append(point)
        return point

    yield make
    for point in reversed(mounts):
        subprocess.run(["umount", "-l", str(point)], check=False, timeout=30)
