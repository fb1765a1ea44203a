"""A systematic linear code over GF(2^8) given by its parity matrix: the engine behind RSCode and XORCode.

Encoding applies the parity matrix ``C`` (m x k); rebuilding picks ``k`` available fragments (data first),
inverts the matching rows of the generator ``[I; C]`` and applies ``G[wanted] @ inverse``. Each matrix is
prepared once and cached on the code object: as ISA-L's tables where a libisal is found
(:mod:`ftkit.codec._isal`), else as a block schedule for ftkit's numba kernels (:mod:`ftkit.codec._schedule`,
imported only then). Both give the same bytes.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import CodecError
from . import _isal, gf256
from .base import ErasureCode, check_data, check_fragments, check_indices, check_outputs

__all__ = ["LinearCode", "BLOCK_BYTES"]

#: Bytes per fragment processed per block: the blocks of all k + m fragments should stay in L1/L2 together
#: while the schedule runs over them (measured best of 1-8 KiB on a Xeon with 48 KiB L1d).
BLOCK_BYTES = 2048


def _address(array: np.ndarray) -> int:
    # The data address of a checked fragment (non-empty). ctypes' from_buffer is ~4x cheaper than
    # ``array.ctypes.data`` (0.6 vs 2 us: this runs k + m times per call) but needs a writeable buffer.
    if array.flags.writeable:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))  # type: ignore[arg-type]
    return int(array.ctypes.data)


def _check_no_overlap(inputs: list[int], outputs: list[int], nbytes: int) -> None:
    # Outputs are written block by block while inputs are still being read: an output overlapping an input
    # or another output would silently give wrong parity. All fragments have ``nbytes``, so two overlap iff
    # their addresses are less than ``nbytes`` apart, and an output overlapping anything overlaps one of its
    # neighbours in address order: one sort, O((k + m) log(k + m)).
    spans = sorted([(a, 0, j) for j, a in enumerate(inputs)] + [(a, 1, i) for i, a in enumerate(outputs)])
    for lo, hi in zip(spans, spans[1:], strict=False):
        if (lo[1] or hi[1]) and hi[0] - lo[0] < nbytes:
            out, other = (lo, hi) if lo[1] else (hi, lo)
            what = f"parity output {other[2]}" if other[1] else f"data fragment {other[2]}"
            raise CodecError(f"parity output {out[2]} overlaps {what} in memory; "
                             "give separate output buffers")


def _compile(matrix: np.ndarray) -> tuple[object, np.ndarray]:
    """Prepare ``matrix`` for :func:`_apply`: (libisal, its tables), or (None, a numba block schedule)."""
    lib = _isal.library()
    if lib is not None:
        return lib, _isal.tables(lib, matrix)
    from . import _schedule

    return None, _schedule.compile_matrix(matrix)


def _apply(compiled: tuple[object, np.ndarray], inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
           nbytes: int, check_overlap: bool = False) -> None:
    if nbytes == 0 or not outputs:
        return
    # ``inputs`` and ``outputs`` stay referenced by the caller for the duration of the call, so the raw
    # addresses the kernel uses stay valid.
    ins = [_address(a) for a in inputs]
    outs = [_address(a) for a in outputs]
    if check_overlap:
        _check_no_overlap(ins, outs, nbytes)
    lib, prepared = compiled
    if lib is not None:
        _isal.apply(lib, prepared, ins, outs, nbytes)  # type: ignore[arg-type]
        return
    from . import _kernels

    _kernels.run_schedule(prepared, np.array(ins + outs, dtype=np.int64), nbytes, BLOCK_BYTES)


class LinearCode(ErasureCode):
    """Systematic code with generator ``[I_k; parity_matrix]`` over GF(2^8).

    Parameters
    ----------
    parity_matrix : numpy.ndarray
        uint8 array of shape (m, k); the caller guarantees every square submatrix is invertible (MDS).
    """

    def __init__(self, parity_matrix: np.ndarray) -> None:
        c = np.array(parity_matrix, dtype=np.uint8)
        if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] < 1:
            raise CodecError(f"parity matrix must be 2-D and non-empty, got shape {c.shape}")
        self.m, self.k = (int(v) for v in c.shape)
        self._parity = c
        self._generator = np.concatenate([np.eye(self.k, dtype=np.uint8), c], axis=0)
        self._schedules: dict[tuple, tuple[object, np.ndarray]] = {}
        self._lock = threading.Lock()

    @property
    def parity_matrix(self) -> np.ndarray:
        """The ``m x k`` parity matrix (a copy)."""
        return self._parity.copy()

    @property
    def generator_matrix(self) -> np.ndarray:
        """The ``(k + m) x k`` generator ``[I_k; C]`` (a copy)."""
        return self._generator.copy()

    def _schedule_for(self, key: tuple, build) -> tuple[object, np.ndarray]:
        key = (os.environ.get(_isal.ISAL_ENV, ""), *key)   # the backend is part of what was prepared
        sched = self._schedules.get(key)
        if sched is None:
            sched = _compile(build())
            with self._lock:
                self._schedules.setdefault(key, sched)
        return sched

    def encode_into(
        self,
        data: Sequence[np.ndarray],
        parity_out: Sequence[np.ndarray],
        parity_indices: Sequence[int] | None = None,
    ) -> None:
        """Compute parity fragments into caller-provided arrays (see :meth:`ErasureCode.encode_into`).

        Raises
        ------
        CodecError
            On a wrong number of fragments, bad fragment, length mismatch or bad parity index.
        """
        items, nbytes = check_data(data, self.k)
        if parity_indices is None:
            rows = list(range(self.m))
        else:
            rows = check_indices(list(parity_indices), self.m, "parity index")
        outs = check_outputs(parity_out, len(rows), nbytes, "parity output")
        key = ("enc", tuple(rows))
        sched = self._schedule_for(key, lambda: self._parity[rows])
        _apply(sched, items, outs, nbytes, check_overlap=True)

    def reconstruct(self, fragments: Mapping[int, np.ndarray], wanted: Sequence[int]) -> list[np.ndarray]:
        """Rebuild the fragments ``wanted`` from any ``k`` fragments (see :meth:`ErasureCode.reconstruct`).

        Raises
        ------
        CodecError
            If fewer than ``k`` fragments are given, or an index, fragment or length is wrong.
        """
        frags, nbytes = check_fragments(fragments, self.k, self.m)
        want = check_indices(list(wanted), self.k + self.m, "wanted index")
        missing = [w for w in want if w not in frags]
        outs = [np.empty(nbytes, dtype=np.uint8) for _ in missing]
        self._rebuild(frags, missing, outs, nbytes, check_overlap=False)
        rebuilt = dict(zip(missing, outs, strict=True))
        return [frags[w] if w in frags else rebuilt[w] for w in want]

    def reconstruct_into(self, fragments: Mapping[int, np.ndarray], wanted: Sequence[int],
                         out: Sequence[np.ndarray]) -> None:
        """Rebuild the fragments ``wanted`` into caller-provided arrays (see
        :meth:`ErasureCode.reconstruct_into`).

        Raises
        ------
        CodecError
            If fewer than ``k`` fragments are given, a wanted fragment is among them, an output overlaps a
            fragment, or an index, fragment, output or length is wrong.
        """
        frags, nbytes = check_fragments(fragments, self.k, self.m)
        want = check_indices(list(wanted), self.k + self.m, "wanted index")
        given = [w for w in want if w in frags]
        if given:
            raise CodecError(f"wanted fragments {given} are given: reconstruct_into rebuilds missing "
                             "fragments only (use reconstruct, or leave them out of wanted)")
        outs = check_outputs(out, len(want), nbytes, "output")
        self._rebuild(frags, want, outs, nbytes, check_overlap=True)

    def _rebuild(self, frags: dict[int, np.ndarray], missing: list[int], outs: list[np.ndarray], nbytes: int,
                 check_overlap: bool) -> None:
        if not missing:
            return
        chosen = sorted(frags)[: self.k]  # data indices sort first, so present data is used as is
        key = ("rec", tuple(chosen), tuple(missing))

        def build() -> np.ndarray:
            inverse = gf256.mat_inv(self._generator[chosen])
            return gf256.mat_mul(self._generator[missing], inverse)

        sched = self._schedule_for(key, build)
        _apply(sched, [frags[i] for i in chosen], outs, nbytes, check_overlap=check_overlap)
