"""Global layouts: which regions of a global N-d array a rank's local buffer holds.

A :class:`Layout` is the global shape plus a list of :class:`Box` es; a box maps the region
``local[l0:l0+s0, l1:l1+s1, ...]`` of the rank's C-order buffer to ``global[g0:g0+s0, ...]``. A plain
``global_shape``/``offset`` pair is the one-box case (the whole buffer); a block-cyclic matrix has one box per
local block. Layouts are stored per section in the checkpoint header (see
:mod:`ftkit.storage.format.container`), so a checkpoint written by N ranks can be read back by M ranks with
any other decomposition.

Rules a set of layouts (one per rank, same global shape) must follow to describe one array:

- *tiling*: every global element is in exactly one box of one rank (no overlap, no hole); or
- *replicated*: every rank holds the whole array in one box (a step counter every rank keeps): a reader takes
  any one copy.

:func:`coverage_problem` checks these rules; :func:`box_runs` turns the intersection of an old and a new box
into the contiguous byte runs to copy (a C-order box inside a buffer is a set of contiguous runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import FormatError

__all__ = ["Box", "Layout", "parse_layout", "coverage_problem", "box_runs", "Runs"]

#: Most boxes one section's layout may hold (a hostile header must not make the reader loop for ever).
MAX_BOXES = 1 << 20
_MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Box:
    """A region of the local buffer (``local`` offset) holding ``global[start : start + shape]``."""

    local: tuple[int, ...]
    start: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def stop(self) -> tuple[int, ...]:
        return tuple(a + s for a, s in zip(self.start, self.shape, strict=True))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        return "[" + ", ".join(f"{a}:{b}" for a, b in zip(self.start, self.stop, strict=True)) + "]"


@dataclass(frozen=True)
class Layout:
    """Where a rank's buffer sits in a global array: the global shape and the boxes of the buffer."""

    global_shape: tuple[int, ...]
    boxes: tuple[Box, ...]
    #: "F": the user's array is the transpose of the stored global array (a column-major local buffer, as a
    #: ScaLAPACK matrix's, stored as its C-order transpose); exporters transpose it back.
    order: str = "C"

    @classmethod
    def of_box(cls, global_shape: Sequence[int], offset: Sequence[int], local_shape: Sequence[int]) -> Layout:
        """The one-box layout: the whole local buffer at ``offset`` of ``global_shape``."""
        shape = tuple(int(d) for d in local_shape)
        return cls(tuple(int(d) for d in global_shape), (Box((0,) * len(shape), tuple(int(o) for o in offset),
                                                              shape),))

    @property
    def replicated(self) -> bool:
        """True if the buffer holds the whole global array in one box."""
        return (len(self.boxes) == 1 and self.boxes[0].shape == self.global_shape
                and not any(self.boxes[0].start))

    @property
    def size(self) -> int:
        """Number of global elements the boxes hold."""
        return sum(b.size for b in self.boxes)

    def describe(self, limit: int = 4) -> str:
        """Short text naming the boxes (for messages)."""
        shown = ", ".join(str(b) for b in self.boxes[:limit])
        return shown + (f" ... ({len(self.boxes)} boxes)" if len(self.boxes) > limit else "")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"global_shape": list(self.global_shape),
                               "boxes": [[list(b.local), list(b.start), list(b.shape)] for b in self.boxes]}
        if self.order != "C":
            doc["order"] = self.order
        return doc


def parse_layout(doc: Any, local_shape: Sequence[int], where: str = "") -> Layout:
    """Parse and check a layout (from a header or a peer) for a buffer of ``local_shape``.

    Every box must lie inside the local buffer and inside the global array, with as many dimensions as both.

    Raises
    ------
    FormatError
        Naming the field that is malformed or out of bounds.
    """
    if not isinstance(doc, dict) or not {"global_shape", "boxes"} <= set(doc) <= {"global_shape", "boxes",
                                                                                   "order"}:
        raise FormatError(f"{where}layout is not an object of 'global_shape', 'boxes' (and 'order')")
    order = doc.get("order", "C")
    if order not in ("C", "F"):
        raise FormatError(f"{where}layout order {_short(order)} is not 'C' or 'F'")
    local_shape = tuple(local_shape)
    ndim = len(local_shape)
    gshape = _ints(doc["global_shape"], f"{where}layout global_shape")
    if len(gshape) != ndim:
        raise FormatError(f"{where}layout global_shape {list(gshape)} has {len(gshape)} dimensions, the "
                          f"array has {ndim}")
    raw = doc["boxes"]
    if not isinstance(raw, list) or len(raw) > MAX_BOXES:
        raise FormatError(f"{where}layout boxes is not a list of at most {MAX_BOXES} boxes")
    boxes = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 3:
            raise FormatError(f"{where}layout box {_short(item)} is not [local, start, shape]")
        local, start, shape = (_ints(v, f"{where}layout box") for v in item)
        if not len(local) == len(start) == len(shape) == ndim:
            raise FormatError(f"{where}layout box {_short(item)} does not have {ndim} dimensions")
        if any(lo + s > d for lo, s, d in zip(local, shape, local_shape, strict=True)):
            raise FormatError(f"{where}layout box {_short(item)} lies outside the local buffer of shape "
                              f"{list(local_shape)}")
        if any(g + s > d for g, s, d in zip(start, shape, gshape, strict=True)):
            raise FormatError(f"{where}layout box {_short(item)} lies outside the global shape "
                              f"{list(gshape)}")
        if math.prod(shape):
            boxes.append(Box(local, start, shape))
    return Layout(gshape, tuple(boxes), order)


def coverage_problem(name: str, layouts: Sequence[Layout]) -> str | None:
    """Why the ``layouts`` of the ranks (index = rank) do not describe array ``name`` once, or None.

    Checks the same global shape everywhere, then either replication (every rank holds it all) or an exact
    tiling (no overlap, no hole).
    """
    shapes = sorted({lay.global_shape for lay in layouts})
    if len(shapes) > 1:
        return f"array {name!r}: the ranks give different global shapes {[list(s) for s in shapes]}"
    if len({lay.order for lay in layouts}) > 1:
        return f"array {name!r}: some ranks hold a matrix (order 'F'), others a plain array"
    if not layouts:
        return None
    gshape = shapes[0]
    if all(lay.replicated for lay in layouts):
        return None
    total = math.prod(gshape)
    held = [(r, b) for r, lay in enumerate(layouts) for b in lay.boxes]
    overlap = _first_overlap(held)
    if overlap is not None:
        (ra, a), (rb, b) = overlap
        return (f"array {name!r}: the boxes overlap: rank {ra} holds {a} and rank {rb} holds {b} (each "
                "global element must be held by exactly one rank, or the whole array by every rank)")
    covered = sum(b.size for _, b in held)
    if covered != total:
        return (f"array {name!r}: the boxes leave holes: they hold {covered} of the {total} elements of the "
                f"global shape {list(gshape)} ({_hole(gshape, [b for _, b in held])})")
    return None


def _first_overlap(held: list[tuple[int, Box]]) -> tuple[tuple[int, Box], tuple[int, Box]] | None:
    """The first pair of boxes that overlap (sweep along axis 0, vectorised over the candidates)."""
    if len(held) < 2:
        return None
    lo = np.array([b.start for _, b in held], dtype=np.int64)
    hi = np.array([b.stop for _, b in held], dtype=np.int64)
    order = np.argsort(lo[:, 0], kind="stable")
    lo, hi = lo[order], hi[order]
    for i in range(len(order) - 1):
        last = int(np.searchsorted(lo[:, 0], hi[i, 0], side="left"))
        if last <= i + 1:
            continue
        c_lo, c_hi = lo[i + 1:last], hi[i + 1:last]
        hit = np.all((c_lo < hi[i]) & (lo[i] < c_hi), axis=1)
        if hit.any():
            j = i + 1 + int(np.argmax(hit))
            return held[int(order[i])], held[int(order[j])]
    return None


def _hole(gshape: tuple[int, ...], boxes: list[Box]) -> str:
    """Name one global element no box holds (boxes known not to overlap and not to cover everything)."""
    # The first element along axis 0 whose slab is not full: enough to point the user at the gap.
    counts = np.zeros(gshape[0], dtype=np.int64)
    per_row = math.prod(gshape[1:])
    for b in boxes:
        counts[b.start[0]:b.stop[0]] += b.size // b.shape[0]
    row = int(np.argmax(counts < per_row))
    return f"e.g. in the global index {row} along axis 0"


@dataclass(frozen=True)
class Runs:
    """Contiguous byte runs to copy: ``nbytes[i]`` bytes from ``src[i]`` to ``dst[i]`` (sorted by ``src``)."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray

    @property
    def total(self) -> int:
        return int(self.nbytes.sum())

    @staticmethod
    def concat(parts: Sequence[Runs]) -> Runs:
        if not parts:
            e = np.zeros(0, np.int64)
            return Runs(e, e, e)
        src = np.concatenate([p.src for p in parts])
        order = np.argsort(src, kind="stable")
        return Runs(src[order], np.concatenate([p.dst for p in parts])[order],
                    np.concatenate([p.nbytes for p in parts])[order])


def box_runs(old: Layout, old_shape: Sequence[int], new: Layout, new_shape: Sequence[int],
             itemsize: int) -> Runs:
    """The byte runs copying every element both ``old`` (a stored buffer of ``old_shape``) and ``new`` (a
    buffer of ``new_shape``) hold, from the old buffer's bytes to the new buffer's bytes."""
    parts = []
    for nb in new.boxes:
        for ob in old.boxes:
            lo = tuple(max(a, b) for a, b in zip(ob.start, nb.start, strict=True))
            hi = tuple(min(a, b) for a, b in zip(ob.stop, nb.stop, strict=True))
            if any(h <= lo_ for lo_, h in zip(lo, hi, strict=True)):
                continue
            shape = tuple(h - lo_ for lo_, h in zip(lo, hi, strict=True))
            src_lo = tuple(o + a - s for o, a, s in zip(ob.local, lo, ob.start, strict=True))
            dst_lo = tuple(o + a - s for o, a, s in zip(nb.local, lo, nb.start, strict=True))
            parts.append(_runs_of(tuple(old_shape), src_lo, tuple(new_shape), dst_lo, shape, itemsize))
    return Runs.concat(parts)


def _runs_of(src_shape: tuple[int, ...], src_lo: tuple[int, ...], dst_shape: tuple[int, ...],
             dst_lo: tuple[int, ...], shape: tuple[int, ...], itemsize: int) -> Runs:
    """Runs of one sub-box: contiguous over the trailing axes the box fills in both buffers."""
    ndim = len(shape)
    k = ndim - 1
    while k > 0 and shape[k] == src_shape[k] == dst_shape[k]:
        k -= 1
    run = shape[k] * math.prod(shape[k + 1:]) * itemsize
    src_strides = _strides(src_shape, itemsize)
    dst_strides = _strides(dst_shape, itemsize)
    src = np.array(sum(a * s for a, s in zip(src_lo, src_strides, strict=True)), dtype=np.int64).reshape(1)
    dst = np.array(sum(a * s for a, s in zip(dst_lo, dst_strides, strict=True)), dtype=np.int64).reshape(1)
    for axis in range(k):  # outer axes: one run per index tuple
        idx = np.arange(shape[axis], dtype=np.int64)
        src = (src[:, None] + idx[None, :] * src_strides[axis]).reshape(-1)
        dst = (dst[:, None] + idx[None, :] * dst_strides[axis]).reshape(-1)
    return Runs(src, dst, np.full(src.shape, run, dtype=np.int64))


def _strides(shape: tuple[int, ...], itemsize: int) -> list[int]:
    out, acc = [], itemsize
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _ints(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) > 64 or any(
            isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= _MAX_INT for d in v):
        raise FormatError(f"{what} {_short(v)} is not a list of non-negative integers")
    return tuple(v)


def _short(v: Any, limit: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[:limit] + "..."
