"""The erasure-code contract every ftkit code satisfies, and the argument checks they share.

Rules of the contract (what storage and checkpoint code may assume):

- A code has ``k`` data fragments (indices ``0 .. k-1``) and ``m`` parity fragments (``k .. k+m-1``);
  any ``k`` of the ``k + m`` fragments determine all of them.
- Fragments are 1-D, C-contiguous ``numpy.uint8`` arrays, all of one call of the same length (any length,
  including 0). Views into larger buffers are fine and are never copied; to code an array of another dtype,
  pass ``a.reshape(-1).view(np.uint8)``.
- The code works byte by byte: byte ``t`` of every parity fragment depends only on byte ``t`` of the data
  fragments. Hence encoding chunk by chunk (``encode_into`` on views of the same offsets) gives exactly the
  bytes of encoding the whole, and fragments may be split at any offset.
- ``decode`` and ``reconstruct`` return the caller's own array for a fragment it gave and a new array for
  each fragment they rebuild; outputs given to ``encode_into`` must not overlap the inputs.
- Misuse raises :class:`ftkit.errors.CodecError` naming the fragment or index at fault.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import CodecError

__all__ = ["ErasureCode", "check_fragment", "check_data", "check_outputs", "check_fragments", "check_indices"]


def check_fragment(array: object, what: str, *, writeable: bool = False) -> np.ndarray:
    """Return ``array`` if it is a 1-D C-contiguous uint8 numpy array, else raise naming ``what``.

    Raises
    ------
    CodecError
        If the array has another type, dtype, dimension or layout, or is read-only while ``writeable``.
    """
    if not isinstance(array, np.ndarray):
        raise CodecError(f"{what} must be a numpy.ndarray of uint8, got {type(array).__name__}")
    if array.dtype != np.uint8:
        raise CodecError(
            f"{what} has dtype {array.dtype}; fragments are uint8: pass a.reshape(-1).view(np.uint8)"
        )
    if array.ndim != 1:
        raise CodecError(f"{what} has {array.ndim} dimensions; fragments are 1-D: pass a.reshape(-1)")
    if not array.flags.c_contiguous:
        raise CodecError(f"{what} is not contiguous; pass np.ascontiguousarray(a)")
    if writeable and not array.flags.writeable:
        raise CodecError(f"{what} is read-only; the code must write into it")
    return array


def _is_fragment(array: object, writeable: bool = False) -> bool:
    # The fast path of check_fragment (no message formatting): codecs are called per chunk when streaming.
    return (
        isinstance(array, np.ndarray)
        and array.dtype == np.uint8
        and array.ndim == 1
        and array.flags.c_contiguous
        and (not writeable or array.flags.writeable)
    )


def _check_all(arrays: Sequence[object], name: Callable[[int], str], writeable: bool = False) -> int:
    # Check every array is a fragment and all have one length; return it. Messages name the culprit.
    for t, a in enumerate(arrays):
        if not _is_fragment(a, writeable):
            check_fragment(a, name(t), writeable=writeable)
    if not arrays:
        return 0
    n = arrays[0].shape[0]  # type: ignore[attr-defined]
    for t, a in enumerate(arrays):
        if a.shape[0] != n:  # type: ignore[attr-defined]
            raise CodecError(
                f"{name(t)} has {a.shape[0]} bytes but {name(0)} has {n}: "  # type: ignore[attr-defined]
                "all fragments of a call must have the same length"
            )
    return int(n)


def check_data(data: Sequence[np.ndarray], k: int) -> tuple[list[np.ndarray], int]:
    """Check ``k`` equal-length data fragments; return them as a list and their length in bytes.

    Raises
    ------
    CodecError
        If there are not exactly ``k`` fragments or one of them is not a valid fragment.
    """
    if isinstance(data, np.ndarray) and data.ndim != 2:
        raise CodecError("data must be a sequence of k 1-D uint8 arrays (or a 2-D array with k rows)")
    items = list(data)
    if len(items) != k:
        raise CodecError(f"expected k={k} data fragments, got {len(items)}")
    return items, _check_all(items, lambda j: f"data fragment {j}")


def check_indices(indices: Sequence[int], limit: int, what: str) -> list[int]:
    """Check a list of distinct integer indices in ``0 .. limit-1``; return them as Python ints.

    Raises
    ------
    CodecError
        If an index is not an integer, out of range or repeated.
    """
    out: list[int] = []
    for idx in indices:
        if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, (int, np.integer)):
            raise CodecError(f"{what} {idx!r} is not an integer")
        i = int(idx)
        if not 0 <= i < limit:
            raise CodecError(f"{what} {i} is out of range 0..{limit - 1}")
        if i in out:
            raise CodecError(f"{what} {i} is given twice")
        out.append(i)
    return out


def check_outputs(outputs: Sequence[np.ndarray], count: int, nbytes: int, what: str) -> list[np.ndarray]:
    """Check ``count`` writeable output fragments of ``nbytes`` bytes each.

    Raises
    ------
    CodecError
        If the count or a length is wrong or an output is not a writeable fragment.
    """
    items = list(outputs)
    if len(items) != count:
        raise CodecError(f"expected {count} {what} arrays, got {len(items)}")
    for i, a in enumerate(items):
        if _is_fragment(a, True) and a.shape[0] == nbytes:
            continue
        check_fragment(a, f"{what} {i}", writeable=True)
        if a.shape[0] != nbytes:
            raise CodecError(
                f"{what} {i} has {a.shape[0]} bytes, expected {nbytes} (the data fragment length)"
            )
    return items


def check_fragments(fragments: Mapping[int, np.ndarray], k: int, m: int) -> tuple[dict[int, np.ndarray], int]:
    """Check a mapping index -> fragment for a ``(k, m)`` code; return it with int keys and the length.

    Raises
    ------
    CodecError
        If an index is out of range or repeated, a fragment is invalid, lengths differ, or fewer than ``k``
        fragments are given.
    """
    if not isinstance(fragments, Mapping):
        raise CodecError(f"fragments must be a dict index -> uint8 array, got {type(fragments).__name__}")
    keys = check_indices(list(fragments.keys()), k + m, "fragment index")
    out = {i: fragments[key] for i, key in zip(keys, fragments.keys(), strict=True)}
    if len(out) < k:
        missing = sorted(set(range(k + m)) - set(out))
        raise CodecError(
            f"cannot decode: need at least k={k} of the {k + m} fragments, got {len(out)} "
            f"(have {sorted(out)}, missing {missing}); more than m={m} fragments are lost"
        )
    order = sorted(out)
    nbytes = _check_all([out[i] for i in order], lambda t: f"fragment {order[t]}")
    return out, nbytes


class ErasureCode(abc.ABC):
    """A systematic ``(k, m)`` erasure code over byte fragments (see the module docstring for the rules).

    Implementations provide :meth:`encode_into`, :meth:`reconstruct` and :meth:`reconstruct_into`;
    :meth:`encode` and :meth:`decode` are derived from them.
    """

    #: Number of data fragments.
    k: int
    #: Number of parity fragments.
    m: int

    @abc.abstractmethod
    def encode_into(
        self,
        data: Sequence[np.ndarray],
        parity_out: Sequence[np.ndarray],
        parity_indices: Sequence[int] | None = None,
    ) -> None:
        """Compute parity fragments into caller-provided arrays.

        Parameters
        ----------
        data : sequence of k uint8 arrays
            The data fragments, all of the same length in bytes.
        parity_out : sequence of uint8 arrays
            Writeable arrays of the same length; one per computed parity row.
        parity_indices : sequence of int, optional
            Parity rows (``0 .. m-1``) to compute, ``parity_out[t]`` receiving row ``parity_indices[t]``;
            all ``m`` rows in order if omitted.

        Raises
        ------
        CodecError
            On a wrong number of fragments, bad fragment, length mismatch or bad parity index.
        """

    @abc.abstractmethod
    def reconstruct(self, fragments: Mapping[int, np.ndarray], wanted: Sequence[int]) -> list[np.ndarray]:
        """Rebuild the fragments ``wanted`` (data or parity indices) from any ``k`` or more fragments.

        Parameters
        ----------
        fragments : dict int -> uint8 array
            Surviving fragments by index (``0 .. k-1`` data, ``k .. k+m-1`` parity), all of one length.
        wanted : sequence of int
            Indices of the fragments to return, in the order wanted.

        Returns
        -------
        list of numpy.ndarray
            One array per wanted index: the caller's own array if that fragment was given, else a new one.

        Raises
        ------
        CodecError
            If fewer than ``k`` fragments are given, or an index, fragment or length is wrong.
        """

    @abc.abstractmethod
    def reconstruct_into(self, fragments: Mapping[int, np.ndarray], wanted: Sequence[int],
                         out: Sequence[np.ndarray]) -> None:
        """Rebuild the missing fragments ``wanted`` into caller-provided arrays (no allocation: the decode of
        a stream into reused chunk buffers).

        Parameters
        ----------
        fragments : dict int -> uint8 array
            Surviving fragments by index, all of one length; none of them in ``wanted``.
        wanted : sequence of int
            Indices of the fragments to rebuild, ``out[t]`` receiving fragment ``wanted[t]``.
        out : sequence of uint8 arrays
            Writeable arrays of the fragments' length, overlapping no fragment.

        Raises
        ------
        CodecError
            If fewer than ``k`` fragments are given, a wanted fragment is among them, an output overlaps a
            fragment, or an index, fragment, output or length is wrong.
        """

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Return the ``m`` parity fragments of ``k`` data fragments (new arrays).

        Raises
        ------
        CodecError
            On a wrong number of fragments, bad fragment or length mismatch.
        """
        items, nbytes = check_data(data, self.k)
        parity = [np.empty(nbytes, dtype=np.uint8) for _ in range(self.m)]
        self.encode_into(items, parity)
        return parity

    def decode(self, fragments: Mapping[int, np.ndarray]) -> list[np.ndarray]:
        """Return all ``k`` data fragments in order, rebuilding the missing ones from any ``k`` fragments.

        Raises
        ------
        CodecError
            If fewer than ``k`` fragments are given, or an index, fragment or length is wrong.
        """
        return self.reconstruct(fragments, list(range(self.k)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self.k}, m={self.m})"
