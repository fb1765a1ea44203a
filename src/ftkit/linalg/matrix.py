"""A dense matrix distributed 2-D block-cyclically over a :class:`ProcessGrid`, stored as ScaLAPACK stores it.

Each process holds its piece in ``local``: a Fortran-order (column-major) float64 (or float32) array of shape
``(numroc(M, MB, myrow, RSRC, nprow), numroc(N, NB, mycol, CSRC, npcol))``, local entries in increasing
global order, leading dimension ``desc.lld = max(1, local rows)``. This is exactly ScaLAPACK's local array,
so it could be handed to a ScaLAPACK routine unchanged.
"""

from __future__ import annotations

import numpy as np

from ..errors import DescriptorError, GridError
from .descriptor import BlockCyclic1D, Descriptor, block_cyclic, indxg2l, indxg2p, indxl2g
from .grid import ProcessGrid

__all__ = ["DistributedMatrix", "segment_bounds"]


def segment_bounds(indices: np.ndarray, offset: int, nb: int, bs: int | None = None) -> np.ndarray:
    """Cut this process's local indices of a distributed dimension into segments.

    A segment is a run of consecutive indices inside one distribution block, at most ``bs`` long (the
    checksum blocks of :mod:`ftkit.linalg.checksums`; ``bs=None``: whole runs of a distribution block, as
    PDSYRK's tiles take them).

    Parameters
    ----------
    indices
        Increasing submatrix indices this process owns (``BlockCyclic1D.indices_on(p)``).
    offset
        Global index of submatrix index 0 (``ia`` / ``ic``).
    nb
        Distribution block size of the dimension.
    bs
        Longest segment (>= 1), or ``None`` for ``nb``.

    Returns
    -------
    numpy.ndarray
        ``bounds`` (int64, length ``nseg + 1``): segment ``s`` is local positions ``bounds[s]:bounds[s+1]``.

    Raises
    ------
    DescriptorError
        If ``bs < 1`` (pass a positive segment length, or None for whole distribution blocks).
    """
    bs = nb if bs is None else bs
    if bs < 1:
        raise DescriptorError(f"segment length bs must be >= 1, got {bs}: pass a positive length or None")
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return np.zeros(1, dtype=np.int64)
    g = idx + int(offset)
    key = (g // nb) * (nb // bs + 2) + (g % nb) // bs
    # A new segment starts where the key changes or the indices jump (a gap means another owner in between).
    new = np.empty(idx.size, dtype=bool)
    new[0] = True
    new[1:] = (key[1:] != key[:-1]) | (np.diff(idx) != 1)
    return np.append(np.flatnonzero(new), idx.size).astype(np.int64)


class DistributedMatrix:
    """This process's block-cyclic piece of a distributed matrix plus its descriptor.

    Parameters
    ----------
    grid
        The process grid.
    desc
        The descriptor; ``desc.context`` must be ``grid.context``.
    local
        The local array, F-order float64 of the shape ``desc.local_shape(...)`` (copied to that if needed);
        a float32 array stays float32 (the single-precision routines, as PSGEMM's matrices).

    Raises
    ------
    DescriptorError
        If the descriptor does not fit the grid or the local array has the wrong shape.
    """

    def __init__(self, grid: ProcessGrid, desc: Descriptor, local: np.ndarray) -> None:
        if not grid.in_grid:
            raise GridError("this rank is not part of the process grid; only grid ranks hold matrices")
        if desc.context != grid.context:
            raise DescriptorError(f"descriptor context {desc.context} is not the grid's ({grid.context})")
        if desc.rsrc >= grid.nprow or desc.csrc >= grid.npcol:
            raise DescriptorError(f"source process ({desc.rsrc}, {desc.csrc}) is outside the "
                                  f"{grid.nprow} x {grid.npcol} grid")
        shape = desc.local_shape(grid.myrow, grid.mycol, grid.nprow, grid.npcol)
        local = np.asfortranarray(local, dtype=_dtype_of(local))
        if local.shape != shape:
            raise DescriptorError(f"local array has shape {local.shape}, the descriptor needs {shape} on "
                                  f"process ({grid.myrow}, {grid.mycol})")
        if desc.lld < max(1, shape[0]):
            raise DescriptorError(f"lld {desc.lld} is smaller than the {shape[0]} local rows")
        self.grid, self.desc, self.local = grid, desc, local

    # ----------------------------------------------------------------- construction
    @staticmethod
    def _descriptor(grid: ProcessGrid, m: int, n: int, mb: int, nb: int, rsrc: int, csrc: int) -> Descriptor:
        for name, v in (("m", m), ("n", n), ("mb", mb), ("nb", nb), ("rsrc", rsrc), ("csrc", csrc)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise DescriptorError(f"{name} must be an integer, got {v!r}")
        if not (0 <= rsrc < grid.nprow and 0 <= csrc < grid.npcol):
            raise DescriptorError(f"rsrc={rsrc}, csrc={csrc} must be process coordinates of the "
                                  f"{grid.nprow} x {grid.npcol} grid (0-based)")
        d = Descriptor(int(m), int(n), int(mb), int(nb), int(rsrc), int(csrc), 1, grid.context)
        rows = d.local_shape(grid.myrow, grid.mycol, grid.nprow, grid.npcol)[0]
        return Descriptor(d.m, d.n, d.mb, d.nb, d.rsrc, d.csrc, max(1, rows), grid.context)

    @classmethod
    def zeros(cls, grid: ProcessGrid, m: int, n: int, *, mb: int = 64, nb: int = 64, rsrc: int = 0,
              csrc: int = 0, dtype: type | np.dtype = np.float64) -> DistributedMatrix:
        """Return an ``m`` x ``n`` distributed matrix of zeros with ``mb`` x ``nb`` blocks (float64 or
        float32)."""
        d = cls._descriptor(grid, m, n, mb, nb, rsrc, csrc)
        shape = d.local_shape(grid.myrow, grid.mycol, grid.nprow, grid.npcol)
        return cls(grid, d, np.zeros(shape, dtype=_dtype_of(np.zeros(0, dtype)), order="F"))

    @classmethod
    def from_global(cls, grid: ProcessGrid, a: np.ndarray, *, mb: int = 64, nb: int = 64, rsrc: int = 0,
                    csrc: int = 0) -> DistributedMatrix:
        """Distribute a global 2-D array that every grid rank holds (each keeps only its blocks); a float32
        array gives a float32 matrix, anything else float64."""
        a = np.asarray(a)
        a = a.astype(_dtype_of(a), copy=False)
        if a.ndim != 2:
            raise DescriptorError(f"from_global needs a 2-D array, got shape {a.shape}")
        d = cls._descriptor(grid, a.shape[0], a.shape[1], mb, nb, rsrc, csrc)
        rows, cols = cls._global_indices(grid, d)
        return cls(grid, d, np.asfortranarray(a[np.ix_(rows, cols)]))

    @classmethod
    def random(cls, grid: ProcessGrid, m: int, n: int, *, mb: int = 64, nb: int = 64, seed: int = 0,
               rsrc: int = 0, csrc: int = 0) -> DistributedMatrix:
        """Return a matrix of uniform [-1, 1) entries, the same for a given seed whatever the grid or blocks.

        Entry ``(i, j)`` depends only on ``seed``, ``i``, ``j`` and ``n``: each process generates the
        global rows it owns (row ``i`` from a generator seeded ``(seed, i)``), so no global array is formed.
        """
        d = cls._descriptor(grid, m, n, mb, nb, rsrc, csrc)
        rows, cols = cls._global_indices(grid, d)
        local = np.empty((rows.size, cols.size), order="F")
        for li, gi in enumerate(rows):
            row = np.random.default_rng([seed, int(gi)]).uniform(-1.0, 1.0, n)
            local[li, :] = row[cols]
        return cls(grid, d, local)

    # ----------------------------------------------------------------- index maps
    @staticmethod
    def _global_indices(grid: ProcessGrid, d: Descriptor) -> tuple[np.ndarray, np.ndarray]:
        lr, lc = d.local_shape(grid.myrow, grid.mycol, grid.nprow, grid.npcol)
        rows = indxl2g(np.arange(lr, dtype=np.int64), d.mb, grid.myrow, d.rsrc, grid.nprow)
        cols = indxl2g(np.arange(lc, dtype=np.int64), d.nb, grid.mycol, d.csrc, grid.npcol)
        return rows, cols

    def global_rows(self) -> np.ndarray:
        """Global row index of each local row."""
        return self._global_indices(self.grid, self.desc)[0]

    def global_cols(self) -> np.ndarray:
        """Global column index of each local column."""
        return self._global_indices(self.grid, self.desc)[1]

    def row_map(self, i0: int, m: int) -> BlockCyclic1D:
        """Return the row map of the submatrix rows ``i0 .. i0+m-1`` (over process rows)."""
        return block_cyclic(m, self.desc.mb, i0, self.desc.rsrc, self.grid.nprow)

    def col_map(self, j0: int, n: int) -> BlockCyclic1D:
        """Return the column map of the submatrix columns ``j0 .. j0+n-1`` (over process columns)."""
        return block_cyclic(n, self.desc.nb, j0, self.desc.csrc, self.grid.npcol)

    def local_view(self, i0: int, j0: int, m: int, n: int) -> np.ndarray:
        """Return a view of this process's part of the submatrix ``(i0:i0+m, j0:j0+n)`` (in local order)."""
        r = self.row_map(i0, m).local_range(self.grid.myrow)
        c = self.col_map(j0, n).local_range(self.grid.mycol)
        return self.local[r, c]

    def global_boxes(self) -> list[tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]:
        """Return this process's blocks as boxes ``(local offset, global offset, shape)`` of ``local``.

        Blocks adjacent both locally and globally are merged (a 1 x P grid holds whole columns of rows), so
        the boxes tile ``local`` and, over all grid processes, the global matrix exactly once. Used to
        checkpoint the matrix with its layout (``Checkpointer.protect_matrix``).
        """
        g, d = self.grid, self.desc
        rows = _runs(self.local.shape[0], d.mb, g.myrow, d.rsrc, g.nprow)
        cols = _runs(self.local.shape[1], d.nb, g.mycol, d.csrc, g.npcol)
        return [((lr, lc), (gr, gc), (nr, nc)) for lr, gr, nr in rows for lc, gc, nc in cols]

    @property
    def dtype(self) -> np.dtype:
        """Element type of the local array (float64 or float32)."""
        return self.local.dtype

    @property
    def shape(self) -> tuple[int, int]:
        """Global shape ``(M, N)``."""
        return (self.desc.m, self.desc.n)

    def __repr__(self) -> str:
        d = self.desc
        return (f"DistributedMatrix({d.m}x{d.n}, blocks {d.mb}x{d.nb}, src ({d.rsrc},{d.csrc}), "
                f"grid {self.grid.nprow}x{self.grid.npcol}, local {self.local.shape})")

    # ----------------------------------------------------------------- whole-matrix ops
    def copy(self) -> DistributedMatrix:
        """Return a deep copy (same grid and descriptor, new local array)."""
        return DistributedMatrix(self.grid, self.desc, self.local.copy(order="F"))

    def to_global(self, root: int | None = None) -> np.ndarray | None:
        """Gather the whole matrix (collective).

        Parameters
        ----------
        root
            Grid rank that receives the matrix; ``None`` gives it to every rank.

        Returns
        -------
        numpy.ndarray or None
            The ``M`` x ``N`` C-order array, or ``None`` on non-root ranks when ``root`` is given.
        """
        comm = self.grid.comm
        if root is not None and not 0 <= root < self.grid.size:
            raise GridError(f"root {root} is not a rank of the {self.grid.size}-rank grid")
        pieces = comm.allgather(self.local) if root is None else comm.gather(self.local, root=root)
        if pieces is None:
            return None
        out = np.empty(self.shape, dtype=self.local.dtype)
        g, d = self.grid, self.desc
        for rank, piece in enumerate(pieces):
            pr, pc = g.coords(rank)
            lr, lc = d.local_shape(pr, pc, g.nprow, g.npcol)
            rows = indxl2g(np.arange(lr, dtype=np.int64), d.mb, pr, d.rsrc, g.nprow)
            cols = indxl2g(np.arange(lc, dtype=np.int64), d.nb, pc, d.csrc, g.npcol)
            out[np.ix_(rows, cols)] = piece
        return out

    # ----------------------------------------------------------------- element access (for tests)
    def owner(self, i: int, j: int) -> tuple[int, int]:
        """Return the process coordinates owning global entry ``(i, j)``."""
        self._check_index(i, j)
        d, g = self.desc, self.grid
        return int(indxg2p(i, d.mb, d.rsrc, g.nprow)), int(indxg2p(j, d.nb, d.csrc, g.npcol))

    def _check_index(self, i: int, j: int) -> None:
        if not (0 <= i < self.desc.m and 0 <= j < self.desc.n):
            raise IndexError(f"entry ({i}, {j}) is outside the {self.desc.m} x {self.desc.n} matrix")

    def _local_index(self, i: int, j: int) -> tuple[int, int]:
        d, g = self.desc, self.grid
        return int(indxg2l(i, d.mb, g.nprow)), int(indxg2l(j, d.nb, g.npcol))

    def __getitem__(self, key: tuple[int, int]) -> float:
        """Return entry ``(i, j)`` on every rank (collective: the owner broadcasts it)."""
        i, j = key
        pr, pc = self.owner(i, j)
        value = None
        if (pr, pc) == (self.grid.myrow, self.grid.mycol):
            value = float(self.local[self._local_index(i, j)])
        return float(self.grid.comm.bcast(value, root=self.grid.rank_of(pr, pc)))

    def __setitem__(self, key: tuple[int, int], value: float) -> None:
        """Set entry ``(i, j)`` (every rank calls with the same arguments; only the owner stores)."""
        i, j = key
        if self.owner(i, j) == (self.grid.myrow, self.grid.mycol):
            self.local[self._local_index(i, j)] = value

    def get_local(self, i: int, j: int) -> float | None:
        """Return entry ``(i, j)`` if this process owns it, else ``None`` (not collective)."""
        if self.owner(i, j) != (self.grid.myrow, self.grid.mycol):
            return None
        return float(self.local[self._local_index(i, j)])



def _dtype_of(a: np.ndarray) -> type:
    """float32 for a float32 array (single precision kept), float64 for anything else."""
    return np.float32 if a.dtype == np.float32 else np.float64


def _runs(nloc: int, nb: int, iproc: int, isrc: int, nprocs: int) -> list[tuple[int, int, int]]:
    """``(local start, global start, length)`` of the longest local ranges also contiguous globally."""
    out: list[tuple[int, int, int]] = []
    for ls in range(0, nloc, nb):
        gs, n = int(indxl2g(ls, nb, iproc, isrc, nprocs)), min(nb, nloc - ls)
        if out and out[-1][0] + out[-1][2] == ls and out[-1][1] + out[-1][2] == gs:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
        else:
            out.append((ls, gs, n))
    return out
