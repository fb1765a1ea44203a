"""A singleton Open MPI process (no launcher) removes its shared-memory file when it ends.

Open MPI 5 leaves a singleton's ``sm_segment.*`` file (16 MiB of memory) in ``/dev/shm`` for good: every
``python app.py``, tool and test process that initializes MPI added one. Each run here puts the file in a
directory of the test's own (Open MPI's ``btl_sm_backing_directory``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ftkit.launch import SHM_DIR_ENV

MAPPED = ("import json; print(json.dumps(sorted({l.split()[-1] for l in open('/proc/self/maps') "
          "if '/sm_segment.' in l})), flush=True)")


def _run(code: str, shm: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "PMIX_"))}
    return subprocess.run([sys.executable, "-c", code], env={**env, SHM_DIR_ENV: str(shm)},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("first", ["ftkit", "mpi4py"])
def test_a_singleton_leaves_no_shared_memory_file(tmp_path, first):
    imports = ["import ftkit", "from mpi4py import MPI"]
    code = "\n".join([*(imports if first == "ftkit" else imports[::-1]),
                      "assert MPI.COMM_WORLD.Get_size() == 1", MAPPED])
    r = _run(code, tmp_path)
    assert r.returncode == 0, r.stderr
    mapped = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(mapped) == 1 and Path(mapped[0]).parent == tmp_path, mapped  # it had one, here
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())


def test_a_singleton_ended_without_finalize_leaves_none_either(tmp_path):
    r = _run("\n".join(["from mpi4py import MPI", "import ftkit.uncaught", MAPPED,
                        "ftkit.uncaught.end_process()"]), tmp_path)
    assert r.returncode == -signal.SIGKILL, r  # it ended itself as a failed rank does
    assert str(tmp_path) in r.stdout
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())
