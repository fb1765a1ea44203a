"""Intel ISA-L's erasure-code kernels through ctypes: the codec's fast backend where a ``libisal`` is found.

ISA-L applies any GF(2^8) matrix (polynomial ``0x11d``, the field of :mod:`ftkit.codec.gf256`) with
``ec_init_tables`` + ``ec_encode_data``, using the best kernels of the CPU (AVX2, AVX-512, GFNI). Given
ftkit's own matrices it produces ftkit's parity byte for byte, so the backend changes speed, never bytes
(the golden file holds for both). Loading it costs a ``dlopen``, where the numba kernels cost an import of
numba and a kernel load at the first use (0.5-1 s of CPU per process). ``ctypes`` releases the GIL during
the call, as the numba kernels do.

Where the library comes from, first found wins:

1. ``FTKIT_ISAL``: a path to a ``libisal`` shared library, or ``0`` to use ftkit's numba kernels;
2. the system's ``libisal`` (``libisal.so.2`` or ``libisal.so`` where the dynamic linker finds it, e.g.
   Debian's ``libisal2``);
3. the copy bundled in the ``pyeclib`` wheel (``pyeclib.libs/libisal*.so*``; ``pip install pyeclib``).

Without any, :func:`library` returns None and the numba kernels are used.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading

import numpy as np

from ..errors import CodecError

__all__ = ["ISAL_ENV", "library", "tables", "apply", "block_bytes"]

#: Environment variable: path of a libisal to use, or 0 for ftkit's own (numba) kernels.
ISAL_ENV = "FTKIT_ISAL"
#: ec_encode_data takes an int length: longer fragments are applied in pieces of this many bytes.
_MAX_CALL = 1 << 30

_loaded: dict[str, ctypes.CDLL | None] = {}
_lock = threading.Lock()


def _candidates() -> list[str]:
    # Sonames for dlopen, not ctypes.util.find_library: where ldconfig's cache lacks the library, that runs
    # gcc, collect2 and ld in every process that loads the codec (~0.1 s each), and their exit code 1 was
    # once taken for a rank's by the launcher.
    paths = ["libisal.so.2", "libisal.so"]
    try:
        spec = importlib.util.find_spec("pyeclib")   # locates the package without importing it
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        site = os.path.dirname(os.path.dirname(spec.origin))
        paths += sorted(glob.glob(os.path.join(site, "pyeclib.libs", "libisal*.so*")))
    return paths


def _open(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.ec_init_tables.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.ec_init_tables.restype = None
    lib.ec_encode_data.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p]
    lib.ec_encode_data.restype = None
    return lib


def library() -> ctypes.CDLL | None:
    """Return the loaded libisal, or None when ftkit's numba kernels are to be used (see the module doc).

    Raises
    ------
    CodecError
        If ``FTKIT_ISAL`` names a file that cannot be loaded as libisal.
    """
    choice = os.environ.get(ISAL_ENV, "").strip()
    with _lock:
        if choice in _loaded:
            return _loaded[choice]
        lib = None
        if choice == "0":
            pass
        elif choice:
            try:
                lib = _open(choice)
            except (OSError, AttributeError) as exc:
                raise CodecError(f"{ISAL_ENV}={choice!r}: cannot load it as libisal ({exc}); give the path "
                                 "of libisal.so, unset it to search the system and pyeclib, or 0 for "
                                 "ftkit's own kernels") from exc
        else:
            for path in _candidates():
                try:
                    lib = _open(path)
                    break
                except (OSError, AttributeError):
                    continue
        _loaded[choice] = lib
        return lib


#: Above this many output rows ISA-L's ``ec_encode_data`` passes over the inputs more than once (it applies a
#: few rows per pass); the fragments are then applied in blocks whose inputs stay in cache across the
#: passes. Measured on a 2-core EPYC (1 MiB L2, 16 MiB L3), 64 MiB per call: (16, 16) +15-20 %, (8, 8)
#: +3-5 %, (7, 7) +5-10 %; up to 6 rows blocking gains nothing (and costs 1-3 % at (4, 4)).
_BLOCK_ROWS = 6
#: Input bytes (all k fragments together) per block when blocking: 3 MiB (best of 2-4 MiB at k = 8, 16).
_BLOCK_WINDOW = 3 << 20


def block_bytes(n_in: int, n_out: int) -> int:
    """Bytes per fragment per ``ec_encode_data`` call for ``n_in`` inputs and ``n_out`` outputs."""
    if n_out <= _BLOCK_ROWS:
        return _MAX_CALL
    return max(64 << 10, (_BLOCK_WINDOW // n_in) & ~4095)


def tables(lib: ctypes.CDLL, matrix: np.ndarray) -> np.ndarray:
    """ISA-L's expanded multiplication tables (32 bytes per entry) of the ``rows x k`` uint8 ``matrix``."""
    rows = np.ascontiguousarray(matrix, dtype=np.uint8)
    r, k = rows.shape
    # On a 64-byte boundary: the kernels load 32-byte table entries in their inner loop, and an entry that
    # straddles two cache lines costs 1-3 % of an RS(4, 4) encode (measured against malloc's 16 bytes).
    space = np.zeros(32 * r * k + 64, np.uint8)
    skip = -space.ctypes.data % 64
    out = space[skip:skip + 32 * r * k]
    lib.ec_init_tables(k, r, rows.ctypes.data, out.ctypes.data)
    return out


def apply(lib: ctypes.CDLL, gf_tables: np.ndarray, inputs: list[int], outputs: list[int],
          nbytes: int) -> None:
    """``out_i = sum_j M[i, j] * in_j`` over the fragments at addresses ``inputs``/``outputs`` (``nbytes``).

    ``gf_tables`` are :func:`tables` of ``M`` (``len(outputs) x len(inputs)``); the caller keeps the
    fragments alive during the call. Applied in blocks of :func:`block_bytes`.
    """
    n_in, n_out = len(inputs), len(outputs)
    step = block_bytes(n_in, n_out)
    src_t, dst_t = ctypes.c_void_p * n_in, ctypes.c_void_p * n_out
    table_addr = gf_tables.ctypes.data
    if nbytes <= step:
        lib.ec_encode_data(nbytes, n_in, n_out, table_addr, src_t(*inputs), dst_t(*outputs))
        return
    for start in range(0, nbytes, step):
        lib.ec_encode_data(min(step, nbytes - start), n_in, n_out, table_addr,
                           src_t(*[a + start for a in inputs]), dst_t(*[a + start for a in outputs]))
