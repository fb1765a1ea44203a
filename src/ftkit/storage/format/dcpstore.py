"""The on-disk format of differential L4 checkpoints (dCP), and reading one in place.

Written by :class:`ftkit.checkpoint.dcp.DcpWriter`; read here, so storage-level readers (elastic recovery,
``ftkit export``) can use a differential checkpoint without rebuilding the rank's file first.

On-disk layout, per rank, in one directory (``glbl_dir/<exec_id>/l4dcp``, :func:`dcp_dir`)::

    dcp-r<rank>-g<gen>.blocks      append-only block store of generation <gen>
    dcp-r<rank>-c<id>.map          map of checkpoint <id>: where each block lies, its hash, the file digest

A map file is ``MAGIC``, a little-endian uint32 header length, a JSON header (version, rank, checkpoint
id, generation, block size, total size, number of blocks, xxh3-128 of the whole content), the block offsets
(uint64) and block hashes (2 x uint64 each), and an xxh3-64 of everything before it. A reader may rely on:
a committed map names only durable blocks, and the bytes it points to are never rewritten (the writer's
rules, see :mod:`ftkit.checkpoint.dcp`).

Compressed block stores (``[ftkit] compression`` with ``enable_dcp``) use map version 2: its header adds
``typesize`` (the item size of the byte-shuffle applied before the codec), and after the hashes come each
block's stored length (uint32) and codec id (uint8, as in :data:`ftkit.storage.format.compressed.CODECS`; 0:
the block's bytes as they are). Each block is compressed on its own, so a range read decompresses only the
blocks it touches; the hashes stay those of the uncompressed blocks. Version 1 maps (uncompressed stores) are
written whenever no block is compressed, and read as before.

:class:`DcpSource` is a :class:`~ftkit.storage.format.source.ByteSource` of checkpoint ``id`` of a rank: byte
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

from ..._paths import inside
from ...errors import CheckpointNotFoundError, CorruptionError, FormatError, StorageError
from .compressed import decode_chunk
from .source import ByteSource, pread_exact

__all__ = ["DCP_DIR", "DcpMap", "DcpSource", "MAGIC", "MAP_RE", "GEN_RE", "dcp_dir", "dcp_map_path",
           "store_path", "list_dcp_ids", "block_hash", "encode_map", "read_dcp_map"]

#: Name of the differential L4 directory below ``glbl_dir/<exec_id>``.
DCP_DIR = "l4dcp"
MAGIC = b"FTKDCP01"
_VERSION = 1
_VERSION_COMPRESSED = 2
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
    stored: np.ndarray | None = None   # uint32[nblocks]: stored bytes of each block (compressed stores only)
    codecs: np.ndarray | None = None   # uint8[nblocks]: codec id of each block (compressed stores only)
    typesize: int = 1                  # item size of the byte-shuffle before the codec (compressed stores)

    @property
    def nblocks(self) -> int:
        """Number of blocks."""
        return int(self.offsets.shape[0])

    def logical_lengths(self) -> np.ndarray:
        """Uncompressed bytes of each block (int64[nblocks]): the block size, the last one shorter."""
        return np.minimum(self.block_size, self.total_size - np.arange(self.nblocks, dtype=np.int64)
                          * self.block_size)

    def stored_lengths(self) -> np.ndarray:
        """Bytes each block takes in the store (int64[nblocks])."""
        return self.logical_lengths() if self.stored is None else self.stored.astype(np.int64)


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
    fields = {"version": _VERSION, "rank": m.rank, "ckpt_id": m.ckpt_id, "gen": m.gen,
              "block_size": m.block_size, "total_size": m.total_size, "nblocks": m.nblocks,
              "digest": m.digest}
    tail = b""
    if m.stored is not None and m.codecs is not None:
        fields.update(version=_VERSION_COMPRESSED, typesize=m.typesize)
        tail = (np.ascontiguousarray(m.stored, "<u4").tobytes()
                + np.ascontiguousarray(m.codecs, "u1").tobytes())
    header = json.dumps(fields, sort_keys=True).encode()
    body = (MAGIC + struct.pack("<I", len(header)) + header
            + np.ascontiguousarray(m.offsets, "<u8").tobytes()
            + np.ascontiguousarray(m.hashes, "<u8").tobytes() + tail)
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
        if hdr["version"] not in (_VERSION, _VERSION_COMPRESSED):
            raise FormatError(f"{path}: dCP map version {hdr['version']} is not supported "
                              f"(expected {_VERSION} or {_VERSION_COMPRESSED})")
        compressed = hdr["version"] == _VERSION_COMPRESSED
        typesize = int(hdr["typesize"]) if compressed else 1
        if int(hdr["rank"]) != rank or int(hdr["ckpt_id"]) != ckpt_id:
            raise FormatError(f"{path} names rank {hdr['rank']} checkpoint {hdr['ckpt_id']}, "
                              f"expected rank {rank} checkpoint {ckpt_id}")
        gen, bs, total = int(hdr["gen"]), int(hdr["block_size"]), int(hdr["total_size"])
        if not (gen >= 0 and 0 < bs <= _MAX_BLOCK and total >= 0 and n == -(-total // bs)):
            raise FormatError(f"{path}: inconsistent dCP map header (generation {gen}, block size {bs}, "
                              f"total size {total}, {n} blocks)")
        if not 1 <= typesize <= 255:
            raise FormatError(f"{path}: dCP map names a shuffle item size of {typesize} bytes")
        pos = start + hlen
        if pos + (29 if compressed else 24) * n != len(body):
            raise FormatError(f"{path}: map length does not match its {n} blocks")
        offsets = np.frombuffer(body, "<u8", n, pos).astype(np.uint64)
        hashes = np.frombuffer(body, "<u8", 2 * n, pos + 8 * n).astype(np.uint64).reshape(n, 2)
        stored = codecs = None
        if compressed:
            stored = np.frombuffer(body, "<u4", n, pos + 24 * n).astype(np.uint32)
            codecs = np.frombuffer(body, "u1", n, pos + 28 * n).copy()
            logical = np.minimum(bs, total - np.arange(n, dtype=np.int64) * bs)
            if (stored.astype(np.int64) > logical).any():  # a block that does not shrink is stored raw
                raise FormatError(f"{path}: the map gives a block more stored bytes than it holds")
        return DcpMap(rank, ckpt_id, gen, bs, total, str(hdr["digest"]), offsets, hashes, stored, codecs,
                      typesize)
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
        ends = m.offsets.astype(np.int64) + m.stored_lengths()
        if m.nblocks and (int(ends.max()) > os.fstat(self.fd).st_size or int(m.offsets.max()) >= 2**62):
            self.close()
            raise CorruptionError(f"{self.name}: the map names blocks past the end of the store (truncated)")
        self._map = m
        self._cache: tuple[int, bytes] | None = None
        # Extents: runs of blocks lying one after the other in the store (one read each).
        starts = m.offsets.astype(np.int64)
        cut = np.flatnonzero(starts[1:] != ends[:-1]) + 1
        self._first = np.concatenate(([0], cut)).astype(np.int64) * bs   # logical byte of each extent
        self._where = starts[self._first // bs] if m.nblocks else np.zeros(0, np.int64)

    def _block(self, i: int) -> bytes:
        """Block ``i`` of a compressed store, decompressed (the last one cached)."""
        if self._cache is not None and self._cache[0] == i:
            return self._cache[1]
        m = self._map
        stored = bytearray(int(m.stored[i]))  # type: ignore[index]
        pread_exact(self.fd, int(m.offsets[i]), memoryview(stored), self.name)
        n = min(m.block_size, m.total_size - i * m.block_size)
        data = decode_chunk(int(m.codecs[i]), stored, m.typesize, n,  # type: ignore[index]
                            f"{self.name}: block {i}")
        self._cache = (i, data)
        return data

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the logical bytes from ``offset``, extent by extent (block by block, each
        decompressed, from a compressed store)."""
        n = len(out)
        if offset + n > self.size:
            raise StorageError(f"{self.name}: {offset + n} bytes asked of a {self.size}-byte checkpoint")
        if self._map.stored is not None:
            bs, done = self._map.block_size, 0
            while done < n:
                i, at = divmod(offset + done, bs)
                data = self._block(i)
                take = min(n - done, len(data) - at)
                out[done:done + take] = data[at:at + take]
                done += take
            return
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
