"""Quick measurements on this machine that fit the parameters of the encoding model (eq. 1).

* ``e``: the codec's time per byte and per data block, from ``RSCode(k, k)`` encoding ``k`` blocks of ``z``
  bytes into ``k`` parity blocks (``k·k·z`` multiply-accumulated bytes), fitted over a few ``k``;
* ``r``, ``w``: reading and writing a temporary file block by block;
* ``a``, ``b``: an MPI ping-pong between two ranks (:mod:`ftkit.models._pingpong`), run through
  :func:`ftkit.launch.run_mpi`, fitted as ``one-way time = a + b·bytes``.

:func:`encode_group_files` is the in-process emulation of an L3 encoding (the work of all ``k`` members of a
group, block by block), which the benchmark times against the model's prediction.

Every timing keeps the fastest of a few repeats: on a shared machine the minimum estimates the cost of the
work itself, while a median drifts with whatever else runs (the benchmark times the emulation the same way).
The timer is wall-clock time by default; ``clock=time.process_time`` (CPU time of this process, which the
single-threaded codec and page-cache I/O consume one for one on a quiet machine) leaves out the time spent
waiting for a core while other jobs run. The network measurement is always wall-clock.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelError
from .encoding import DEFAULT_BLOCK, EncodingModel, fit_linear, fit_proportional

#: A timer returning seconds (``time.perf_counter`` or ``time.process_time``).
Clock = Callable[[], float]

# Distinct stripes cycled through, and encodes per timed pass, in the codec measurement.
_STRIPES = 4
_PASS = 8

__all__ = ["Measurement", "measure_codec", "measure_storage", "measure_network", "measure_model",
           "measure_fixed", "encode_group_files"]


@dataclass
class Measurement:
    """A fitted :class:`EncodingModel` with the raw measurements behind it (JSON-ready)."""

    model: EncodingModel
    raw: dict[str, Any] = field(default_factory=dict)


def _rs_code(k: int):  # type: ignore[no-untyped-def]
    try:
        from ..codec import RSCode
    except ImportError as exc:
        raise ModelError(f"the Reed-Solomon codec is not available ({exc}): cannot measure e; "
                         f"pass --e instead") from exc
    return RSCode(k, k)


def measure_codec(group_sizes: Sequence[int] = (4, 8, 16), block_size: int = DEFAULT_BLOCK, repeats: int = 5,
                  seed: int = 0, *, clock: Clock = time.perf_counter) -> tuple[float, list[list[float]]]:
    """Fit ``e`` (s/byte per data block) from ``RSCode(k, k)`` encoding ``k`` blocks of ``block_size`` bytes.

    One timed pass encodes :data:`_PASS` different stripes in turn (so the data is not always the same,
    cache-hot buffer, as it is not during an L3 encoding); the fastest of ``repeats`` passes is kept.
    ``clock`` is the timer (see the module docstring).

    Returns
    -------
    (e, points)
        The fitted ``e`` and the points ``[k, block_size, seconds per encode]``.

    Raises
    ------
    ModelError
        If the codec is missing or the arguments are out of range.
    """
    if repeats < 1 or block_size < 1 or not group_sizes:
        raise ModelError("measure_codec needs repeats >= 1, block_size >= 1 and at least one group size")
    rng = np.random.default_rng(seed)
    points, xs, ys = [], [], []
    for k in group_sizes:
        code = _rs_code(k)
        stripes = [list(rng.integers(0, 256, (k, block_size), dtype=np.uint8)) for _ in range(_STRIPES)]
        parity = list(np.empty((k, block_size), dtype=np.uint8))
        code.encode_into(stripes[0], parity)  # compile / warm up
        passes = []
        for _ in range(repeats):
            start = clock()
            for i in range(_PASS):
                code.encode_into(stripes[i % _STRIPES], parity)
            passes.append((clock() - start) / _PASS)
        seconds = min(passes)
        points.append([k, block_size, seconds])
        xs.append(float(k * k * block_size))
        ys.append(seconds)
    return fit_proportional(xs, ys), points


def measure_storage(size: int = 64 << 20, block_size: int = DEFAULT_BLOCK,
                    directory: str | os.PathLike[str] | None = None, *, files: int = 4, fsync: bool = False,
                    repeats: int = 3, clock: Clock = time.perf_counter) -> tuple[float, float]:
    """Return ``(r, w)``: seconds per byte to read and write files block by block.

    ``files`` new files of ``size / files`` bytes each are written (and fsynced if ``fsync``) then read back,
    as L3 reads the fresh L1 files of a group and writes new parity files; each pass is timed as a whole,
    ``repeats`` times, and the fastest kept. The files are removed before each pass (untimed) and at the
    end: rewriting a file in place is much slower once the kernel has started writing its pages back, and
    is not what a checkpoint does.

    Raises
    ------
    ModelError
        If the directory cannot be written or the arguments are out of range.
    """
    if files < 1 or block_size < 1 or size < files * block_size or repeats < 1:
        raise ModelError(f"measure_storage needs size >= files * block_size >= 1 "
                         f"(got {size}, {files}, {block_size})")
    block = np.random.default_rng(1).integers(0, 256, block_size, dtype=np.uint8)
    buf = np.empty(block_size, dtype=np.uint8)
    nblocks = size // (files * block_size)
    reads, writes = [], []
    try:
        workdir = Path(tempfile.mkdtemp(prefix="ftkit-measure-", dir=directory))
    except OSError as exc:
        where = directory or tempfile.gettempdir()
        raise ModelError(f"cannot create a temporary directory in {where}: {exc}") from exc
    names = [workdir / f"f{i}" for i in range(files)]
    try:
        for _ in range(repeats):
            for name in names:
                name.unlink(missing_ok=True)
            start = clock()
            for name in names:
                with open(name, "wb") as f:
                    for _ in range(nblocks):
                        f.write(block.data)
                    if fsync:
                        f.flush()
                        os.fsync(f.fileno())
            writes.append(clock() - start)
            start = clock()
            for name in names:
                with open(name, "rb") as f:
                    while f.readinto(buf.data):
                        pass
            reads.append(clock() - start)
    except OSError as exc:
        raise ModelError(f"file read/write measurement failed in {workdir}: {exc}") from exc
    finally:
        for name in names:
            name.unlink(missing_ok=True)
        workdir.rmdir()
    total = files * nblocks * block_size
    return min(reads) / total, min(writes) / total


def measure_network(sizes: Sequence[int] = (8, 65536, 1 << 20, 4 << 20), *, timeout: float = 120.0,
                    repeats: int = 10, rounds: int = 5) -> tuple[float, float, list[list[float]]]:
    """Fit ``(a, b)`` from an MPI ping-pong between 2 ranks; return ``(a, b, [[bytes, seconds], ...])``.

    Raises
    ------
    ModelError
        If the job fails, times out or prints no result.
    """
    from ..launch import run_mpi

    cmd = [sys.executable, "-m", "ftkit.models._pingpong", "--sizes", ",".join(str(int(s)) for s in sizes),
           "--repeats", str(repeats), "--rounds", str(rounds)]
    result = run_mpi(2, cmd, timeout=timeout)
    if result.timed_out:
        raise ModelError(f"the MPI ping-pong did not finish within {timeout:g} s: raise --timeout")
    points = None
    for line in result.stdout.splitlines():
        if line.startswith("{") and "pingpong" in line:
            points = json.loads(line)["pingpong"]
    if result.returncode != 0 or points is None:
        raise ModelError(f"the MPI ping-pong failed (exit {result.returncode}): "
                         f"{result.stderr.strip()[-500:]}")
    a, b = fit_linear([float(p[0]) for p in points], [float(p[1]) for p in points])
    return a, b, points


def measure_model(*, block_size: int = DEFAULT_BLOCK, directory: str | os.PathLike[str] | None = None,
                  timeout: float = 120.0, group_sizes: Sequence[int] = (4, 8, 16),
                  network: bool = True, clock: Clock = time.perf_counter) -> Measurement:
    """Measure ``e``, ``r``, ``w`` (and ``a``, ``b`` if ``network``) and return the fitted model.

    Raises
    ------
    ModelError
        If a measurement fails.
    """
    e, codec_points = measure_codec(group_sizes, block_size, clock=clock)
    r, w = measure_storage(max(64 << 20, 4 * block_size), block_size, directory, clock=clock)
    a = b = 0.0
    net_points: list[list[float]] = []
    if network:
        a, b, net_points = measure_network(timeout=timeout)
    model = EncodingModel(e=e, r=r, w=w, a=a, b=b, block_size=block_size)
    return Measurement(model, {"codec": codec_points, "storage": {"r": r, "w": w}, "pingpong": net_points})


def measure_fixed(group_sizes: Sequence[int] = (4, 8, 16), block_size: int = DEFAULT_BLOCK,
                  directory: str | os.PathLike[str] | None = None, *, repeats: int = 20,
                  clock: Clock = time.perf_counter) -> tuple[float, list[list[float]]]:
    """Fit ``f`` (ftkit's fixed seconds per member and per encoding, eq. (1f) of :mod:`.encoding`).

    :func:`encode_group_files` is timed on ``k`` empty data files (open ``k`` files, create and close ``k``
    parity files, no block), fastest of ``repeats``, for each ``k``; ``f`` is the least-squares slope of
    that time against ``k`` through the origin (seconds per member).

    Returns
    -------
    (f, points)
        The fitted ``f`` and the points ``[k, seconds per group encoding]``.

    Raises
    ------
    ModelError
        If the directory cannot be written or the arguments are out of range.
    """
    if repeats < 1 or not group_sizes or min(group_sizes) < 2:
        raise ModelError("measure_fixed needs repeats >= 1 and group sizes >= 2")
    try:
        workdir = Path(tempfile.mkdtemp(prefix="ftkit-measure-", dir=directory))
    except OSError as exc:
        where = directory or tempfile.gettempdir()
        raise ModelError(f"cannot create a temporary directory in {where}: {exc}") from exc
    kmax = max(group_sizes)
    data = [workdir / f"d{j}" for j in range(kmax)]
    parity = [workdir / f"p{j}" for j in range(kmax)]
    points = []
    try:
        for path in data:
            path.write_bytes(b"")
        for k in group_sizes:
            encode_group_files(data[:k], parity[:k], block_size, clock=clock)  # warm-up
            seconds = min(encode_group_files(data[:k], parity[:k], block_size, clock=clock)
                          for _ in range(repeats))
            points.append([k, seconds])
    except OSError as exc:
        raise ModelError(f"fixed-cost measurement failed in {workdir}: {exc}") from exc
    finally:
        for path in data + parity:
            path.unlink(missing_ok=True)
        workdir.rmdir()
    return fit_proportional([float(p[0]) for p in points], [p[1] for p in points]), points


def encode_group_files(data_paths: Sequence[str | os.PathLike[str]],
                       parity_paths: Sequence[str | os.PathLike[str]],
                       block_size: int = DEFAULT_BLOCK, *, clock: Clock = time.perf_counter) -> float:
    """Encode ``k`` members' files into ``k`` parity files block by block, as L3 does; return the seconds.

    For each block offset the ``k`` data blocks are read, ``RSCode(k, k)`` computes the ``k`` parity blocks
    and each is appended to its member's parity file. Files shorter than the longest are zero-padded, as
    the codec works on equal lengths. This is the work of a whole group done in one process, i.e. ``k``
    times one member's share of eq. (1) without the network terms. Existing parity files are removed before
    the clock starts, so they are written as new files (as a new checkpoint's are).

    Raises
    ------
    ModelError
        If the lists differ in length, are shorter than 2, or a file cannot be read or written.
    """
    k = len(data_paths)
    if k < 2 or len(parity_paths) != k:
        raise ModelError(f"need k >= 2 data files and as many parity files, got {k} and {len(parity_paths)}")
    code = _rs_code(k)
    data = np.zeros((k, block_size), dtype=np.uint8)
    parity = np.empty((k, block_size), dtype=np.uint8)
    try:
        for path in parity_paths:
            Path(path).unlink(missing_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot replace parity file: {exc}") from exc
    start = clock()
    try:
        sources = [open(p, "rb") for p in data_paths]
        sinks = [open(p, "wb") for p in parity_paths]
        try:
            while True:
                longest = 0
                for j, f in enumerate(sources):
                    got = f.readinto(data[j].data)
                    if got < block_size:
                        data[j, got:] = 0
                    longest = max(longest, got)
                if longest == 0:
                    break
                code.encode_into(list(data[:, :longest]), list(parity[:, :longest]))
                for j, sink in enumerate(sinks):
                    sink.write(parity[j, :longest].data)
        finally:
            for handle in [*sources, *sinks]:
                handle.close()
    except OSError as exc:
        raise ModelError(f"L3 encoding emulation failed: {exc}") from exc
    return clock() - start
