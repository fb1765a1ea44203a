"""The launcher's watchdog: when ``ftkit launch`` is gone, nothing it started survives (a standalone script).

:func:`ftkit._jobwatch.run_job` starts this file with ``python -I -S _watchdog.py SID`` in a session of its
own, its standard input the read end of a pipe whose write end only the launcher holds. The read returns at
end of file when the launcher exits or is killed (even by SIGKILL, which no handler sees); the watchdog then
SIGKILLs every process of session ``SID`` (mpirun and its ranks) until none runs, for at most 60 s. It
imports nothing of ftkit, so it starts in a few milliseconds and cannot fail on an import.
"""

import os
import signal
import sys
import time


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
    sid = int(sys.argv[1])
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
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
