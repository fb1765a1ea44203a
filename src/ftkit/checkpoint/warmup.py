"""Codec warm-up: load the Reed-Solomon kernels before the first L3 checkpoint needs them.

The Reed-Solomon codec's kernels are compiled numba code, loaded at their first use (about 0.4 s of CPU per
process, far more than encoding a few MiB). When a job will take L3 checkpoints (``ckpt_l3`` set, or
``inline_l3 = 0``) with ``l3_code = rs``, the process that encodes -- the application rank, or the head --
loads them when it starts, so the first L3 checkpoint does not pay it (nor, with one post-processing in
flight at most, the checkpoint after it).
"""

from __future__ import annotations

import time

import numpy as np

from ..config import Config
from ..topology import Topology

__all__ = ["will_encode", "warm_up_codec"]


def will_encode(config: Config, topology: Topology) -> bool:
    """Whether this job is set up to take Reed-Solomon L3 checkpoints (so its encoders should warm up).

    True when the job has L3 groups, ``l3_code = rs``, and L3 is scheduled (``ckpt_l3``) or asynchronous
    (``inline_l3 = 0``): a job that only ever calls ``checkpoint(3)`` inline loads the codec at that call.
    """
    return (bool(topology.groups) and config.l3_code == "rs"
            and (bool(config.ckpt_l3) or not config.inline(3)))


def warm_up_codec(group_size: int) -> float:
    """Load the Reed-Solomon kernels and prepare the code of ``group_size`` members; return the seconds.

    Encodes one tiny block, so the first real encoding runs at full speed. Local (not collective).
    """
    from ..codec import RSCode

    t0 = time.perf_counter()
    k = max(2, int(group_size))
    data = [np.zeros(64, np.uint8) for _ in range(k)]
    RSCode(k, k).encode_into(data, [np.empty(64, np.uint8)], parity_indices=[0])
    return time.perf_counter() - t0
