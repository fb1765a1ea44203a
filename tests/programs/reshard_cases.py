"""Elastic-restart test program: checkpoint global arrays under one decomposition, recover under another.

Arrays (values are functions of the global index, so any rank can check any box):
  ``v``    1-D float64, length 1000, split in bands (``--split even`` or ``uneven``);
  ``u``    2-D float64 48 x 40 (plus a complex copy ``z``), split over a ``--grid PRxPC`` of boxes;
  ``step`` int64[1], replicated (every rank protects the whole array);
  ``A``    with ``--matrix PRxPC``: a 30 x 26 block-cyclic DistributedMatrix on that grid (blocks 4 x 3);
           ``--add-matrix`` protects it only after recover() (the checkpoint read does not hold it yet).
  ``own``  with ``--counter``: int64[2] per rank, protected without a layout (``[10 * rank + 3, 7]``).

write mode:   protect, fill, one ``checkpoint(level)`` per level of ``--levels 4,3``; exit without finalize
              (the checkpoints stay).
recover mode: protect zeroed arrays under the new decomposition, ``recover()``, check every element; print
              ``R<rank> ok level=.. read=.. need=.. sources=..`` or ``R<rank> BAD ...``; with ``--then-level``
              checkpoint again under the new decomposition (the next launch recovers from it).
              With ``--hostile`` then run the hostile cases through :func:`ftkit.checkpoint.reshard.restore`
              on scratch arrays (overlap, hole, dtype, global shape) and print
              ``R<rank> case <name> <Type>: ... untouched=..``.
              With ``--subgrids 2x2,1x5`` afterwards restore ``A`` through the same function on
              sub-communicators of 4 and 5 ranks holding those grids (the survivors after a shrink) and
              print ``R<rank> subgrid <grid> ok|BAD``.
              With ``--shrink-kill R`` last: rank R SIGKILLs itself, the survivors agree on it and shrink
              (ULFM), and refill their arrays for a decomposition over the survivors from the newest
              checkpoint through the same function ("continue with fewer ranks" when no spare is left);
              print ``R<rank> shrink <n> ok|BAD`` (rank in the shrunk communicator).

``--hosts 0,2,3`` emulates separate hosts: the ranks of this job's node ``n`` (``FTKIT_NODE_SIZE`` ranks a
node) run on "host" ``hosts[n]`` and read the config ``ftkit.h<host>.ini``, whose ``ckpt_dir`` is that host's
own directory: no rank is given another host's node-local files (as on a cluster of separate disks).
"""
import argparse
import os
import sys

import numpy as np
from mpi4py import MPI

import ftkit
import ftkit.checkpoint.layout
from ftkit.checkpoint import reshard
from ftkit.storage.format.global_layout import Layout

NV, SHAPE, MSHAPE = 1000, (48, 40), (30, 26)


def band(n: int, parts: int, i: int, uneven: bool) -> tuple[int, int]:
    if uneven:  # weights 1, 2, 3, ...: every band different, none empty
        w = np.arange(1, parts + 1)
        edges = np.concatenate(([0], np.cumsum(w) * n // w.sum()))
        return int(edges[i]), int(edges[i + 1])
    base, extra = divmod(n, parts)
    start = i * base + min(i, extra)
    return start, start + base + (1 if i < extra else 0)


def v_values(a: int, b: int) -> np.ndarray:
    return np.arange(a, b) * 1.5 + 0.25


def u_values(r: tuple[int, int], c: tuple[int, int]) -> np.ndarray:
    i, j = np.meshgrid(np.arange(*r), np.arange(*c), indexing="ij")
    return i * 1000.0 + j + 0.5


def m_values() -> np.ndarray:
    i, j = np.meshgrid(np.arange(MSHAPE[0]), np.arange(MSHAPE[1]), indexing="ij")
    return i * 100.0 - j * 0.25


def grid_of(text: str) -> tuple[int, int]:
    pr, pc = (int(x) for x in text.split("x"))
    return pr, pc


p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--mode", choices=["write", "recover"], required=True)
p.add_argument("--split", choices=["even", "uneven"], default="even")
p.add_argument("--grid", required=True)
p.add_argument("--matrix", default="")
p.add_argument("--levels", default="1")
p.add_argument("--then-level", type=int, default=0)
p.add_argument("--hostile", action="store_true")
p.add_argument("--add-matrix", action="store_true")
p.add_argument("--subgrids", default="")
p.add_argument("--shrink-kill", type=int, default=-1)
p.add_argument("--counter", action="store_true")
p.add_argument("--hosts", default="")
a = p.parse_args()

if a.hosts:
    host = a.hosts.split(",")[MPI.COMM_WORLD.rank // int(os.environ["FTKIT_NODE_SIZE"])]
    a.config = f"ftkit.h{host}.ini"
ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
comm = ckpt.comm
rank, size = comm.rank, comm.size
pr, pc = grid_of(a.grid)
assert pr * pc == size, (a.grid, size)
v0, v1 = band(NV, size, rank, a.split == "uneven")
r = band(SHAPE[0], pr, rank // pc, a.split == "uneven")
c = band(SHAPE[1], pc, rank % pc, False)
v = np.zeros(v1 - v0)
u = np.zeros((r[1] - r[0], c[1] - c[0]))
z = np.zeros(u.shape, dtype=np.complex128)
step = np.zeros(1, dtype=np.int64)
ckpt.protect("v", v, global_shape=(NV,), offset=(v0,))
ckpt.protect("u", u, global_shape=SHAPE, offset=(r[0], c[0]))
ckpt.protect("z", z, global_shape=SHAPE, offset=(r[0], c[0]))
ckpt.protect("step", step, global_shape=(1,), offset=(0,))
own = np.zeros(2, dtype=np.int64)
if a.counter:
    ckpt.protect("own", own)   # no layout: recovered from this rank's own file
A = None


def make_matrix(on: MPI.Comm, shape: str):  # noqa: ANN201
    from ftkit.linalg import DistributedMatrix, ProcessGrid

    mr, mc = grid_of(shape)
    return DistributedMatrix.zeros(ProcessGrid(on, mr, mc), *MSHAPE, mb=4, nb=3)


def matrix_ok(m) -> bool:  # noqa: ANN001
    return bool(np.array_equal(m.local, m_values()[np.ix_(m.global_rows(), m.global_cols())]))


if a.matrix and not a.add_matrix:
    A = make_matrix(comm, a.matrix)
    ckpt.protect_matrix("A", A)


def fill() -> None:
    v[:] = v_values(v0, v1)
    u[:] = u_values(r, c)
    z[:] = u_values(r, c) * (1 - 2j)
    step[0] = 17
    own[:] = (10 * rank + 3, 7)
    if A is not None:
        A.local[:] = m_values()[np.ix_(A.global_rows(), A.global_cols())]


def problems() -> list[str]:
    bad = []
    if not np.array_equal(v, v_values(v0, v1)):
        bad.append("v")
    if not np.array_equal(u, u_values(r, c)):
        bad.append("u")
    if not np.array_equal(z, u_values(r, c) * (1 - 2j)):
        bad.append("z")
    if step[0] != 17:
        bad.append(f"step={step[0]}")
    if A is not None and not matrix_ok(A):
        bad.append("A")
    if a.counter and own.tolist() != [10 * rank + 3, 7]:
        bad.append(f"own={own.tolist()}")
    return bad


def hostile() -> None:
    """Each case must raise on every rank before anything is written into the targets."""
    entry = ckpt._session.store.manifest.newest_first()[0]
    layouts = dict(ckpt._layouts)
    targets = {n: np.empty_like(arr) for n, arr in ckpt.protected.items()}
    lo, hi = v0, min(NV, v1 + 1)   # every band one element longer: overlaps its neighbour
    cases = {
        "overlap": ({"v": np.zeros(hi - lo)}, {"v": Layout.of_box((NV,), (lo,), (hi - lo,))}),
        "hole": ({"v": np.zeros(v1 - v0 - (rank == 0))},
                 {"v": Layout.of_box((NV,), (v0 + (rank == 0),), (v1 - v0 - (rank == 0),))}),
        "dtype": ({"v": np.zeros(v1 - v0, dtype=np.float32)}, {}),
        "global_shape": ({"v": np.zeros(v1 - v0)}, {"v": Layout.of_box((NV + 5,), (v0,), (v1 - v0,))}),
    }
    for name, (tv, lv) in cases.items():
        t = {**targets, **tv}
        for arr in t.values():
            arr.fill(-7)
        lay = {**layouts, **lv}
        if name == "dtype":
            lay["v"] = Layout.of_box((NV,), (v0,), (v1 - v0,))
        try:
            reshard.restore(comm, ckpt.config, ckpt.exec_id, entry, t, lay)
            outcome = "no error"
        except ftkit.FtkitError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        untouched = all((arr == -7).all() for arr in t.values())
        print(f"R{rank} case {name} {outcome} untouched={untouched}", flush=True)


if a.mode == "write":
    fill()
    for level in (int(x) for x in a.levels.split(",")):
        ckpt.checkpoint(level)
        ckpt.wait()  # background post-processing (the L4 flush) done before this job ends
    print(f"R{rank} wrote", flush=True)
    sys.exit(0)

for arr in (v, u, z, step, own):
    arr.fill(-1)
try:
    info = ckpt.recover()
except ftkit.FtkitError as exc:
    print(f"R{rank} error {type(exc).__name__}: {exc}", flush=True)
    sys.exit(0)
bad = problems()
stats = info.reshard
if stats is None:
    print(f"R{rank} {'BAD ' + ','.join(bad) if bad else 'ok'} level={info.level} same-count", flush=True)
else:
    print(f"R{rank} {'BAD ' + ','.join(bad) if bad else 'ok'} level={info.level} read={stats.bytes_read} "
          f"need={stats.bytes_needed} sources={''.join(map(str, stats.source_levels))} "
          f"id={info.checkpoint_id} skipped={len(info.skipped)}", flush=True)
if a.hostile:
    hostile()
for text in filter(None, a.subgrids.split(",")):
    n = grid_of(text)[0] * grid_of(text)[1]
    sub = comm.Split(0 if rank < n else MPI.UNDEFINED, rank)
    if sub != MPI.COMM_NULL:
        m = make_matrix(sub, text)
        buf = m.local.T
        m.local.fill(-3)
        entry = ckpt._session.store.manifest.newest_first()[0]
        reshard.restore(sub, ckpt.config, ckpt.exec_id, entry, {"A": buf},
                        {"A": ftkit.checkpoint.layout.matrix_layout("A", m)[1]}, partial=True)
        print(f"R{rank} subgrid {text} {'ok' if matrix_ok(m) else 'BAD'}", flush=True)
        sub.Free()
    comm.Barrier()
if a.add_matrix:
    A = make_matrix(comm, a.matrix)
    ckpt.protect_matrix("A", A)
    A.local[:] = m_values()[np.ix_(A.global_rows(), A.global_cols())]
if a.then_level:
    ckpt.checkpoint(a.then_level)
    ckpt.wait()
    print(f"R{rank} checkpointed", flush=True)
if a.shrink_kill >= 0:
    from ftkit.failure import ulfm
    from ftkit.inject import kill_self

    work = comm.Dup()
    work.Set_errhandler(MPI.ERRORS_RETURN)
    work.Barrier()
    if rank == a.shrink_kill:
        kill_self()
    try:
        work.Barrier()  # fails once the runtime reports the death
    except MPI.Exception:
        pass
    new = ulfm.repair(work, ulfm.agree_on_dead(work, ulfm.failed_ranks(work)))
    assert new is not None
    n, me = new.Get_size(), new.Get_rank()
    v0, v1 = band(NV, n, me, True)
    r, c = band(SHAPE[0], n, me, False), (0, SHAPE[1])
    v, step = np.zeros(v1 - v0), np.zeros(1, np.int64)
    u, z = np.zeros((r[1] - r[0], SHAPE[1])), np.zeros((r[1] - r[0], SHAPE[1]), complex)
    lay = {"v": Layout.of_box((NV,), (v0,), v.shape), "u": Layout.of_box(SHAPE, (r[0], 0), u.shape),
           "z": Layout.of_box(SHAPE, (r[0], 0), z.shape), "step": Layout.of_box((1,), (0,), (1,))}
    entry = ckpt._session.store.manifest.newest_first()[0]
    reshard.restore(new, ckpt.config, ckpt.exec_id, entry, {"v": v, "u": u, "z": z, "step": step}, lay,
                    partial=True)
    A = None
    print(f"R{me} shrink {n} {'BAD ' + ','.join(problems()) if problems() else 'ok'}", flush=True)
    ulfm.exit_without_finalize(new)
