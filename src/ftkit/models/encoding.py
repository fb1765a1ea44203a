"""Reed-Solomon encoding time model of reference 002, equations (1) and (2).

A group member encodes its checkpoint file of ``s`` bytes in ``t = ceil(s/z)`` blocks of ``z`` bytes. For
each block it reads the block (``r`` s/byte), exchanges it with the ``m = k`` members of its group (latency
``a`` s, ``b`` s/byte, i.e. bandwidth ``1/b``), multiply-accumulates the ``m`` data blocks into its parity
block (``e`` s/byte per data block) and writes the parity block (``w`` s/byte)::

    T = t · ( r·z + m·(a + b·z + e·z) + w·z )          (1)
    T = t · m · e · z = m · e · s                      (2)   (storage and network neglected)

Both are linear in the checkpoint size ``s`` and the group size ``k``. With a last, shorter block the sum
over blocks gives ``T = s·(r + w) + m·(t·a + s·(b + e))``, which is what :meth:`EncodingModel.predict`
evaluates. Decoding costs about twice the encoding (regenerate the lost data, then re-encode the lost
parity), per the paper.

ftkit's addition (not in the paper): an optional fixed cost ``f`` seconds per member and per encoding
(opening its data file, creating and closing its parity file, buffers), independent of ``s`` and ``k``::

    T = f + t · ( r·z + m·(a + b·z + e·z) + w·z )      (1f)

With ``f = 0`` (the default) this is eq. (1) unchanged; eq. (2) never includes ``f``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..errors import ModelError

__all__ = ["EncodingModel", "fit_linear", "fit_proportional"]

#: Default block size z (bytes) of the model and of the measurements.
DEFAULT_BLOCK = 1 << 20


@dataclass(frozen=True)
class EncodingModel:
    """Parameters of eq. (1); all per-byte terms in seconds per byte.

    Attributes
    ----------
    e
        Encoding time per byte per data block multiply-accumulated into a parity block (s/byte).
    r, w
        Local read and write time per byte (s/byte).
    a
        Network latency per message (s).
    b
        Network time per byte (s/byte) = 1 / bandwidth.
    block_size
        Block size ``z`` (bytes).
    f
        ftkit's addition to eq. (1): fixed seconds per member and per encoding (file open/create/close),
        added by :meth:`predict` when ``fixed`` is true. Default 0 (eq. (1) as in the paper).
    """

    e: float
    r: float = 0.0
    w: float = 0.0
    a: float = 0.0
    b: float = 0.0
    block_size: int = DEFAULT_BLOCK
    f: float = 0.0

    def __post_init__(self) -> None:
        for name in ("e", "r", "w", "a", "b", "f"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ModelError(f"encoding model parameter {name} = {value!r} must be a finite number >= 0")
        if self.block_size < 1:
            raise ModelError(f"block size z = {self.block_size} must be a positive number of bytes")

    def predict(self, size: int, group_size: int, *, network: bool = True, storage: bool = True,
                fixed: bool = True) -> float:
        """Return eq. (1) plus ``f`` (eq. (1f)): seconds for one group member to encode ``size`` bytes.

        Parameters
        ----------
        size
            Checkpoint file size ``s`` (bytes), >= 0.
        group_size
            Group size ``k`` (= ``m``, the number of encoding steps per block), >= 1.
        network
            Include the ``a`` and ``b`` terms (off for an in-process encoding with no messages).
        storage
            Include the ``r`` and ``w`` terms.
        fixed
            Include the fixed per-encoding term ``f`` (no effect when ``f = 0``, the default).

        Raises
        ------
        ModelError
            On a negative size or a group size below 1.
        """
        _check(size, group_size)
        blocks = math.ceil(size / self.block_size)
        m = group_size
        total = m * self.e * size
        if network:
            total += m * (blocks * self.a + self.b * size)
        if storage:
            total += (self.r + self.w) * size
        if fixed:
            total += self.f
        return total

    def predict_simplified(self, size: int, group_size: int) -> float:
        """Return eq. (2): ``m · e · s`` seconds (storage and network neglected).

        Raises
        ------
        ModelError
            On a negative size or a group size below 1.
        """
        _check(size, group_size)
        return group_size * self.e * size

    def to_dict(self) -> dict[str, float]:
        """Return the parameters as a JSON-ready dict."""
        return {key: float(value) for key, value in asdict(self).items()}


def _check(size: int, group_size: int) -> None:
    if size < 0:
        raise ModelError(f"checkpoint size {size} must be >= 0 bytes")
    if group_size < 1:
        raise ModelError(f"group size {group_size} must be >= 1")


def fit_linear(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Return ``(intercept, slope)`` of the least-squares line through the points, intercept clipped at 0.

    Used for the ping-pong fit ``time = a + b·bytes``. A negative intercept (noise on a tiny latency) is
    clipped to 0 and the slope refitted through the origin, so the model stays physical.

    Raises
    ------
    ModelError
        With fewer than two distinct x values.
    """
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ModelError("a linear fit needs at least two points with distinct x")
    n = len(xs)
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    slope = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    if intercept < 0:
        return 0.0, fit_proportional(xs, ys)
    return intercept, max(slope, 0.0)


def fit_proportional(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Return the least-squares slope of ``y = c·x`` (line through the origin), clipped at 0.

    Raises
    ------
    ModelError
        If there are no points or all x are 0.
    """
    sxx = math.fsum(x * x for x in xs)
    if len(xs) != len(ys) or sxx == 0:
        raise ModelError("a proportional fit needs at least one point with x != 0")
    return max(math.fsum(x * y for x, y in zip(xs, ys, strict=True)) / sxx, 0.0)
