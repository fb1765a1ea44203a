"""Compression of L4 copies (issue 35): ratio and compress/decompress speed per codec, on four data sets.

usage: python benchmarks/bench_compression.py [--quick] [--mib 64] [--level 3]

One process, no MPI. For each data set -- the heat field (examples/heat.py after some Jacobi steps), CG
vectors (the iterates of a conjugate-gradient solve of a 1-D Poisson problem with a random right-hand side:
full-entropy mantissas), an integer mask (int32 blobs) and uniform random bytes (incompressible) -- of
``--mib`` MiB, a checkpoint file is written, then a compressed L4 copy per codec (``none`` is a plain copy).
Reported per (data, codec): stored / logical bytes (ratio = logical / stored), compress MB/s (the copy from
the L1 file), decompress MB/s (reading every array back through the copy, digests checked). Targets of the
issue (not measured here: they need a throttled global directory): L4 time <= 0.8x uncompressed on the heat
field and <= 1.05x on random data at 200 MB/s; the raw fallback keeps random data at ratio ~1.0.

``--quick``: 8 MiB per data set. Prints one human-readable line per case and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from ftkit.checkpoint.levels.pfs import compress_copy  # noqa: E402
from ftkit.storage.format.compressed import stored_size  # noqa: E402
from ftkit.storage.format.container import copy_file, read_arrays, write_file  # noqa: E402


def datasets(nbytes: int) -> dict[str, np.ndarray]:
    import heat  # examples/heat.py

    n = int((nbytes // 8) ** 0.5)
    u = heat.reference(n, 60)
    m = nbytes // 8
    rng = np.random.default_rng(35)
    b = rng.standard_normal(m)
    x = np.zeros(m)  # CG on tridiag(-1, 2, -1): a few iterations from x = 0
    r = b.copy()
    p = r.copy()
    rr = r @ r
    for _ in range(8):
        ap = 2 * p
        ap[1:] -= p[:-1]
        ap[:-1] -= p[1:]
        alpha = rr / (p @ ap)
        x += alpha * p
        r -= alpha * ap
        rr, rr_old = r @ r, rr
        p = r + (rr / rr_old) * p
    side = int((nbytes // 4) ** 0.5)
    i, j = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    mask = (((i // 37) + (j // 53)) % 3 == 0).astype(np.int32)
    return {"heat": u, "cg": x, "mask": mask, "random": rng.integers(0, 256, nbytes, dtype=np.uint8)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--level", type=int, default=3)
    a = ap.parse_args()
    nbytes = (8 if a.quick else a.mib) << 20
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftkit-bench-z-") as tmp:
        for name, arr in datasets(nbytes).items():
            plain = Path(tmp) / f"{name}.ftk"
            write_file(plain, [(name, arr)], rank=0, level=1, ckpt_id=1, exec_id="bench", nranks=1,
                       fsync=False)
            for codec in ("none", "lz4", "zstd", "blosc"):
                dst = Path(tmp) / f"{name}-{codec}.ftk"
                t0 = time.perf_counter()
                if codec == "none":
                    copy_file(plain, dst, fsync=False)
                else:
                    compress_copy(plain, dst, codec, a.level)
                t1 = time.perf_counter()
                back = read_arrays(dst)[name]
                t2 = time.perf_counter()
                assert back.tobytes() == arr.tobytes()
                logical, stored = stored_size(dst)
                row = {"data": name, "codec": codec, "logical": logical, "stored": stored,
                       "ratio": round(logical / stored, 3),
                       "compress_MBps": round(logical / (t1 - t0) / 1e6, 1),
                       "decompress_MBps": round(logical / (t2 - t1) / 1e6, 1)}
                rows.append(row)
                print(f"{name:>7} {codec:>6}: ratio {row['ratio']:>7}  compress {row['compress_MBps']:>8} "
                      f"MB/s  read back {row['decompress_MBps']:>8} MB/s", flush=True)
                dst.unlink()
    print(json.dumps({"bench": "compression", "level": a.level, "bytes_per_set": nbytes, "rows": rows}))


if __name__ == "__main__":
    main()
