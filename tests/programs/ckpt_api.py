"""Checkpointer API checks on a live job: prints "OK <name>" per check passed, else "FAIL <name>: why"."""
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit

root = Path(sys.argv[1])
comm = MPI.COMM_WORLD


def cfg(name, **kw):
    d = root / name
    return ftkit.Config(ckpt_dir=d / "local", glbl_dir=d / "global", meta_dir=d / "meta",
                        failure_timeout=120, **kw)


def check(name, cond, why=""):
    if comm.rank == 0:
        print(f"{'OK' if cond else 'FAIL'} {name}" + ("" if cond else f": {why}"), flush=True)


def raises(name, exc, fn, *words):
    try:
        fn()
    except exc as e:
        check(name, all(w in str(e) for w in words), f"message {e!s} lacks {words}")
        return
    except Exception as e:  # noqa: BLE001
        check(name, False, f"raised {type(e).__name__}: {e}")
        return
    check(name, False, "did not raise")


raises("node_size", ftkit.ConfigError, lambda: ftkit.Checkpointer(cfg("ns", node_size=3), comm),
       "node_size = 3")

c = ftkit.Checkpointer(cfg("fail1", failure=1), comm)
check("failure1_restarted", c.restarted)
raises("failure1_recover", ftkit.RecoveryError, c.recover, "failure = 1")
c.finalize()

c = ftkit.Checkpointer(cfg("api", ckpt_l1=2, ckpt_l4=3, interval_unit="iterations"), comm)
check("fresh", not c.restarted and c.comm.size == comm.size and c.topology.node_count >= 1)
check("local_dir", c.topology.local_dir.is_dir() and c.topology.local_dir.name.startswith("node"))
raises("recover_fresh", ftkit.RecoveryError, c.recover, "fresh start")
raises("nothing_protected", ftkit.CheckpointError, lambda: c.checkpoint(1), "protect")
raises("noncontiguous", ftkit.CheckpointError, lambda: c.protect("x", np.zeros((4, 4))[:, ::2]),
       "C-contiguous")
raises("object_dtype", ftkit.CheckpointError, lambda: c.protect("x", np.array([None])), "dtype")
raises("not_array", ftkit.CheckpointError, lambda: c.protect("x", [1, 2]), "numpy array")
a = np.arange(10.0) + comm.rank
c.protect("a", a)
raises("bad_level", ftkit.CheckpointError, lambda: c.checkpoint(7), "level 7")
levels = [c.snapshot() for _ in range(6)]
check("snapshot_iterations", levels == [0, 1, 4, 1, 0, 4], str(levels))
st = c.status()
check("status", [x[0] for x in st.checkpoints][-1] == st.last_checkpoint_id and st.snapshots == 6, str(st))
check("explicit_id", c.checkpoint(1, id=40) == 40)
raises("id_not_increasing", ftkit.CheckpointError, lambda: c.checkpoint(1, id=40), "ids must increase")
raises("id_differs", ftkit.CheckpointError, lambda: c.checkpoint(1, id=50 + comm.rank), "differ across ranks")
c.finalize()
raises("after_finalize", ftkit.CheckpointError, lambda: c.checkpoint(1), "finalized")

# A `with` block that raises keeps the checkpoints for the restart.
try:
    with ftkit.Checkpointer(cfg("ctx"), comm) as c2:
        c2.protect("a", a)
        c2.checkpoint(1)
        raise RuntimeError("app crashed")
except RuntimeError:
    pass
c3 = ftkit.Checkpointer(cfg("ctx"), comm)
check("with_exception_keeps", c3.restarted)
b = np.zeros(10)
c3.protect("a", b)
info = c3.recover()
check("with_recovered", info.checkpoint_id == 1 and np.array_equal(b, a), str(info))
with c3:
    c3.checkpoint(4)
check("with_clean_exit_cleans", not (root / "ctx" / "meta" / "manifest.json").exists())
