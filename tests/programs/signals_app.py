"""Ranks that wait forever, each noting the SIGUSR1 it gets in a file (tests of ``ftkit launch``'s signals).

usage: signals_app.py DIR [--ignore-term]. Every rank writes ``DIR/ready.<rank>`` (its pid) once running and
``DIR/usr1.<rank>`` when SIGUSR1 arrives; with ``--ignore-term`` it ignores SIGTERM (so only the grace
period's SIGKILL ends it).
"""

import os
import signal
import sys
import time
from pathlib import Path

from mpi4py import MPI

d = Path(sys.argv[1])
rank = MPI.COMM_WORLD.rank
signal.signal(signal.SIGUSR1, lambda *_: (d / f"usr1.{rank}").write_text(str(os.getpid())))
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
(d / f"ready.{rank}").write_text(str(os.getpid()))
while True:
    time.sleep(0.05)
