"""The launcher's watchdog: when ``ftkit launch`` is gone, nothing it started survives (a standalone script).

:func:`ftkit._jobwatch.run_job` starts this file with ``python -I -S _watchdog.py SID [DIR ...]`` in a
session of its own, its standard input the read end of a pipe whose write end only the launcher holds. The
read returns at end of file when the launcher exits or is killed (even by SIGKILL, which no handler sees);
the watchdog then SIGKILLs every process of session ``SID`` (mpirun and its ranks) until none runs, for at
most 60 s. The directories ``DIR`` (the job's private runtime and status directories) are removed too,
unless the launcher wrote :data:`CLEANING` into the pipe before closing it: then it lives and removes them
itself once it has read the ranks' notes there. It imports nothing of ftkit, so it starts in a few
milliseconds and cannot fail on an import.
"""

import os
import shutil
import signal
import sys
import time

CLEANING = b"c"  # written by a launcher that ends normally: it removes the directories itself


def _running_members(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def main() -> None:
    sid, leftovers = int(sys.argv[1]), sys.argv[2:]
    last = b""
    try:
        while chunk := sys.stdin.buffer.read(4096):
            last = chunk[-1:]
    except (OSError, ValueError):
        pass
    if last == CLEANING:
        leftovers = []
    _kill_session(sid)
    for path in leftovers:  # only once nothing of the job runs: a rank could still be writing there
        shutil.rmtree(path, ignore_errors=True)


def _kill_session(sid: int) -> None:
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        alive = _running_members(sid)
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


if __name__ == "__main__":
    main()
