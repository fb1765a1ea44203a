"""Probability that x simultaneous node failures destroy a checkpoint level (reference 002, eq. 4).

Setting: ``n`` nodes split into ``g = n / k`` groups of ``k`` consecutive nodes; ``x`` distinct nodes fail
at once, every x-subset equally likely. A *catastrophic* failure is one that some group cannot survive:

``threshold`` codes (:func:`catastrophic_probability`)
    A group survives up to ``t`` failed members. RS with FTI's topology-aware layout: ``t = k // 2`` (each
    member holds its data file and one of the k parity files, so losing a node costs two of the 2k
    fragments, and any k of them rebuild the group). XOR (SCR): ``t = 1``.
partner copy (:func:`partner_probability`)
    ftkit's L2: within a group (a node set) the nodes form a ring and each node's data is copied to the next
    node of the ring. Data is lost when a node *and* its ring successor both fail; several failures are
    survived as long as no two are ring neighbours. (For ``k = 2`` this is plain pairwise mirroring.)

The exact probabilities count the failure sets every group survives with a polynomial product: if a group
survives ``j`` failures in ``s_j`` ways, the number of surviving x-sets of the whole machine is the
coefficient of ``z^x`` in ``(Σ_j s_j z^j)^g``. That is computed with Python integers (no overflow, no
rounding), so ``n = 10 000`` and ``x`` in the hundreds take milliseconds.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb
from typing import Literal, overload

from ..errors import ModelError

__all__ = [
    "SCHEMES",
    "eq4_probability",
    "catastrophic_probability",
    "partner_probability",
    "scheme_tolerance",
    "scheme_probability",
    "check_layout",
]

#: Protection schemes the models know, with the name used in tables and plots.
SCHEMES = {"rs": "RS (FTI, t=k/2)", "xor": "XOR (SCR, t=1)", "partner": "partner copy (ring)"}


def check_layout(n: int, k: int, x: int, t: int | None = None) -> None:
    """Validate a layout of ``n`` nodes in groups of ``k`` with ``x`` failures and tolerance ``t``.

    Raises
    ------
    ModelError
        If a value is not an integer, ``k < 2``, ``k`` does not divide ``n``, ``x`` is outside ``[0, n]``
        or ``t`` is outside ``[0, k-1]``; the message names the value and what is allowed.
    """
    for name, value in (("n (nodes)", n), ("k (group size)", k), ("x (failed nodes)", x)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"{name} must be an integer, got {value!r}")
    if n < 1:
        raise ModelError(f"n (nodes) must be positive, got {n}")
    if k < 2:
        raise ModelError(f"group size k = {k}: a group needs at least 2 nodes")
    if n % k != 0:
        raise ModelError(f"group size k = {k} does not divide the node count n = {n}: "
                         f"the model needs n = g·k (use a multiple of {k} nodes or another group size)")
    if not 0 <= x <= n:
        raise ModelError(f"x = {x} failed nodes is outside [0, n = {n}]")
    if t is not None:
        if isinstance(t, bool) or not isinstance(t, int):
            raise ModelError(f"t (tolerated failures per group) must be an integer, got {t!r}")
        if not 0 <= t < k:
            raise ModelError(f"t = {t} tolerated failures per group must be in [0, k-1] = [0, {k - 1}]: "
                             f"a group of {k} cannot survive losing all its nodes")


def eq4_probability(n: int, k: int, t: int, x: int) -> float:
    """Return equation (4) of reference 002 exactly as the paper writes it.

    ``Pr(x_Ct | x) = C(g,1) · C(k,t+1) · C(n-(t+1), x-(t+1)) / C(n,x)`` with ``g = n/k``.

    The numerator picks one group, ``t+1`` of its nodes to fail and the other ``x-(t+1)`` failures anywhere.
    It is **not** a probability: a failure set is counted once for every (group, (t+1)-subset of that group's
    failures) it contains, i.e. ``Σ_groups C(f_group, t+1)`` times, so sets with a group holding more than
    ``t+1`` failures, or with two bad groups, are counted several times. It is exact for ``x = t+1``, an
    upper bound (union bound) otherwise, and can exceed 1. Example, ``n = 12, k = 4, t = 1``:

    * ``x = 2``: eq. (4) = 3·6·1/66 = 0.2727 = exact (two failures in the same group).
    * ``x = 3``: eq. (4) = 3·6·10/220 = 180/220 = 0.818, exact = 1 − 4³/220 = 156/220 = 0.709. The 12 sets
      with three failures in one group are counted C(3,2) = 3 times each: 180 = 156 + 2·12. Over-count 15%.
    * ``n = 8, k = 4, t = 1, x = 4``: eq. (4) = 2·6·15/70 = 2.571, while the exact value is 1.

    For ``x ≪ n`` with small per-group probabilities the over-count is negligible (it is the paper's regime).
    Use :func:`catastrophic_probability` for the exact value.

    Parameters
    ----------
    n
        Number of nodes (a multiple of ``k``).
    k
        Group size (nodes per group), >= 2.
    t
        Failures a group tolerates, ``0 <= t < k``.
    x
        Number of simultaneously failed nodes, ``0 <= x <= n``.

    Returns
    -------
    float
        The value of eq. (4) (0 when ``x <= t``; may exceed 1).

    Raises
    ------
    ModelError
        On an invalid layout (see :func:`check_layout`).
    """
    check_layout(n, k, x, t)
    if x < t + 1:
        return 0.0
    g = n // k
    return float(Fraction(g * comb(k, t + 1) * comb(n - (t + 1), x - (t + 1)), comb(n, x)))


def _power_coefficient(poly: list[int], power: int, degree: int) -> int:
    """Return the coefficient of ``z^degree`` in ``poly(z)^power`` (integer arithmetic, truncated)."""
    result = [1]
    base = poly[: degree + 1]

    def mul(a: list[int], b: list[int]) -> list[int]:
        out = [0] * min(len(a) + len(b) - 1, degree + 1)
        for i, ai in enumerate(a):
            if ai == 0:
                continue
            for j, bj in enumerate(b[: degree + 1 - i]):
                out[i + j] += ai * bj
        return out

    while power:
        if power & 1:
            result = mul(result, base)
        power >>= 1
        if power:
            base = mul(base, base)
    return result[degree] if degree < len(result) else 0


def _loss_fraction(n: int, k: int, x: int, survivable: list[int]) -> Fraction:
    """Return the fraction of x-subsets of n nodes that some group (ways ``survivable``) does not survive."""
    total = comb(n, x)
    safe = _power_coefficient(survivable, n // k, x)
    return Fraction(total - safe, total)


@overload
def catastrophic_probability(n: int, k: int, t: int, x: int, *, exact: Literal[False] = ...) -> float: ...
@overload
def catastrophic_probability(n: int, k: int, t: int, x: int, *, exact: Literal[True]) -> Fraction: ...


def catastrophic_probability(n: int, k: int, t: int, x: int, *, exact: bool = False) -> float | Fraction:
    """Return the exact probability that some group gets more than ``t`` of ``x`` random node failures.

    The ``x`` failed nodes are a uniformly random x-subset of the ``n`` nodes; groups are ``g = n/k``
    disjoint sets of ``k`` nodes. A group with ``j`` failures survives iff ``j <= t``, so the number of
    surviving failure sets is the coefficient of ``z^x`` in ``(Σ_{j<=t} C(k,j) z^j)^g``.

    Parameters
    ----------
    n
        Number of nodes (a multiple of ``k``).
    k
        Group size, >= 2.
    t
        Failures a group tolerates, ``0 <= t < k`` (RS in FTI: ``k//2``; XOR: 1).
    x
        Number of simultaneously failed nodes, ``0 <= x <= n``.
    exact
        Return a :class:`fractions.Fraction` instead of a float.

    Returns
    -------
    float or Fraction
        Probability in [0, 1].

    Raises
    ------
    ModelError
        On an invalid layout (see :func:`check_layout`).
    """
    check_layout(n, k, x, t)
    result = _loss_fraction(n, k, x, [comb(k, j) for j in range(t + 1)])
    return result if exact else float(result)


def _ring_independent_sets(k: int, j: int) -> int:
    """Number of j-subsets of a k-node ring (k >= 2) with no two ring neighbours."""
    if j == 0:
        return 1
    if k == 2:
        return 2 if j == 1 else 0
    if 2 * j > k:
        return 0
    return k * comb(k - j, j) // (k - j)


@overload
def partner_probability(n: int, k: int, x: int, *, exact: Literal[False] = ...) -> float: ...
@overload
def partner_probability(n: int, k: int, x: int, *, exact: Literal[True]) -> Fraction: ...


def partner_probability(n: int, k: int, x: int, *, exact: bool = False) -> float | Fraction:
    """Return the exact probability that ``x`` random node failures destroy some partner copy.

    Each group of ``k`` nodes is a ring; node ``i`` of a group copies its data to node ``(i+1) mod k``.
    Data is lost iff two ring neighbours fail. A k-ring survives ``j`` failures in
    ``k/(k-j)·C(k-j, j)`` ways (the no-two-adjacent subsets of a cycle).

    Parameters
    ----------
    n
        Number of nodes (a multiple of ``k``).
    k
        Ring (group) size, >= 2.
    x
        Number of simultaneously failed nodes, ``0 <= x <= n``.
    exact
        Return a :class:`fractions.Fraction` instead of a float.

    Returns
    -------
    float or Fraction
        Probability in [0, 1].

    Raises
    ------
    ModelError
        On an invalid layout.
    """
    check_layout(n, k, x)
    result = _loss_fraction(n, k, x, [_ring_independent_sets(k, j) for j in range(k // 2 + 1)])
    return result if exact else float(result)


def scheme_tolerance(scheme: str, k: int) -> int:
    """Return the failures per group that ``scheme`` tolerates in the worst case (rs: k//2, xor/partner: 1).

    Raises
    ------
    ModelError
        If ``scheme`` is not one of :data:`SCHEMES`.
    """
    if scheme == "rs":
        return k // 2
    if scheme in ("xor", "partner"):
        return 1
    raise ModelError(f"unknown protection scheme {scheme!r}: use one of {', '.join(SCHEMES)}")


def scheme_probability(scheme: str, n: int, k: int, x: int, *, method: str = "exact") -> float:
    """Return the catastrophic-failure probability of ``scheme`` for ``x`` failures among ``n`` nodes.

    Parameters
    ----------
    scheme
        ``"rs"`` (t = k//2), ``"xor"`` (t = 1) or ``"partner"`` (ring copy).
    n, k, x
        Nodes, group size, simultaneous failures.
    method
        ``"exact"`` or ``"eq4"`` (the paper's formula; for partner copy, eq. 4's counting with the k
        neighbour pairs of the ring in place of ``C(k, t+1)``, likewise an over-count).

    Raises
    ------
    ModelError
        On an unknown scheme or method, or an invalid layout.
    """
    if method not in ("exact", "eq4"):
        raise ModelError(f"unknown method {method!r}: use 'exact' or 'eq4'")
    t = scheme_tolerance(scheme, k)
    if scheme == "partner":
        if method == "exact":
            return partner_probability(n, k, x)
        check_layout(n, k, x)
        if x < 2:
            return 0.0
        pairs = 1 if k == 2 else k
        return float(Fraction((n // k) * pairs * comb(n - 2, x - 2), comb(n, x)))
    if method == "eq4":
        return eq4_probability(n, k, t, x)
    return catastrophic_probability(n, k, t, x)
