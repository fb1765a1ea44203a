"""A singleton Open MPI process (no launcher) removes its shared-memory file when it ends.

Open MPI 5 leaves a singleton's ``sm_segment.*`` file (16 MiB of memory) in ``/dev/shm`` for good: every
``python app.py``, tool and test process that initializes MPI added one. Each run here puts the file in a
directory of the test's own (Open MPI's ``btl_sm_backing_directory``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ftkit.launch import SHM_DIR_ENV

from .conftest import MPI_TIMEOUT

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


# Every way a singleton that imported ftkit can end, in /dev/shm itself (Open MPI's default): each run looks
# only at the files its own process mapped (their names carry its job's number) and at that job's session
# directory. SIGKILL and os._exit give the process no control: the watcher started at MPI's start removes
# its files after it has gone, as it does after SIGTERM (whose default ends the process at once).
ENDINGS = {  # ending: (program's last line, exit status)
    "normal": ("", 0),
    "exception": ("raise RuntimeError('after import ftkit')", 1),
    "import error": ("import ftkit_no_such_module", 1),
    "sys.exit(3)": ("sys.exit(3)", 3),
    "MPI.Finalize()": ("MPI.Finalize()", 0),
    "os._exit(4)": ("os._exit(4)", 4),
    "SIGTERM": ("", -signal.SIGTERM),
    "SIGINT": ("", -signal.SIGINT),
    "SIGKILL": ("", -signal.SIGKILL),
    "SIGKILL of its process group": ("", -signal.SIGKILL),
}
WAIT = 60.0  # seconds for a process to end, or for the watcher to have removed the files


def _singleton_program(last: str, first: str = "ftkit") -> str:
    imports = ["import ftkit", "from mpi4py import MPI"]
    # SIGINT as in a program run from a terminal, whatever the test run inherited (a suite started in the
    # background by a non-interactive shell has SIGINT ignored, and Python then installs no handler)
    return "\n".join(["import json, os, signal, sys",
                      "signal.signal(signal.SIGINT, signal.default_int_handler)",
                      *(imports if first == "ftkit" else imports[::-1]),
                      "assert MPI.COMM_WORLD.Get_size() == 1", MAPPED, "sys.stdin.readline()", last])


def _lines(proc: subprocess.Popen[str], n: int, timeout: float = WAIT) -> list[str]:
    """Read up to ``n`` lines of ``proc``'s standard output, waiting at most ``timeout`` seconds in all;
    return the whole lines read (fewer if it ended or the time ran out)."""
    assert proc.stdout is not None
    fd, got, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    while got.count(b"\n") < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        got += chunk
    return got.decode().split("\n")[:got.count(b"\n")]


def _session_dir(segment: str) -> Path:
    """Open MPI 5's session directory of a singleton's job: ``<tmp>/ompi.<host>.<uid>/jf.0/<job>``."""
    _, host_uid_job = segment.split("sm_segment.", 1)
    host, uid, job, _ = host_uid_job.rsplit(".", 3)
    return Path(tempfile.gettempdir()) / f"ompi.{host}.{uid}" / "jf.0" / str(int(job, 16))


def _gone(paths: list[Path], timeout: float) -> list[Path]:
    """Wait until none of ``paths`` exists (bounded); return those still there."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in paths if p.exists()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _watchers_of(segment: str) -> list[int]:
    """Pids of the processes whose command line names ``segment`` (the watcher of its singleton)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and segment.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            pass
    return pids


def _gone_watchers(maps: list[str]) -> list[int]:
    """Wait until no watcher of the singleton that mapped ``maps`` is left (bounded); return those left."""
    deadline = time.monotonic() + WAIT
    while (pids := [p for m in maps for p in _watchers_of(m)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def _end_singleton(ending: str, first: str = "ftkit") -> tuple[subprocess.Popen[str], list[str], str]:
    """Run a singleton program that ends the ``ending`` way; return it (ended), the files it mapped and
    its standard error."""
    last, _ = ENDINGS[ending]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    proc = subprocess.Popen([sys.executable, "-c", _singleton_program(last, first)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        maps = json.loads((_lines(proc, 1) or ["[]"])[0])
        assert maps and all(Path(m).exists() for m in maps), maps  # the live process's files are there
        dirs = [_session_dir(m) for m in maps]
        assert all(d.is_dir() for d in dirs), dirs
        if ending == "SIGKILL of its process group":
            os.killpg(proc.pid, signal.SIGKILL)
        elif ending.startswith("SIG"):
            proc.send_signal(getattr(signal, ending))
        _, err = proc.communicate("" if ending.startswith("SIG") else "end\n", timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=WAIT)
    return proc, maps, err


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_singleton_leaves_nothing_however_it_ends(ending):
    proc, maps, err = _end_singleton(ending)
    assert proc.returncode == ENDINGS[ending][1], (proc.returncode, err)
    assert all(m.startswith("/dev/shm/sm_segment.") for m in maps), maps
    left = _gone([Path(m) for m in maps] + [_session_dir(m) for m in maps], WAIT)
    assert not left, f"{ending}: left behind {left}"
    assert not _gone_watchers(maps), "the watcher outlived its work"


@pytest.mark.parametrize("ending", ["normal", "SIGTERM", "SIGKILL"])
def test_a_singleton_that_imported_mpi4py_first_leaves_nothing_either(ending):
    proc, maps, err = _end_singleton(ending, first="mpi4py")
    assert proc.returncode == ENDINGS[ending][1], (proc.returncode, err)
    assert not _gone([Path(m) for m in maps] + [_session_dir(m) for m in maps], WAIT)


def test_the_watcher_removes_only_the_file_its_singleton_mapped(tmp_path):
    # The name now belongs to another file (a later process's): after the SIGKILL it stays.
    program = _singleton_program("\n".join([
        "maps = [l.split()[-1] for l in open('/proc/self/maps') if '/sm_segment.' in l]",
        "os.unlink(maps[0]); open(maps[0], 'w').write('another file')",
        "print('replaced', flush=True)", "sys.stdin.readline()"]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    proc = subprocess.Popen([sys.executable, "-c", program], env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    maps: list[str] = []
    try:
        maps = json.loads((_lines(proc, 1) or ["[]"])[0])
        proc.stdin.write("go\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert _lines(proc, 1) == ["replaced"]
        proc.kill()
        proc.communicate(timeout=WAIT)
        assert not _gone([_session_dir(maps[0])], WAIT)  # the watcher has done its work
        assert not _gone_watchers(maps)
        assert Path(maps[0]).read_text() == "another file"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=WAIT)
        for m in maps:
            Path(m).unlink(missing_ok=True)


LAUNCH_ENDINGS = {  # ending: (ranks' last line, who is killed from outside)
    "normal": ("", None),
    "exception": ("raise RuntimeError('after import ftkit')", None),
    "sys.exit(3)": ("sys.exit(3)", None),
    "SIGTERM to ftkit launch": ("time.sleep(300)", "launcher"),
    "SIGKILL of a rank": ("MPI.COMM_WORLD.recv(source=MPI.ANY_SOURCE)", "rank"),
}


@pytest.mark.mpi
@pytest.mark.parametrize("ending", list(LAUNCH_ENDINGS))
def test_a_job_of_ftkit_launch_leaves_nothing_however_it_ends(tmp_path, ending):
    last, victim = LAUNCH_ENDINGS[ending]
    program = tmp_path / "job.py"
    program.write_text("\n".join([
        "import json, os, sys, time", "import ftkit", "from mpi4py import MPI",
        "maps = sorted({l.split()[-1] for l in open('/proc/self/maps') if '/sm_segment.' in l})",
        "print(json.dumps([os.getpid(), maps]), flush=True)", "MPI.COMM_WORLD.Barrier()", last, ""]))
    proc = subprocess.Popen([sys.executable, "-m", "ftkit", "launch", "-n", "2", "--grace", "5", "--",
                             sys.executable, str(program)], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        ranks = [json.loads(line) for line in _lines(proc, 2, MPI_TIMEOUT)]
        assert len(ranks) == 2 and all(ranks), ranks
        if victim == "launcher":
            proc.send_signal(signal.SIGTERM)
        elif victim == "rank":
            os.kill(ranks[1][0], signal.SIGKILL)
        _, err = proc.communicate(timeout=MPI_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=WAIT)
    assert (proc.returncode == 0) == (ending == "normal"), (proc.returncode, err)
    files = sorted({Path(m) for _, maps in ranks for m in maps})
    assert len(files) == 2 and all(f.parent.name.startswith("ftkit-mpi-") for f in files), files
    assert not _gone([*files, files[0].parent], WAIT), err


@pytest.mark.mpi
def test_a_one_rank_job_of_ftkit_launch_maps_no_segment_and_starts_no_watcher(tmp_path):
    """A launched one-rank job is no singleton: Open MPI maps no shared-memory file for it, so ftkit starts no
    watcher (whose start costs a few ms of CPU), and the job leaves nothing."""
    program = tmp_path / "job.py"
    program.write_text("\n".join([
        "import json", "import ftkit", "from ftkit import _shm_segments", "from mpi4py import MPI",
        "MPI.COMM_WORLD.Barrier()",
        "maps = sorted({l.split()[-1] for l in open('/proc/self/maps') if '/sm_segment.' in l})",
        "print(json.dumps([maps, len(_shm_segments._OWN), len(_shm_segments._PIPE)]), flush=True)", ""]))
    proc = subprocess.Popen([sys.executable, "-m", "ftkit", "launch", "-n", "1", "--", sys.executable,
                             str(program)], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=MPI_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == [[], 0, 0], out
