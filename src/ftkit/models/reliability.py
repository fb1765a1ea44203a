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

from dataclasses import dataclass
from fractions import Fraction
from math import comb
from numbers import Integral
from typing import Literal, overload

from ..errors import ModelError

__all__ = [
    "SCHEMES",
    "Scheme",
    "get_scheme",
    "threshold_scheme",
    "eq4_probability",
    "catastrophic_probability",
    "partner_probability",
    "check_layout",
]


def check_layout(n: int, k: int, x: int, t: int | None = None) -> tuple[int, int, int, int | None]:
    """Validate a layout of ``n`` nodes in groups of ``k`` with ``x`` failures and tolerance ``t``.

    Returns
    -------
    (n, k, x, t)
        The values as Python ints (numpy integers are accepted).

    Raises
    ------
    ModelError
        If a value is not an integer, ``k < 2``, ``k`` does not divide ``n``, ``x`` is outside ``[0, n]``
        or ``t`` is outside ``[0, k-1]``; the message names the value and what is allowed.
    """
    for name, value in (("n (nodes)", n), ("k (group size)", k), ("x (failed nodes)", x)):
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ModelError(f"{name} must be an integer, got {value!r}")
    n, k, x = int(n), int(k), int(x)
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
        if isinstance(t, bool) or not isinstance(t, Integral):
            raise ModelError(f"t (tolerated failures per group) must be an integer, got {t!r}")
        t = int(t)
        if not 0 <= t < k:
            raise ModelError(f"t = {t} tolerated failures per group must be in [0, k-1] = [0, {k - 1}]: "
                             f"a group of {k} cannot survive losing all its nodes")
    return n, k, x, t


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
    n, k, x, _ = check_layout(n, k, x, t)
    t = int(t)
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
    while survivable and survivable[-1] == 0:
        survivable = survivable[:-1]
    if x > (n // k) * (len(survivable) - 1):
        return Fraction(1)  # more failures than all groups together can absorb
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
    n, k, x, _ = check_layout(n, k, x, t)
    t = int(t)
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
    n, k, x, _ = check_layout(n, k, x)
    result = _loss_fraction(n, k, x, [_ring_independent_sets(k, j) for j in range(k // 2 + 1)])
    return result if exact else float(result)


@dataclass(frozen=True)
class Scheme:
    """A protection scheme of a group of ``k`` nodes, as the reliability model sees it.

    Attributes
    ----------
    name
        Short name (``rs``, ``xor``, ``partner``, or ``t=<T>`` for a fixed tolerance).
    label
        Name in tables and plots.
    ring
        Partner copy on a ring (data lost iff two ring neighbours fail) instead of a threshold code.
    fixed_tolerance
        Failures tolerated per group whatever ``k`` (``None``: ``k // 2``, FTI's RS layout).
    """

    name: str
    label: str
    ring: bool = False
    fixed_tolerance: int | None = None

    def tolerance(self, k: int) -> int:
        """Return the failures per group the scheme survives in the worst case for group size ``k``."""
        if self.ring:
            return 1
        return k // 2 if self.fixed_tolerance is None else self.fixed_tolerance

    def probability(self, n: int, k: int, x: int, *, method: str = "exact") -> float:
        """Return ``Pr(x_Ct | x)`` for ``x`` failures among ``n`` nodes in groups of ``k``.

        Parameters
        ----------
        n, k, x
            Nodes, group size, simultaneous failures.
        method
            ``"exact"`` or ``"eq4"`` (the paper's formula; for partner copy, eq. 4's counting with the
            ring's neighbour pairs in place of ``C(k, t+1)``, likewise an over-count).

        Raises
        ------
        ModelError
            On an unknown method or an invalid layout (e.g. a tolerance ``>= k``).
        """
        if method not in ("exact", "eq4"):
            raise ModelError(f"unknown method {method!r}: use 'exact' or 'eq4'")
        if not self.ring:
            t = self.tolerance(k)
            if method == "eq4":
                return eq4_probability(n, k, t, x)
            return catastrophic_probability(n, k, t, x)
        if method == "exact":
            return partner_probability(n, k, x)
        n, k, x, _ = check_layout(n, k, x)
        if x < 2:
            return 0.0
        pairs = 1 if k == 2 else k
        return float(Fraction((n // k) * pairs * comb(n - 2, x - 2), comb(n, x)))


#: Protection schemes compared by default (reference 002, Figure 5(e)/(f), plus ftkit's L2 partner copy).
SCHEMES = {
    "rs": Scheme("rs", "RS (FTI, t=k/2)"),
    "xor": Scheme("xor", "XOR (SCR, t=1)", fixed_tolerance=1),
    "partner": Scheme("partner", "partner copy (ring)", ring=True),
}


def get_scheme(name: str) -> Scheme:
    """Return the scheme called ``name``: ``rs``, ``xor``, ``partner``, or ``t=T`` (threshold code, fixed T).

    Raises
    ------
    ModelError
        If the name is unknown or ``T`` is not a non-negative integer.
    """
    key = name.strip().lower()
    if key in SCHEMES:
        return SCHEMES[key]
    if key.startswith("t="):
        try:
            t = int(key[2:])
        except ValueError:
            t = -1
        if t < 0:
            raise ModelError(f"scheme {name!r}: the tolerance after 't=' must be an integer >= 0")
        return threshold_scheme(t)
    raise ModelError(f"unknown protection scheme {name!r}: use one of {', '.join(SCHEMES)} or t=<T>")


def threshold_scheme(t: int) -> Scheme:
    """Return a threshold code that tolerates ``t`` failures per group whatever the group size."""
    return Scheme(f"t={t}", f"threshold code, t={t}", fixed_tolerance=t)
