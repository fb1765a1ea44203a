"""The on-disk format of differential L4 checkpoints (dCP), and reading one in place.

Written by :class:`ftkit.checkpoint.dcp.DcpWriter`; read here, so storage-level readers (elastic recovery,
``ftkit export``) can use a differential checkpoint without rebuilding the rank's file first.

On-disk layout, per rank, in one directory (``glbl_dir/<exec_id>/l4dcp``, :func:`dcp_dir`)::

    dcp-r<rank>-g<gen>.blocks      append-only block store of generation <gen>
    dcp-r<rank>-c<id>.map          map of checkpoint <id>: where each block lies, its hash, the file digest

A map file is ``MAGIC``, a little-endian uint32 header length, a JSON header (rank, checkpoint id,
generation, block size, total size, number of blocks, xxh3-128 of the whole content), the block offsets
(uint64) and block hashes (2 x uint64 each), and an xxh3-64 of everything before it. A reader may rely on:
a committed map names only durable blocks, and the bytes it points to are never rewritten (the writer's
rules, see :mod:`ftkit.checkpoint.dcp`).

:class:`DcpSource` is a :class:`~ftkit.storage.source.ByteSource` of checkpoint ``id`` of a rank: byte
``p`` of the logical file is byte ``p % block_size`` of block ``p // block_size``, read where it lies in the
block store. It verifies the map's checksum and that every block lies inside the store; the bytes
themselves are verified by the reader against the checkpoint header's digests (the header is in the file's
first bytes, checked against the manifest).
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from .._paths import inside
from ..errors import CheckpointNotFoundError, CorruptionError, FormatError, StorageError
from .source import ByteSource, pread_exact

__all__ = ["DCP_DIR", "DcpMap", "DcpSource", "MAGIC", "MAP_RE", "GEN_RE", "dcp_dir", "dcp_map_path",
           "store_path", "list_dcp_ids", "block_hash", "encode_map", "read_dcp_map"]

#: Name of the differential L4 directory below ``glbl_dir/<exec_id>``.
DCP_DIR = "l4dcp"
MAGIC = b"FTKDCP01"
_VERSION = 1
#: File names of maps and block stores (rank and checkpoint id / generation).
MAP_RE = re.compile(r"^dcp-r(\d+)-c(\d+)\.map$")
GEN_RE = re.compile(r"^dcp-r(\d+)-g(\d+)\.blocks$")
_MAX_BLOCK = 1 << 30  # bytes: a larger block size in a map is a damaged (or forged) header


def dcp_dir(glbl_dir: str | os.PathLike[str], exec_id: str) -> Path:
    """Directory of the differential L4 block stores and maps of run ``exec_id`` (inside ``glbl_dir``).

    Raises
    ------
    UnsafePathError
        If ``exec_id`` would lead outside ``glbl_dir``.
    """
    return inside(glbl_dir, exec_id, DCP_DIR, what="differential L4 directory")


@dataclass(frozen=True)
class DcpMap:
    """A checkpoint's block map: generation, sizes, and per-block offsets and xxh3-128 hashes."""

    rank: int
    ckpt_id: int
    gen: int
    block_size: int
    total_size: int
    digest: str
    offsets: np.ndarray          # uint64[nblocks]: byte offset of each block in the generation's store
    hashes: np.ndarray           # uint64[nblocks, 2]: xxh3-128 of each block (low, high)

    @property
    def nblocks(self) -> int:
        """Number of blocks."""
        return int(self.offsets.shape[0])


def dcp_map_path(directory: str | os.PathLike[str], rank: int, ckpt_id: int) -> Path:
    """Return the path of the map of checkpoint ``ckpt_id`` of ``rank`` in ``directory``."""
    return Path(directory) / f"dcp-r{rank}-c{ckpt_id}.map"


def store_path(directory: str | os.PathLike[str], rank: int, gen: int) -> Path:
    """Return the path of the block store of generation ``gen`` of ``rank`` in ``directory``."""
    return Path(directory) / f"dcp-r{rank}-g{gen}.blocks"


def list_dcp_ids(directory: str | os.PathLike[str], rank: int) -> list[int]:
    """Return the checkpoint ids that have a committed map for ``rank`` in ``directory``, ascending."""
    d = Path(directory)
    if not d.is_dir():
        return []
    ids = []
    for name in os.listdir(d):
        m = MAP_RE.match(name)
        if m and int(m.group(1)) == rank:
            ids.append(int(m.group(2)))
    return sorted(ids)


def block_hash(view: memoryview) -> tuple[int, int]:
    """The xxh3-128 of a block as (low, high) 64-bit halves, as a map stores it."""
    h = xxhash.xxh3_128_intdigest(view)
    return h & 0xFFFFFFFFFFFFFFFF, h >> 64


def encode_map(m: DcpMap) -> bytes:
    """The bytes of map ``m`` (see the module docstring)."""
    header = json.dumps({
        "version": _VERSION, "rank": m.rank, "ckpt_id": m.ckpt_id, "gen": m.gen,
        "block_size": m.block_size, "total_size": m.total_size, "nblocks": m.nblocks, "digest": m.digest,
    }, sort_keys=True).encode()
    body = (MAGIC + struct.pack("<I", len(header)) + header
            + np.ascontiguousarray(m.offsets, "<u8").tobytes()
            + np.ascontiguousarray(m.hashes, "<u8").tobytes())
    return body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body))


def read_dcp_map(directory: str | os.PathLike[str], rank: int, ckpt_id: int) -> DcpMap:
    """Read and verify the map of checkpoint ``ckpt_id`` of ``rank``.

    Raises
    ------
    CheckpointNotFoundError
        If the map does not exist.
    FormatError
        If the file is not a dCP map of this version, or names another rank or checkpoint.
    CorruptionError
        If its checksum does not match.
    """
    path = dcp_map_path(directory, rank, ckpt_id)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(f"no differential L4 map {path}: checkpoint {ckpt_id} of rank {rank} "
                                      "was never flushed with enable_dcp") from exc
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if len(raw) < len(MAGIC) + 12 or raw[:len(MAGIC)] != MAGIC:
        raise FormatError(f"{path} is not an ftkit dCP map (bad magic or truncated)")
    body, (check,) = raw[:-8], struct.unpack("<Q", raw[-8:])
    if xxhash.xxh3_64_intdigest(body) != check:
        raise CorruptionError(f"{path}: checksum mismatch, the map is corrupt; recover from another level")
    (hlen,) = struct.unpack("<I", body[len(MAGIC):len(MAGIC) + 4])
    start = len(MAGIC) + 4
    try:
        hdr = json.loads(body[start:start + hlen])
        n = int(hdr["nblocks"])
        if hdr["version"] != _VERSION:
            raise FormatError(f"{path}: dCP map version {hdr['version']} is not supported "
                              f"(expected {_VERSION})")
        if int(hdr["rank"]) != rank or int(hdr["ckpt_id"]) != ckpt_id:
            raise FormatError(f"{path} names rank {hdr['rank']} checkpoint {hdr['ckpt_id']}, "
                              f"expected rank {rank} checkpoint {ckpt_id}")
        gen, bs, total = int(hdr["gen"]), int(hdr["block_size"]), int(hdr["total_size"])
        if not (gen >= 0 and 0 < bs <= _MAX_BLOCK and total >= 0 and n == -(-total // bs)):
            raise FormatError(f"{path}: inconsistent dCP map header (generation {gen}, block size {bs}, "
                              f"total size {total}, {n} blocks)")
        pos = start + hlen
        if pos + 24 * n != len(body):
            raise FormatError(f"{path}: map length does not match its {n} blocks")
        offsets = np.frombuffer(body, "<u8", n, pos).astype(np.uint64)
        hashes = np.frombuffer(body, "<u8", 2 * n, pos + 8 * n).astype(np.uint64).reshape(n, 2)
        return DcpMap(rank, ckpt_id, gen, bs, total, str(hdr["digest"]), offsets, hashes)
    except FormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse failure of a damaged map is a FormatError
        raise FormatError(f"{path}: malformed dCP map header ({type(exc).__name__}: {exc})") from exc


class DcpSource(ByteSource):
    """Checkpoint ``ckpt_id`` of ``rank`` read in place from the differential L4 directory ``directory``.

    Raises
    ------
    CheckpointNotFoundError
        If the map or its block store is missing.
    FormatError, CorruptionError
        If the map is damaged, or names blocks past the end of the store (a truncated store).
    StorageError
        If the store cannot be opened.
    """

    def __init__(self, directory: str | os.PathLike[str], rank: int, ckpt_id: int) -> None:
        m = read_dcp_map(directory, rank, ckpt_id)
        store = store_path(directory, rank, m.gen)
        self.name = f"differential L4 checkpoint {ckpt_id} of rank {rank} ({store})"
        self.size = m.total_size
        try:
            self.fd = os.open(store, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise CheckpointNotFoundError(f"block store {store} of checkpoint {ckpt_id} is missing") from exc
        except OSError as exc:
            raise StorageError(f"{store}: cannot open: {exc.strerror or exc}") from exc
        bs = m.block_size
        lengths = np.minimum(bs, m.total_size - np.arange(m.nblocks, dtype=np.int64) * bs)
        ends = m.offsets.astype(np.int64) + lengths
        if m.nblocks and (int(ends.max()) > os.fstat(self.fd).st_size or int(m.offsets.max()) >= 2**62):
            self.close()
            raise CorruptionError(f"{self.name}: the map names blocks past the end of the store (truncated)")
        # Extents: runs of blocks lying one after the other in the store (one read each).
        starts = m.offsets.astype(np.int64)
        cut = np.flatnonzero(starts[1:] != ends[:-1]) + 1
        self._first = np.concatenate(([0], cut)).astype(np.int64) * bs   # logical byte of each extent
        self._where = starts[self._first // bs] if m.nblocks else np.zeros(0, np.int64)

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the logical bytes from ``offset``, extent by extent."""
        n = len(out)
        if offset + n > self.size:
            raise StorageError(f"{self.name}: {offset + n} bytes asked of a {self.size}-byte checkpoint")
        done = 0
        k = int(np.searchsorted(self._first, offset, side="right")) - 1
        while done < n:
            pos = offset + done
            stop = int(self._first[k + 1]) if k + 1 < len(self._first) else self.size
            take = min(n - done, stop - pos)
            pread_exact(self.fd, int(self._where[k]) + pos - int(self._first[k]), out[done:done + take],
                        self.name)
            done += take
            k += 1

    def close(self) -> None:
        """Close the block store (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
