"""Application-state test program: resizable arrays, every generator family and a dict of plain values.

write mode:   --levels 1,2   checkpoint i at level levels[i]; before it, the state is that of step i:
              resizable arrays of a size that depends on (rank, i) (one grows, one shrinks, one 2-D changes
              rows), every generator advanced by i + 1 batches of draws, the dict holding step i's values.
recover mode: protects arrays of size 1 and fresh generators, asks stored_shape(), recovers, and prints one
              line per rank: "R<rank> recovered id=.. level=.. step=.. shapes=ok|BAD arrays=ok|BAD
              resized=a,b rng=ok|BAD state=ok|BAD inplace=ok|BAD" (rng: the next 1000 draws of every family
              equal those of a failure-free run). --no-probe: no stored_shape() call (it locates, and may
              rebuild, the copies as recover() does: recover() then reports level 1).
gwrite mode:  a resizable array "g" with a global layout (rank r's box grows with i and differs per rank)
              and a replicated "step", checkpointed at --levels.
grecover:     on another rank count: stored_shape("g") gives the global shape, each rank protects an even
              share of it, recovers, and prints "R<rank> grecovered n=<global length> step=.. data=ok|BAD".
bad mode:     unsupported values: prints "R<rank> protect <Type>: <message>" for a dict holding a set, then,
              after rank 1 puts a set into its dict, "R<rank> checkpoint <Type>: <message> ckpts=<n>".
"""
import argparse

import numpy as np
from mpi4py import MPI

import ftkit

FAMILIES = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


def size_p(rank: int, i: int) -> int:
    return 50 + 300 * i + 7 * rank          # grows


def size_m(rank: int, i: int) -> int:
    return 400 - 90 * i - rank              # shrinks


def arrays(rank: int, i: int) -> dict[str, np.ndarray]:
    return {"p": np.arange(size_p(rank, i)) * 0.25 + rank * 1000 + i,
            "m": (np.arange(size_m(rank, i), dtype=np.int32) * (rank + 1) - i).astype(np.int32),
            "q": np.full((3 + 2 * i, 4), rank + 0.5 * i, dtype=np.complex64)}


def generator(family: str, rank: int, i: int) -> np.random.Generator:
    """A generator as the failure-free run holds it at checkpoint ``i`` (advanced by i + 1 batches)."""
    rng = np.random.Generator(getattr(np.random, family)(1234 + rank))
    for j in range(i + 1):
        rng.random(17 + j)
        rng.integers(0, 2**40, size=3)
        rng.standard_normal(5)
    return rng


def state(rank: int, i: int) -> dict:
    return {"step": i, "t": i * 0.1, "dt": float("-0.0"), "big": (-1) ** rank * 2 ** (100 + i) + 12345,
            "history": [1.5 * k for k in range(i + 1)],
            "nested": [[i, [None, True, False]], ("tuple", b"bytes\x00\xff" * (i + 1))],
            "unicode": "héllo ✓ 東京 " + str(rank), "arr": np.arange(i + 2, dtype=">i2"),
            "scalar": np.float32(i / 3), "flag": np.bool_(i % 2), 7: {"int key": -(2**70)},
            "params": {"n": None, "tol": 1e-300, "inf": float("inf")}}


def same(a, b) -> bool:
    """Equal values of equal types (arrays: dtype, shape and bytes)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray | np.generic):
        return a.dtype == b.dtype and np.shape(a) == np.shape(b) and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return a == b


p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--mode", choices=["write", "recover", "bad", "gwrite", "grecover"], required=True)
p.add_argument("--levels", default="1")
p.add_argument("--no-probe", action="store_true")
p.add_argument("--q-compression", default=None, help="write mode: protect 'q' with this compression")
a = p.parse_args()

ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
rank = ckpt.comm.rank

def g_sizes(nranks: int, i: int) -> list[int]:
    return [100 + 50 * i + 13 * r for r in range(nranks)]


def g_values(start: int, n: int, i: int) -> np.ndarray:
    return (np.arange(start, start + n) * 0.5 + i).astype(np.float64)


if a.mode == "gwrite":
    step = np.zeros(1, np.int64)
    ckpt.protect("step", step, global_shape=(1,), offset=(0,))
    for i, lv in enumerate(int(x) for x in a.levels.split(",")):
        sizes = g_sizes(ckpt.nranks, i)
        off = sum(sizes[:rank])
        step[0] = i
        ckpt.protect("g", g_values(off, sizes[rank], i), global_shape=(sum(sizes),), offset=(off,),
                     resizable=True)
        cid = ckpt.checkpoint(lv)
        print(f"R{rank} wrote id={cid} level={lv}", flush=True)
    ckpt.wait()
elif a.mode == "grecover":
    (n,), dtype = ckpt.stored_shape("g")
    share = [n // ckpt.nranks + (r < n % ckpt.nranks) for r in range(ckpt.nranks)]
    off = sum(share[:rank])
    g = np.empty(share[rank], dtype)
    ckpt.protect("g", g, global_shape=(n,), offset=(off,), resizable=True)
    step = np.full(1, -1, np.int64)
    ckpt.protect("step", step, global_shape=(1,), offset=(0,))
    info = ckpt.recover()
    i = int(step[0])
    ok = ckpt.array("g") is g and np.array_equal(g, g_values(off, share[rank], i))
    print(f"R{rank} grecovered n={n} step={i} data={'ok' if ok else 'BAD'}", flush=True)
    ckpt.finalize()
elif a.mode == "bad":
    try:
        ckpt.protect("state", {"history": [1, 2, 3, {1}]})
    except ftkit.FtkitError as exc:
        print(f"R{rank} protect {type(exc).__name__}: {exc}", flush=True)
    st = {"history": [1, 2]}
    ckpt.protect("state", st)
    if rank == 1:
        st["history"].append({"k": {1, 2}})
    try:
        ckpt.checkpoint(1)
        print(f"R{rank} checkpoint none", flush=True)
    except ftkit.FtkitError as exc:
        print(f"R{rank} checkpoint {type(exc).__name__}: {exc} ckpts={len(ckpt.status().checkpoints)}",
              flush=True)
    ckpt.finalize()
elif a.mode == "write":
    st: dict = {}
    ckpt.protect("state", st)
    for i, lv in enumerate(int(x) for x in a.levels.split(",")):
        for name, arr in arrays(rank, i).items():
            ckpt.protect(name, arr, resizable=True, compression=a.q_compression if name == "q" else None)
        for fam in FAMILIES:
            ckpt.protect("rng_" + fam, generator(fam, rank, i))
        st.clear()
        st.update(state(rank, i))
        cid = ckpt.checkpoint(lv)
        print(f"R{rank} wrote id={cid} level={lv}", flush=True)
    ckpt.wait()  # background post-processing (L4 flush) done: the checkpoints stay for the recover run
else:
    small = {"p": np.zeros(1), "m": np.zeros(1, np.int32), "q": np.zeros((1, 4), np.complex64)}
    for name, arr in small.items():
        ckpt.protect(name, arr, resizable=True)
    rngs = {fam: np.random.Generator(getattr(np.random, fam)(99)) for fam in FAMILIES}
    for fam, rng in rngs.items():  # a BitGenerator protected alone works as well as a Generator
        ckpt.protect("rng_" + fam, rng if fam != "SFC64" else rng.bit_generator)
    st = {"stale": 1}
    ckpt.protect("state", st)
    stored = {} if a.no_probe else {n: ckpt.stored_shape(n) for n in small}
    info = ckpt.recover()
    i = st.get("step", -1)
    want = arrays(rank, i)
    shapes_ok = all(stored.get(n, (w.shape, w.dtype)) == (w.shape, w.dtype) for n, w in want.items())
    arrays_ok = all(same(ckpt.array(n), want[n]) for n in small)
    inplace = all(ckpt.array(n) is not small[n] for n in small) and ckpt.protected["p"] is ckpt.array("p")
    rng_ok = all(np.array_equal(rngs[f].random(1000), generator(f, rank, i).random(1000)) for f in FAMILIES)
    print(f"R{rank} recovered id={info.checkpoint_id} level={info.level} step={i} "
          f"shapes={'ok' if shapes_ok else 'BAD'} arrays={'ok' if arrays_ok else 'BAD'} "
          f"resized={','.join(info.resized)} rng={'ok' if rng_ok else 'BAD'} "
          f"state={'ok' if same(st, state(rank, i)) else 'BAD'} inplace={'ok' if inplace else 'BAD'}",
          flush=True)
    for why in info.skipped if rank == 0 else ():
        print(f"S{rank} skipped {why}", flush=True)
    ckpt.finalize()
