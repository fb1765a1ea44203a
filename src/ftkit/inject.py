"""Fault injection for tests and demos: bit flips, rank and node kills, file damage.

Every function here injects a real fault: it flips a real bit in memory, sends a real SIGKILL, deletes or
damages a real file. Tests use them to show that ftkit detects and survives the fault.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import numpy as np

__all__ = ["flip_bit", "kill_self", "kill_pid", "corrupt_file", "truncate_file", "delete_node_dir"]


def flip_bit(array: np.ndarray, index: int | tuple[int, ...], bit: int) -> tuple[float, float]:
    """Flip bit ``bit`` (0 = least significant) of element ``index`` of ``array``, in place.

    Returns the element's value before and after, as floats (for reports).

    Raises
    ------
    ValueError
        If ``bit`` is outside the element's width or the array is not writeable.
    """
    if not array.flags.writeable:
        raise ValueError("flip_bit needs a writeable array")
    nbits = array.dtype.itemsize * 8
    if not 0 <= bit < nbits:
        raise ValueError(f"bit {bit} is outside 0..{nbits - 1} for dtype {array.dtype}")
    flat_index = np.ravel_multi_index(index, array.shape) if isinstance(index, tuple) else int(index)
    view = array.reshape(-1, order="A") if array.flags.c_contiguous or array.flags.f_contiguous else None
    if view is None:
        raise ValueError("flip_bit needs a contiguous array")
    before = float(view[flat_index])
    raw = view[flat_index:flat_index + 1].view(np.uint8)
    raw[bit // 8] ^= np.uint8(1 << (bit % 8))
    return before, float(view[flat_index])


def kill_self() -> None:
    """SIGKILL the calling process (no cleanup, no atexit: as a crashed node would)."""
    os.kill(os.getpid(), signal.SIGKILL)


def kill_pid(pid: int) -> None:
    """SIGKILL process ``pid`` from outside; a process that is already gone is ignored."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def corrupt_file(path: str | os.PathLike[str], offset: int = -1, mask: int = 0x01) -> None:
    """XOR the byte at ``offset`` of file ``path`` with ``mask`` (negative offsets count from the end)."""
    p = Path(path)
    size = p.stat().st_size
    pos = offset if offset >= 0 else size + offset
    if not 0 <= pos < size:
        raise ValueError(f"offset {offset} is outside {path} ({size} bytes)")
    with open(p, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def truncate_file(path: str | os.PathLike[str], size: int) -> None:
    """Cut file ``path`` down to ``size`` bytes."""
    os.truncate(path, size)


def delete_node_dir(path: str | os.PathLike[str]) -> None:
    """Delete a node-local directory and everything in it (an emulated node's storage loss)."""
    shutil.rmtree(path, ignore_errors=True)
