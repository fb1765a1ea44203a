"""A job with spare ranks whose application ranks fail at start-up or end without ``finalize()`` (issue 30).

usage: spare_startup.py CONFIG {no-finalize|raise}. ``no-finalize``: each application rank creates the
Checkpointer and ends normally without calling ``finalize()``. ``raise``: the Checkpointer's own start-up
error (a TopologyError or RunLockedError from the configuration and run directories) is left uncaught.
"""

import sys

import ftkit

ckpt = ftkit.Checkpointer(sys.argv[1])
if sys.argv[2] == "no-finalize":
    print(f"app rank {ckpt.rank} ends without finalize()", flush=True)
