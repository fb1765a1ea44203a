"""Arithmetic in GF(2^8) and the matrices of ftkit's Reed-Solomon code.

The field is GF(2)[x] / (x^8 + x^4 + x^3 + x^2 + 1) (polynomial ``0x11d``, the one zfec and ISA-L use),
with generator 2. Field elements are Python ints or ``numpy.uint8`` values in 0..255; addition is XOR.

Code matrices: the generator of ``RSCode(k, m)`` is ``[I_k; C]`` where every square submatrix of the
``m x k`` matrix ``C`` is invertible, so the code is MDS: any ``k`` of the ``k + m`` fragments determine
the data. ``C`` is the cheaper to apply (:func:`apply_cost`) of two candidates:

- a matrix with small entries found by a bounded, deterministic search that verifies every square
  submatrix (:func:`small_superregular`; tried for ``k * m <= 64``, it succeeds for the usual sizes such
  as (4, 4), (10, 4), (6, 3));
- a Cauchy matrix ``1 / (x_i + y_j)`` (every square submatrix invertible by construction) with rows and
  columns scaled by nonzero constants (which keeps that property), points and scales chosen by a fixed
  search for a cheap matrix.

The result is part of ftkit's on-disk format and must never change for a given ``(k, m)``: the golden file
``tests/codec/golden/rs_codes.json`` pins it.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

__all__ = [
    "POLY",
    "EXP",
    "LOG",
    "MUL_TABLE",
    "gf_mul",
    "gf_inv",
    "mat_mul",
    "mat_inv",
    "cauchy_matrix",
    "parity_matrix",
    "generator_matrix",
    "apply_cost",
    "small_superregular",
]

#: The field polynomial x^8 + x^4 + x^3 + x^2 + 1.
POLY = 0x11D


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    exp = np.zeros(512, dtype=np.int64)
    log = np.zeros(256, dtype=np.int64)
    x = 1
    for i in range(255):
        exp[i] = x
        log[x] = i
        x <<= 1
        if x & 0x100:
            x ^= POLY
    exp[255:510] = exp[0:255]
    return exp, log


#: ``EXP[i] = 2**i`` in the field (length 512 so that ``EXP[LOG[a] + LOG[b]]`` needs no modulo).
#: ``LOG[a]`` for a != 0 (``LOG[0]`` is meaningless).
EXP, LOG = _build_tables()


def _build_mul_table() -> np.ndarray:
    table = EXP[(LOG[:, None] + LOG[None, :])].astype(np.uint8)
    table[0, :] = 0
    table[:, 0] = 0
    return table


#: ``MUL_TABLE[a, b] = a * b`` in the field, uint8, shape (256, 256).
MUL_TABLE = _build_mul_table()


def gf_mul(a: int, b: int) -> int:
    """Multiply two field elements."""
    return int(MUL_TABLE[a, b])


def gf_inv(a: int) -> int:
    """Return the multiplicative inverse of a nonzero field element.

    Raises
    ------
    ZeroDivisionError
        If ``a`` is 0.
    """
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(2^8)")
    return int(EXP[255 - LOG[a]])


def mat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Multiply two matrices of field elements (uint8 arrays, shapes (r, n) and (n, c))."""
    a = np.asarray(a, dtype=np.uint8)
    b = np.asarray(b, dtype=np.uint8)
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.uint8)
    for t in range(a.shape[1]):
        out ^= MUL_TABLE[a[:, t][:, None], b[t, :][None, :]]
    return out


def mat_inv(a: np.ndarray) -> np.ndarray:
    """Invert a square matrix of field elements by Gauss-Jordan elimination.

    Raises
    ------
    ZeroDivisionError
        If the matrix is singular.
    """
    a = np.array(a, dtype=np.uint8)
    n = a.shape[0]
    work = np.concatenate([a, np.eye(n, dtype=np.uint8)], axis=1)
    for col in range(n):
        pivots = np.nonzero(work[col:, col])[0]
        if pivots.size == 0:
            raise ZeroDivisionError("matrix is singular over GF(2^8)")
        p = col + int(pivots[0])
        if p != col:
            work[[col, p]] = work[[p, col]]
        work[col] = MUL_TABLE[gf_inv(int(work[col, col])), work[col]]
        factors = work[:, col].copy()
        factors[col] = 0
        rows = np.nonzero(factors)[0]
        if rows.size:
            work[rows] ^= MUL_TABLE[factors[rows][:, None], work[col][None, :]]
    return work[:, n:].copy()


def cauchy_matrix(xs: list[int] | np.ndarray, ys: list[int] | np.ndarray) -> np.ndarray:
    """Return the Cauchy matrix ``1 / (x_i + y_j)`` (uint8, shape (len(xs), len(ys))).

    Raises
    ------
    ValueError
        If the points are not all distinct.
    """
    xs = [int(v) for v in xs]
    ys = [int(v) for v in ys]
    if len(set(xs) | set(ys)) != len(xs) + len(ys):
        raise ValueError("Cauchy points must be distinct")
    out = np.zeros((len(xs), len(ys)), dtype=np.uint8)
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            out[i, j] = gf_inv(x ^ y)
    return out


_POPCOUNT = np.array([bin(v).count("1") for v in range(256)], dtype=np.int64)
_MAXBIT = np.array([max(v.bit_length() - 1, 0) for v in range(256)], dtype=np.int64)
_BITS = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(np.int64)  # (256, 8)


def _row_costs(rows: np.ndarray) -> np.ndarray:
    # Cost of applying each row (last axis = entries) by Horner's rule over bit levels: per level, one pass
    # taking up to 3 sources plus one more pass per further 3, a quarter unit per source, and the doubling.
    n_b = _BITS[rows].sum(axis=-2)  # (..., 8) sources per bit level
    top = _MAXBIT[rows.max(axis=-1)]  # (...)
    level = np.arange(8)
    live = level <= top[..., None]
    passes = np.where(live, 1 + np.maximum(0, (n_b - 1) // 3), 0)
    any_nonzero = rows.max(axis=-1) > 0
    cost = passes.sum(axis=-1) + 0.25 * n_b.sum(axis=-1) + 0.4 * top
    return np.where(any_nonzero, cost, 1.0)


def apply_cost(matrix: np.ndarray) -> float:
    """Estimate the cost of applying ``matrix`` (outputs x inputs) with ftkit's kernel, in block passes.

    Each output row is evaluated by Horner's rule over the bit levels of its entries: one fused pass per
    level (a doubling and up to three XORs), plus a pass per further three inputs, plus a small charge per
    input loaded and per doubling. This function is frozen: it decides ftkit's code matrices.
    """
    m = np.asarray(matrix, dtype=np.uint8)
    if m.size == 0:
        return 0.0
    return float(_row_costs(m.astype(np.int64)).sum())


_SCALES = np.arange(1, 256)


def _best_row_scales(c: np.ndarray) -> np.ndarray:
    out = c.copy()
    for i in range(c.shape[0]):
        cand = MUL_TABLE[_SCALES[:, None], out[i][None, :]].astype(np.int64)  # (255, k)
        out[i] = cand[int(np.argmin(_row_costs(cand)))]
    return out


def _best_column_scales(c: np.ndarray) -> np.ndarray:
    out = c.copy()
    for j in range(c.shape[1]):
        trial = np.repeat(out[None, :, :], 255, axis=0).astype(np.int64)  # (255, m, k)
        trial[:, :, j] = MUL_TABLE[_SCALES[:, None], out[:, j][None, :]]
        cost = _row_costs(trial).sum(axis=1)
        out[:, j] = trial[int(np.argmin(cost)), :, j]
    return out


def _normalise(c: np.ndarray, rounds: int) -> np.ndarray:
    c = _best_row_scales(c)
    for _ in range(rounds):
        c = _best_row_scales(_best_column_scales(c))
    return c


_LOG_LIST = [int(v) for v in LOG]
_EXP_LIST = [int(v) for v in EXP]


def _nonsingular(rows: list[list[int]]) -> bool:
    # Gaussian elimination on small matrices with plain lists (much faster than numpy at this size).
    a = [r[:] for r in rows]
    n = len(a)
    for c in range(n):
        p = next((r for r in range(c, n) if a[r][c]), None)
        if p is None:
            return False
        a[c], a[p] = a[p], a[c]
        lp = _LOG_LIST[a[c][c]]
        for r in range(c + 1, n):
            if a[r][c]:
                lf = (_LOG_LIST[a[r][c]] - lp) % 255
                a[r] = [x ^ (_EXP_LIST[lf + _LOG_LIST[y]] if y else 0)
                        for x, y in zip(a[r], a[c], strict=True)]
    return True


#: Entries tried by the small-entry search, cheapest first (highest bit, then number of one-bits).
_SMALL_VALUES = sorted(range(1, 64), key=lambda v: (v.bit_length(), bin(v).count("1"), v))


def small_superregular(k: int, m: int, budget: int = 20000) -> np.ndarray | None:
    """Search an ``m x k`` matrix with small entries whose every square submatrix is invertible.

    Depth-first over the entries in row-major order, first row and first column fixed to 1 (any such
    matrix can be scaled to that form), each entry trying :data:`_SMALL_VALUES` in order, entries bounded
    by 4, then 8, 16, 32, 64 (the first bound that succeeds wins: small entries need few doublings).
    Placing entry ``(i, j)`` checks every square submatrix whose bottom-right corner it is, so a returned
    matrix has been verified exhaustively. Returns ``None`` when ``budget / 5`` determinant checks per
    bound do not suffice (the search is deterministic: same arguments, same answer).
    """
    c = [[1] * k for _ in range(m)]
    cells = [(i, j) for i in range(1, m) for j in range(1, k)]
    left = [budget]

    def fits(i: int, j: int) -> bool:
        for size in range(2, min(i, j) + 2):
            for rows in itertools.combinations(range(i), size - 1):
                for cols in itertools.combinations(range(j), size - 1):
                    left[0] -= 1
                    sub = [[c[r][col] for col in (*cols, j)] for r in (*rows, i)]
                    if not _nonsingular(sub):
                        return False
        return True

    def place(t: int, values: list[int]) -> bool | None:
        if t == len(cells):
            return True
        i, j = cells[t]
        for v in values:
            if left[0] <= 0:
                return None
            c[i][j] = v
            if fits(i, j):
                found = place(t + 1, values)
                if found is not False:
                    return found
        return False

    for bound in (4, 8, 16, 32, 64):
        left[0] = budget // 5
        if place(0, [v for v in _SMALL_VALUES if v < bound]):
            return np.array(c, dtype=np.uint8)
    return None


@functools.cache
def _parity_matrix_cached(k: int, m: int) -> bytes:
    if m == 1:
        return bytes([1] * k)
    # First choice: a verified superregular matrix with small entries (cheap to apply: few bit levels).
    small = small_superregular(k, m) if k * m <= 64 else None
    # Candidate point sets: the textbook one and a fixed pseudo-random sample (legacy RandomState with a fixed
    # seed: numpy freezes its stream, so the choice is reproducible across versions). Each is scaled row by
    # row; the cheapest is then refined by alternating column and row scalings. The search budget shrinks
    # with the matrix size so that building a code stays fast (well under a second).
    size = k * m
    n_random = 32 if size <= 256 else 8 if size <= 1024 else 0
    rounds = 2 if size <= 256 else 1 if size <= 1024 else 0
    candidates = [(list(range(m)), list(range(m, m + k)))]
    rng = np.random.RandomState(20261202 + 257 * k + m)
    for _ in range(n_random):
        perm = rng.permutation(256)
        candidates.append((list(perm[:m]), list(perm[m:m + k])))
    scored = []
    for t, (xs, ys) in enumerate(candidates):
        c = _best_row_scales(cauchy_matrix(xs, ys))
        scored.append((apply_cost(c), t, c))
    scored.sort(key=lambda item: (item[0], item[1]))
    refined = []
    for _, t, c in scored[: 4 if size <= 64 else 1]:
        c = _normalise(c, rounds)
        refined.append((apply_cost(c), t, c))
    refined.sort(key=lambda item: (item[0], item[1]))
    best = refined[0][2]
    if small is not None and apply_cost(small) <= apply_cost(best):
        best = small
    return best.tobytes()


def parity_matrix(k: int, m: int) -> np.ndarray:
    """Return the ``m x k`` parity part ``C`` of ftkit's generator matrix for ``RSCode(k, m)``.

    ``parity_i = sum_j C[i, j] * data_j`` byte by byte. For ``m = 1`` this is the all-ones row (plain XOR).
    The result is a fresh uint8 array; it is a pure function of ``(k, m)``.

    Raises
    ------
    ValueError
        If ``k < 1``, ``m < 1`` or ``k + m > 256``.
    """
    if k < 1 or m < 1 or k + m > 256:
        raise ValueError(f"need k >= 1, m >= 1 and k + m <= 256, got k={k}, m={m}")
    return np.frombuffer(_parity_matrix_cached(k, m), dtype=np.uint8).reshape(m, k).copy()


def generator_matrix(k: int, m: int) -> np.ndarray:
    """Return the ``(k + m) x k`` systematic generator ``[I_k; C]`` of ``RSCode(k, m)``."""
    return np.concatenate([np.eye(k, dtype=np.uint8), parity_matrix(k, m)], axis=0)
