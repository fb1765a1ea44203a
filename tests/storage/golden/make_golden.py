"""Regenerate golden_v1.ftk (only when the format version changes: the committed file is a promise to users).

Run: python tests/storage/golden/make_golden.py
"""
from pathlib import Path

import numpy as np

from ftkit.storage.format import write_file


def golden_arrays() -> list[tuple[str, np.ndarray]]:
    return [
        ("u", np.linspace(-1.0, 1.0, 24, dtype="<f8").reshape(4, 6)),
        ("step", np.array([42], dtype="<i8")),
        ("mask", np.array([True, False, True], dtype="|b1")),
        ("z", np.array([1 + 2j, -3.5j], dtype="<c16")),
        ("big_endian", np.arange(5, dtype=">i4")),
        ("scalar", np.array(2.5, dtype="<f4")),
        ("empty", np.zeros((0, 3), dtype="<u2")),
    ]


if __name__ == "__main__":
    out = Path(__file__).with_name("golden_v1.ftk")
    info = write_file(out, golden_arrays(), rank=3, level=4, ckpt_id=17, exec_id="golden", nranks=8,
                      meta={"note": "ftkit format v1 golden file"}, fsync=False)
    print(out, info.size, info.digest)
