"""The checksums a triangular solve must satisfy, behind :func:`~ftkit.linalg.abft.level3.ft_pdtrsm`.

After the sweep (:mod:`ftkit.linalg.pblas._tri_sweep`) has overwritten ``W`` (``ka x nw``, ``W0 = alpha B``)
with ``X = inv(T) W0``, every block ``(I, J)`` (row segment ``I`` of ``T``'s rows, column segment ``J`` of
``W``'s columns, at most ``bs`` long, never straddling a distribution block) must satisfy

    ``e_I^T T X e_J = e_I^T W0 e_J``.

Both sides come from checksums: the column sums of ``T``'s row segments (plain, absolute and row-weighted,
``nI x ka``, taken in the pass that makes ``T``, before it is used), the row sums of ``X``'s column segments
(plain, absolute, column-weighted, ``ka x nJ``) and the block sums of ``W0`` (``nI x nJ``), all of them
``1/bs`` of the data. The plain, row-weighted (``w_I^T T X e_J = w_I^T W0 e_J``) and column-weighted
equations are checked; the rigorous threshold of the plain one is ``2 gamma(2 ka + r + c + 8) (e_I^T |T|
|X| e_J + e_I^T |W0| e_J)`` plus an underflow floor (a computed substitution satisfies ``|T X - W0| <=
gamma_ka |T||X|`` componentwise, in any summation order; the rest covers the rounding of the checksums), the
weighted ones get the largest weight times it. ``"statistical"`` uses ``STAT_LAMBDA u sqrt(2 ka + r + c)``
instead (never above the rigorous one); a relative ``tol`` ``t`` uses ``t``.

Where the products are taken. The sum over ``k`` in ``e_I^T T X e_J`` is cut by the process row that owns
``X``'s row ``k``: process ``(p, q)`` multiplies the ``T`` column sums of *its* rows' indices, for every row
segment (``nI x ka/nprow``, sent to it by :meth:`SolveChecksums.make_triangle` while the solve runs: they
depend on ``T`` only), by the row sums of its own piece of ``X``, and the processes exchange only these
partial products and ``W0``'s block sums (``nI x nJ`` each, one ``Iallgatherv``). Every process adds the
partial products in grid-rank order, so every process holds the same residuals bit for bit and decides alike
without a broadcast. (Reducing all of ``T``'s and ``X``'s checksums over the grid instead moves
``nI x ka + ka x nJ`` values per kind to every process, after the solve, in collectives whose latency grows
with the grid.)

Correction. A wrong element ``X_ij + d`` makes the plain residuals of column segment ``J(j)`` equal to
``(e_I^T T)_i d`` in every row segment, the row-weighted ones ``(w_I^T T)_i d``, the column-weighted ones
``(j - j0 + 1)`` times the plain ones: the column comes from that ratio, the row is the only one whose two
checksum columns predict every segment's residuals, and ``d`` follows (O(1) per block on the data; see
:meth:`SolveChecksums.locate`, which reads all of ``T``'s column sums: :meth:`SolveChecksums.gather_t_sums`
collects them, only when a block is flagged). Anything else (a wrong right-hand side or triangle makes many
elements wrong; a pattern several rows explain; one row segment only) is corrected by solving the flagged
column segments again from the saved ``W0``, with ``T`` rebuilt from A (so a corrupted copy of ``T`` is
replaced too); then everything is checked again. A block still inconsistent means A itself is corrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from mpi4py import MPI

from ..._wait import wait_requests
from .. import checksums
from ..checksums._kernels import encode_cols_into
from ..checksums._tri_sums import copy_block_sums, triangle_rows_from, triangle_rows_into
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from ..matrix import DistributedMatrix
from ..pblas._panel_buffers import pooled_buffer
from ..pblas._redistribute import displacements
from ..pblas._tri_sweep import own_piece, triangle_extent, triangle_piece

__all__ = ["SolveChecksums", "segments"]

#: The checksum kinds of ``T`` (rows of :func:`triangle_rows_into`'s output) and of ``X`` (its columns).
_KINDS = 3


def _cut(m: BlockCyclic1D, bs: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the global segment bounds of ``m`` and the process owning each segment (a segment never
    straddles a distribution block)."""
    gb = checksums.segment_bounds(np.arange(m.n), m.offset, m.nb, bs)
    return gb, m.owners[gb[:-1]] if m.n else np.zeros(0, np.int64)


def segments(m: BlockCyclic1D, p: int, bs: int, cut: tuple[np.ndarray, np.ndarray] | None = None,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(global bounds, local bounds, global id of each local segment)`` of ``m`` on process ``p``
    (``cut``: :func:`_cut` of ``m``, if known): process ``p``'s local indices are its segments, in order."""
    gb, owner = _cut(m, bs) if cut is None else cut
    ids = np.flatnonzero(owner == p)
    return gb, np.concatenate(([0], np.cumsum(np.diff(gb)[ids]))).astype(np.int64), ids


def _weights(here: np.ndarray, lb: np.ndarray, ids: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """1-based index of each local index inside its segment (the weights of the weighted checksums)."""
    return (here - np.repeat(gb[ids], np.diff(lb)) + 1).astype(np.float64)


@dataclass(frozen=True)
class _Layout:
    """What one solve's checksums need that depends only on the maps, ``bs``, ``lower`` and this process's
    place in the grid, not on the data: made once per shape (:func:`_layout`) and kept, as every call of one
    shape needs the same (numpy's index work and the message layouts were ~1.5 ms of Python per call)."""

    rg: np.ndarray  # row segments: global bounds, local bounds, global id of each local one
    rl: np.ndarray
    rid: np.ndarray
    cg: np.ndarray  # column segments of W, likewise
    cl: np.ndarray
    cid: np.ndarray
    rows_here: np.ndarray  # this process row's indices of X's rows
    rw: np.ndarray  # the weights of the row- and column-weighted sums (1-based index in the segment)
    cw: np.ndarray
    rid_of: tuple[np.ndarray, ...]  # the row / column segments every process row / column holds
    cid_of: tuple[np.ndarray, ...]
    keep: np.ndarray  # T's extent (:func:`~ftkit.linalg.pblas._tri_sweep.triangle_extent`)
    diag: np.ndarray
    place: np.ndarray  # the column of T's sums each local column of T goes to (grouped by process row)
    send: tuple[list[int], list[int]]  # Ialltoallv of T's sums: counts and displacements, sent and received
    recv: tuple[list[int], list[int]]
    # per nonempty part of T's sums received: row segment ids, local rows of X (and as a slice where they are
    # a range: a view of X's sums, not a copy), size
    t_parts: tuple[tuple[np.ndarray, np.ndarray, np.ndarray | slice, int], ...]
    # per rank: the shapes of its partial products and W0's block sums, its row and column segment ids
    gather: tuple[tuple[tuple[int, ...], tuple[int, ...], np.ndarray, np.ndarray], ...]
    gather_counts: tuple[list[int], list[int]]


@lru_cache(maxsize=16)
def _layout(grid_key: tuple[int, int, int, int, tuple[tuple[int, int], ...]],
            rows_key: tuple[int, int, int, int, int], cols_key: tuple[int, int, int, int, int],
            wcols_key: tuple[int, int, int, int, int], bs: int, lower: bool) -> _Layout:
    """The :class:`_Layout` of a solve (keys: the maps' :attr:`~ftkit.linalg.descriptor.BlockCyclic1D.key`;
    ``grid_key``: the grid's shape, this process's coordinates and every grid rank's,
    :meth:`~ftkit.linalg.grid.ProcessGrid.coords`). Read-only arrays: every call of the shape shares them."""
    nprow, npcol, myrow, mycol, every = grid_key
    rows, cols, wcols = BlockCyclic1D(*rows_key), BlockCyclic1D(*cols_key), BlockCyclic1D(*wcols_key)
    coords = every.__getitem__
    size = nprow * npcol
    rcut, ccut = _cut(rows, bs), _cut(wcols, bs)
    rg, rl, rid = segments(rows, myrow, bs, rcut)
    cg, cl, cid = segments(wcols, mycol, bs, ccut)
    rows_here, cols_t = rows.indices_on(myrow), cols.indices_on(mycol)
    rid_of = tuple(np.flatnonzero(rcut[1] == p) for p in range(nprow))
    cid_of = tuple(np.flatnonzero(ccut[1] == q) for q in range(npcol))
    keep, diag = triangle_extent(rows, cols, myrow, mycol, lower)
    # the process row that multiplies each local column's sums (it holds X's row of that index); the kernel
    # writes each process row's columns side by side, in local order: one contiguous piece of the sums each,
    # sent from where it lies (the pieces of two ranks of one process row overlap: MPI lets sends overlap)
    dest_row = rows.owners[cols_t] if cols_t.size else np.zeros(0, np.int64)
    order_ = np.argsort(dest_row, kind="stable")
    place = np.empty(order_.size, np.int64)
    place[order_] = np.arange(order_.size)
    bounds = np.searchsorted(dest_row[order_], np.arange(nprow + 1))
    nrow_here = _KINDS * (len(rl) - 1)
    scounts = [nrow_here * int(bounds[coords(d)[0] + 1] - bounds[coords(d)[0]]) for d in range(size)]
    sdispls = [nrow_here * int(bounds[coords(d)[0]]) for d in range(size)]
    t_parts, rcounts = [], []
    for s in range(size):
        ps, qs = coords(s)
        k = cols.indices_on(qs)
        k = k[rows.owners[k] == myrow] if k.size else k
        nrow = _KINDS * len(rid_of[ps])
        pos = np.searchsorted(rows_here, k)
        cnt = nrow * k.size
        if cnt:
            run = pos.size and np.array_equal(pos, np.arange(pos[0], pos[0] + pos.size))
            t_parts.append((rid_of[ps], pos, slice(int(pos[0]), int(pos[0]) + pos.size) if run else pos, cnt))
        rcounts.append(cnt)
    nI = len(rg) - 1
    gather, counts = [], []
    for s in range(size):
        ps, qs = coords(s)
        nc = len(cid_of[qs])
        pa, pb = (4, nI, nc), (4, len(rid_of[ps]), nc)
        gather.append((pa, pb, rid_of[ps], cid_of[qs]))
        counts.append(int(np.prod(pa) + np.prod(pb)))
    lay = _Layout(
        rg=rg, rl=rl, rid=rid, cg=cg, cl=cl, cid=cid, rows_here=rows_here,
        rw=_weights(rows_here, rl, rid, rg), cw=_weights(wcols.indices_on(mycol), cl, cid, cg),
        rid_of=rid_of, cid_of=cid_of, keep=keep, diag=diag, place=place, send=(scounts, sdispls),
        recv=(rcounts, displacements(rcounts)), t_parts=tuple(t_parts), gather=tuple(gather),
        gather_counts=(counts, displacements(counts)))
    for v in vars(lay).values():
        for a in v if isinstance(v, tuple) else (v,):
            if isinstance(a, np.ndarray):
                a.flags.writeable = False
    return lay


@dataclass
class SolveChecksums:
    """The checksums of one solve on this process's pieces.

    ``t`` is the local piece of ``T`` (rows by ``rows``, columns by ``cols``), ``w0`` of ``W0``
    (rows by ``rows``, columns by ``wcols``). :meth:`make_triangle` and :meth:`residuals` are collective on
    the grid.
    """

    grid: ProcessGrid
    rows: BlockCyclic1D
    cols: BlockCyclic1D
    wcols: BlockCyclic1D
    bs: int
    lower: bool

    def __post_init__(self) -> None:
        g = self.grid
        every = tuple(g.coords(s) for s in range(g.size))
        lay = self._lay = _layout((g.nprow, g.npcol, g.myrow, g.mycol, every), self.rows.key,
                                  self.cols.key, self.wcols.key, int(self.bs), bool(self.lower))
        self.rg, self.rl, self.rid = lay.rg, lay.rl, lay.rid
        self.cg, self.cl, self.cid = lay.cg, lay.cl, lay.cid
        self.rows_here, self.rid_of, self.cid_of = lay.rows_here, lay.rid_of, lay.cid_of
        self.nI, self.nJ, self.ka = len(self.rg) - 1, len(self.cg) - 1, self.rows.n
        self.cw, self.rw = lay.cw, lay.rw[:, None]
        self.rmax = float(np.diff(self.rg).max(initial=1))
        self.cmax = float(np.diff(self.cg).max(initial=1))
        self._t_exchange: tuple[Any, ...] | None = None
        self._t_blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def _sum(self, parts: list[np.ndarray]) -> list[np.ndarray]:
        flat = np.concatenate([p.ravel() for p in parts])
        out = np.empty_like(flat)
        wait_requests([self.grid.comm.Iallreduce(flat, out)])  # waited by sleeping, not busy-polling
        res, o = [], 0
        for p in parts:
            res.append(out[o:o + p.size].reshape(p.shape))
            o += p.size
        return res

    def make_triangle(self, A: DistributedMatrix, ia: int, ja: int, transpose: bool, unit: bool,
                      pool: dict[object, np.ndarray] | None = None) -> np.ndarray:
        """Return this process's piece of ``T`` (:func:`~ftkit.linalg.pblas._tri_sweep.triangle_operand`'s,
        bit for bit) and start sending its checksums (collective on A's grid).

        The triangle is made in place in the redistributed piece and its column sums per row segment
        (plain, row-weighted, absolute) are taken in the same pass, from the kept rows only
        (:func:`~ftkit.linalg.checksums._tri_sums.triangle_rows_into`, as ``ft_pdtrmm`` takes them); where the
        piece is A's own local piece (no transpose, the same layout: the benchmark's offset-0 call), it is
        copied out of A in that pass instead (:func:`~ftkit.linalg.checksums._tri_sums.triangle_rows_from`:
        A's excluded triangle not read, one pass over the piece fewer). The sums start on their way to the
        process rows that multiply them (non-blocking; :meth:`residuals` waits). ``pool``: the piece in a
        buffer of the process-wide cache (:func:`~ftkit.linalg.pblas._tri_sweep.triangle_piece`).
        """
        lay, g = self._lay, self.grid
        text = np.empty((_KINDS * (len(self.rl) - 1), self.cols.count(g.mycol)), order="F")  # all written
        own = own_piece(A, ia, ja, transpose, self.rows, self.cols, pool)
        if own is not None:
            # T's piece is A's own: copied out of it, made a triangle and summed in one pass that reads only
            # the kept rows (the layout move's copy and the triangle's pass would be two)
            t = own[1]
            triangle_rows_from(*own, lay.keep, lay.diag, unit, self.rl, lay.rw, text, lay.place, _KINDS)
        else:
            t = triangle_piece(A, ia, ja, transpose, self.rows, self.cols, pool)
            triangle_rows_into(t, lay.keep, lay.diag, unit, self.rl, lay.rw, text, lay.place, _KINDS)
        self._send_t_sums(text)
        return t

    def encode(self, w: np.ndarray, pool: dict[object, np.ndarray]) -> np.ndarray:
        """Take the checksums of ``W0 = w`` (its block sums: plain, column- and row-weighted, absolute);
        return a copy of ``w`` (:meth:`make_triangle` first).

        One pass (:func:`~ftkit.linalg.checksums._tri_sums.copy_block_sums`): ``w``'s copy, which the
        re-solve of flagged column segments starts from, is made in the pass that sums it, into a buffer of
        ``pool`` (:func:`~ftkit.linalg.pblas._panel_buffers.pooled_buffer`: a fresh array of ``w``'s size
        costs page faults and the kernel's zeroing, more than the copy itself).
        """
        w0 = pooled_buffer(pool, "w0", w.shape)
        # in the order of the residuals' products: plain, column-weighted, row-weighted, absolute
        self.w_sums = np.empty((4, len(self.rl) - 1, len(self.cl) - 1))
        copy_block_sums(w, w0, self.rl, self.cl, self._lay.rw, self.cw, self.w_sums,
                        np.empty((w.shape[0], 3), order="F"))
        return w0

    def _send_t_sums(self, text: np.ndarray) -> None:
        """Start sending each process the column sums of ``T`` at the indices its process row holds of ``X``'s
        rows (one ``Ialltoallv``). ``text``: kinds x local row segments by local columns, those of process
        row ``p`` side by side (in local order), as :func:`_layout` places them."""
        lay = self._lay
        rbuf = np.empty(sum(lay.recv[0]))
        req = self.grid.comm.Ialltoallv([text.ravel(order="F"), lay.send, MPI.DOUBLE],
                                        [rbuf, lay.recv, MPI.DOUBLE])
        self._t_exchange = (req, text, rbuf)

    def t_blocks(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Return ``T``'s column sums at this process row's indices of ``X``'s rows, as received from each
        process: ``(row segment ids, local rows of X, sums)``, the sums ``kinds x segments x rows`` (plain,
        row-weighted, absolute). Waits for :meth:`make_triangle`'s exchange the first time."""
        if self._t_blocks is None:
            assert self._t_exchange is not None, "make_triangle() first"
            req, _text, rbuf = self._t_exchange
            wait_requests([req])  # waited by sleeping
            blocks, off = [], 0
            for rid, pos, _take, cnt in self._lay.t_parts:  # rows kind-major (kind q, segment s: q * nr + s)
                blk = rbuf[off:off + cnt].reshape((rid.size, _KINDS, pos.size), order="F")
                blocks.append((rid, pos, blk.transpose(1, 0, 2)))
                off += cnt
            self._t_blocks, self._t_exchange = blocks, None
        return self._t_blocks

    def residuals(self, x: np.ndarray, tol: float | str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(residual, threshold, rigorous threshold)`` per block (``nI x nJ``, the same bit for bit
        on every process).

        The residual is the largest of the plain one and the row- and column-weighted ones divided by the
        largest weight (their bounds are that weight times the plain one's): a block is flagged if any of
        the three disagrees. The signed residuals are kept for :meth:`locate`.
        """
        nc = len(self.cl) - 1
        xext = np.empty((x.shape[0], _KINDS * nc), order="F")  # all written: the segments cover x's columns
        if nc and x.shape[0]:
            encode_cols_into(x, self.cl, self.cw, xext, False, _KINDS)  # plain, weighted, absolute
        part = np.zeros((4, self.nI, nc))  # this process row's share of the sums
        with np.errstate(invalid="ignore", over="ignore"):
            for (rid, _pos, (ts, tw, ta)), take in zip(self.t_blocks(), self._lay.t_parts, strict=True):
                x = xext[take[2]]  # plain, column-weighted, absolute side by side
                sw = ts @ x[:, :2 * nc]
                part[:, rid] += np.stack([sw[:, :nc], sw[:, nc:], tw @ x[:, :nc], ta @ x[:, 2 * nc:]])
        prod, w0 = self._gather(part)
        with np.errstate(invalid="ignore", over="ignore"):
            self.res_e, self.res_w, self.res_r = prod[0] - w0[0], prod[1] - w0[1], prod[2] - w0[2]
            res = np.maximum(np.abs(self.res_e), np.maximum(np.abs(self.res_w) / self.cmax,
                                                            np.abs(self.res_r) / self.rmax))
            mag = prod[3] + w0[3]
        r = np.diff(self.rg).max(initial=1)
        c = np.diff(self.cg).max(initial=1)
        n_ops = 2 * self.ka + r + c + 8
        floor = 4.0 * n_ops * r * c * checksums.ETA  # products that underflow
        rig = 2.0 * checksums.gamma(n_ops) * mag + floor
        if tol is None:
            thr = rig
        elif tol == "statistical":
            thr = np.minimum(rig, checksums.STAT_LAMBDA * checksums.U * np.sqrt(n_ops) * mag + floor)
        else:
            thr = float(tol) * mag
        return res, thr, rig

    def _gather(self, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gather every process's partial products (``part``: 4 x nI x its column segments) and ``W0``'s
        block sums (one ``Iallgatherv``); return their totals over the process rows, added in grid-rank order
        (the same on every process), and the block sums, both ``4 x nI x nJ``."""
        mine = np.concatenate([part.ravel(order="F"), self.w_sums.ravel(order="F")])
        counts, displs = self._lay.gather_counts
        out = np.empty(sum(counts))
        wait_requests([self.grid.comm.Iallgatherv(mine, [out, (counts, displs), MPI.DOUBLE])])  # by sleeping
        prod, w0 = np.zeros((4, self.nI, self.nJ)), np.zeros((4, self.nI, self.nJ))
        with np.errstate(invalid="ignore", over="ignore"):
            for (pa, pb, rid, cid), off, cnt in zip(self._lay.gather, displs, counts, strict=True):
                na = pa[0] * pa[1] * pa[2]
                prod[:, :, cid] += out[off:off + na].reshape(pa, order="F")
                w0[:, rid[:, None], cid[None, :]] = out[off + na:off + cnt].reshape(pb, order="F")
        return prod, w0

    def gather_t_sums(self) -> None:
        """Collect all of ``T``'s column sums (plain and row-weighted, ``nI x ka``) that :meth:`locate`
        reads (collective; only when a block is flagged)."""
        parts = np.zeros((2, self.nI, self.ka))
        if self.grid.mycol == 0:  # each process row's sums once (every process column holds them)
            for rid, pos, blk in self.t_blocks():
                parts[:, rid[:, None], self.rows_here[pos][None, :]] = blk[:2]
        self.ts, self.tw = self._sum([parts[0], parts[1]])  # one non-zero term per entry: exact

    def locate(self, bj: int, thr: np.ndarray) -> tuple[int, int, float] | None:
        """Locate a single wrong element of column segment ``bj`` from the last residuals: ``(row, column,
        error)`` in submatrix indices, or ``None`` if they do not look like one error.

        An error ``d`` at ``X[i, j]`` makes the plain residual of every row segment ``I`` equal to
        ``ts[I, i] d``, the row-weighted one ``tw[I, i] d`` and the column-weighted one ``(j - j0 + 1)``
        times the plain one: the column-weighted ratio gives the column, and the row is the only one whose
        columns of ``ts`` and ``tw`` predict every segment's residuals within their thresholds (``thr``,
        ``nI`` values). O(``nI * ka``) on the checksums, nothing on the data; :meth:`gather_t_sums` first.
        """
        re, rw, rr = self.res_e[:, bj], self.res_w[:, bj], self.res_r[:, bj]
        i0 = int(np.argmax(np.abs(re)))
        if not (np.isfinite(re[i0]) and re[i0] != 0.0):
            return None
        q = rw[i0] / re[i0]
        jl = int(np.rint(q)) - 1 if np.isfinite(q) else -1
        if not (0 <= jl < self.cg[bj + 1] - self.cg[bj]) or abs(q - (jl + 1)) > 0.25:
            return None
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            d = re[i0] / self.ts[i0]
            mism = np.maximum(
                np.max(np.abs(self.ts * d[None, :] - re[:, None]) / thr[:, None], axis=0),
                np.max(np.abs(self.tw * d[None, :] - rr[:, None]) / (self.rmax * thr[:, None]), axis=0))
        mism[~np.isfinite(mism)] = np.inf
        fits = np.flatnonzero(mism <= 1.0)
        # Only an unambiguous fit is a location: with one row segment, or an error pattern that several
        # rows explain (a wrong right-hand side makes a whole column wrong, whose segment sums a single
        # element of several rows can mimic), the column segment is solved again instead.
        if self.nI < 2 or fits.size != 1:
            return None
        i = int(fits[0])
        return i, int(self.cg[bj]) + jl, float(d[i])

    def fix(self, x: np.ndarray, i: int, j: int, d: float) -> None:
        """Subtract ``d`` from ``X[i, j]`` (submatrix indices) on the process that holds it."""
        g = self.grid
        if int(self.rows.owners[i]) == g.myrow and int(self.wcols.owners[j]) == g.mycol:
            li = int(np.searchsorted(self.rows_here, i))
            lj = int(np.searchsorted(self.wcols.indices_on(g.mycol), j))
            x[li, lj] -= d

    def local_columns(self, blocks: list[int]) -> np.ndarray:
        """Boolean mask of this process's ``W`` columns in the column segments ``blocks``."""
        mask = np.zeros(self.cl[-1], bool)
        for s, gid in enumerate(self.cid):
            if int(gid) in blocks:
                mask[self.cl[s]:self.cl[s + 1]] = True
        return mask

    def owner(self, bi: int, bj: int) -> int:
        """Grid rank holding ``X`` block ``(bi, bj)``."""
        p = int(self.rows.owners[self.rg[bi]])
        q = int(self.wcols.owners[self.cg[bj]])
        return self.grid.rank_of(p, q)
