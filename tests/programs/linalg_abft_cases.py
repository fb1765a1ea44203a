"""Adversarial test matrices for the ABFT false-positive and detection tests (shared by the in-process tests
and the MPI programs, so both see the same families).

Every family returns ``(a, b, c0)`` float64 arrays for ``C = alpha * a @ b + beta * c0``.
"""

from __future__ import annotations

import numpy as np

FAMILIES = ("uniform", "normal", "tiny", "huge", "hilbert", "cancel", "mixed_scale", "integer_exact")


def make_case(family: str, m: int, n: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Return ``(a, b, c0)`` of one adversarial family (``a`` m x k, ``b`` k x n, ``c0`` m x n)."""
    if family == "uniform":
        a, b = rng.random((m, k)), rng.random((k, n))
    elif family == "normal":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif family == "tiny":
        a, b = 1e-8 * rng.standard_normal((m, k)), 1e-8 * rng.random((k, n))
    elif family == "huge":
        a, b = 1e8 * rng.random((m, k)), 1e8 * rng.standard_normal((k, n))
    elif family == "hilbert":
        # Hilbert-like: entries 1/(i+j+1) with random shifts, badly conditioned, all positive, smooth decay
        i, j = np.arange(m)[:, None], np.arange(k)[None, :]
        a = 1.0 / (i + j + 1.0 + rng.integers(0, 3))
        i, j = np.arange(k)[:, None], np.arange(n)[None, :]
        b = 1.0 / (i + j + 1.0 + rng.integers(0, 3)) * rng.choice([-1.0, 1.0], size=(1, n))
    elif family == "cancel":
        # heavy cancellation: C is tiny compared with |A||B|: A = [X, X(1+eps)], B = [Y; -Y]
        h = k // 2
        x, y = rng.standard_normal((m, h)), rng.standard_normal((h, n))
        a = np.hstack([x, x * (1 + 1e-10 * rng.standard_normal((m, h))), rng.standard_normal((m, k - 2 * h))])
        b = np.vstack([y, -y, rng.standard_normal((k - 2 * h, n))])
    elif family == "mixed_scale":
        # rows of A and columns of B scaled over 16 orders of magnitude, mixed signs
        a = rng.standard_normal((m, k)) * 10.0 ** rng.uniform(-8, 8, size=(m, 1))
        b = rng.standard_normal((k, n)) * 10.0 ** rng.uniform(-8, 8, size=(1, n))
    elif family == "integer_exact":
        # exactly representable products and sums: the residual must be exactly zero
        a = rng.integers(-8, 9, size=(m, k)).astype(np.float64)
        b = rng.integers(-8, 9, size=(k, n)).astype(np.float64)
    else:
        raise ValueError(family)
    c0 = rng.standard_normal((m, n)) * float(np.max(np.abs(a)) * np.max(np.abs(b)) + 1.0)
    return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), c0
