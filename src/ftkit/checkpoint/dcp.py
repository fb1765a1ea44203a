"""Differential checkpoints for L4 (FTI's ``enable_dcp``): write only the blocks that changed.

A rank's L4 content (the bytes of its L1 checkpoint file) is cut into blocks of ``dcp_block_size`` bytes and
each block is hashed with xxh3-128. A differential write appends only the blocks whose hash differs from the
previous L4 checkpoint of that rank; unchanged blocks are referenced where they already lie.

The on-disk format (block stores and maps) and the reading of a checkpoint in place live in
:mod:`ftkit.storage.format.dcpstore` (re-exported here). Rules the writer keeps, which readers rely on:

- A block store is only ever appended to; bytes a committed map points to are never rewritten, so a crash
  in the middle of a differential write (data appended, map not yet renamed into place) leaves every earlier
  map valid: the previous good state is never destroyed.
- A map is committed last, atomically (temporary name, fsync, rename). A map exists only if all blocks it
  names are durable.
- Reconstruction verifies every block hash and the whole-content digest; nothing read is executed.

When the block store of a generation grows past ``compact_factor`` times the content size, the next write
starts a new generation with a full copy. Old maps and generations are removed only when no map that must be
kept still refers to them (the base of the latest write and the ids the caller asks to keep).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from ..errors import CheckpointNotFoundError, ConfigError, CorruptionError, StorageError
from ..storage._stream import AtomicWriter
from ..storage.format.compressed import CODECS, decode_chunk, encode_chunk, require_codec
from ..storage.format.dcpstore import (
    GEN_RE,
    MAGIC,
    DcpMap,
    block_hash,
    dcp_map_path,
    encode_map,
    list_dcp_ids,
    read_dcp_map,
    store_path,
)

__all__ = ["DcpStats", "DcpMap", "DcpWriter", "restore_dcp", "read_dcp_map", "dcp_map_path",
           "list_dcp_ids", "MAGIC"]

#: Blocks read and hashed per system call while scanning the source file.
_CHUNK_BLOCKS = 256


@dataclass(frozen=True)
class DcpStats:
    """What one differential write did: bytes appended to the block store and map, blocks changed."""

    data_bytes: int
    map_bytes: int
    blocks_changed: int
    blocks_total: int
    total_size: int
    full: bool

    @property
    def bytes_written(self) -> int:
        """All bytes written (block data plus map), in bytes."""
        return self.data_bytes + self.map_bytes


def restore_dcp(directory: str | os.PathLike[str], rank: int, ckpt_id: int,
                dest: str | os.PathLike[str]) -> int:
    """Reconstruct the exact content of checkpoint ``ckpt_id`` of ``rank`` into file ``dest``.

    ``dest`` is written atomically. Every block and the whole content are verified against their hashes.

    Returns
    -------
    int
        Size of the reconstructed file (bytes).

    Raises
    ------
    CheckpointNotFoundError
        If the map or its block store is missing.
    CorruptionError
        If a block or the whole content does not match its hash.
    """
    d = Path(directory)
    m = read_dcp_map(d, rank, ckpt_id)
    store = store_path(d, rank, m.gen)
    try:
        fd = os.open(store, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(f"block store {store} of checkpoint {ckpt_id} is missing") from exc
    whole = xxhash.xxh3_128()
    stored_len = m.stored_lengths()
    buf = np.empty(max(m.block_size, int(stored_len.max()) if m.nblocks else 0), np.uint8)
    try:
        store_len = os.fstat(fd).st_size
        with AtomicWriter(dest) as out:
            for i in range(m.nblocks):
                n = min(m.block_size, m.total_size - i * m.block_size)
                sn = int(stored_len[i])
                off = int(m.offsets[i])
                if off + sn > store_len:
                    raise CorruptionError(f"{store}: block {i} lies past the end of the store (truncated)")
                view = buf.data[:sn]
                got = os.preadv(fd, [view], off)
                if got == sn and m.codecs is not None:
                    view = memoryview(decode_chunk(int(m.codecs[i]), bytes(view), m.typesize, n,
                                                   f"{store}: block {i} of checkpoint {ckpt_id}"))
                    got = len(view)
                if got != n or block_hash(view) != (int(m.hashes[i, 0]), int(m.hashes[i, 1])):
                    raise CorruptionError(f"{store}: block {i} of checkpoint {ckpt_id} (rank {rank}) does "
                                          "not match its hash; recover from another level")
                whole.update(view)
                out.pwrite(view, i * m.block_size)
            if whole.hexdigest() != m.digest:
                raise CorruptionError(f"checkpoint {ckpt_id} of rank {rank}: reconstructed content does not "
                                      "match its digest")
    finally:
        os.close(fd)
    return m.total_size


class DcpWriter:
    """Differential L4 writer of one rank's checkpoint files (keeps the previous map in memory).

    Parameters
    ----------
    directory
        L4 directory holding this rank's block stores and maps.
    rank
        Application rank whose files are written.
    block_size
        ``dcp_block_size`` in bytes (> 0).
    compact_factor
        Start a new generation (full write) when the block store would exceed this many times the content
        size (> 1).
    codec, level
        ``[ftkit] compression`` and ``compression_level``: each changed block is compressed on its own
        (stored as it is when that saves less than 3 %); "none" writes an uncompressed store.
    typesize
        Item size in bytes of the byte-shuffle applied before the codec (default: 8 -- float64 and int64
        data -- or the largest of 4, 2, 1 that divides ``block_size``; 1 for none; it must divide
        ``block_size``).

    Raises
    ------
    ConfigError
        If ``block_size``, ``compact_factor`` or ``typesize`` is out of range, or ``codec`` unknown or its
        library (``numcodecs``) missing.
    """

    def __init__(self, directory: str | os.PathLike[str], rank: int, block_size: int,
                 compact_factor: float = 3.0, codec: str = "none", level: int = 3,
                 typesize: int | None = None) -> None:
        if int(block_size) <= 0:
            raise ConfigError(f"dcp_block_size = {block_size}: must be a positive number of bytes")
        if not compact_factor > 1:
            raise ConfigError(f"dCP compact_factor = {compact_factor}: must be > 1")
        if codec not in CODECS:
            raise ConfigError(f"compression = {codec!r}: choose one of {', '.join(CODECS)}")
        if typesize is None:
            typesize = next(t for t in (8, 4, 2, 1) if int(block_size) % t == 0)
        if codec != "none":
            require_codec(codec)
            if not 1 <= typesize <= 255 or int(block_size) % typesize:
                raise ConfigError(f"dCP shuffle item size {typesize}: must be 1-255 and divide "
                                  f"dcp_block_size = {block_size}")
        self.directory = Path(directory)
        self.rank = int(rank)
        self.block_size = int(block_size)
        self.compact_factor = float(compact_factor)
        self.codec, self.level, self.typesize = codec, int(level), int(typesize) if codec != "none" else 1
        self.base: DcpMap | None = None

    def load_base(self, ckpt_id: int) -> bool:
        """Use the committed map of ``ckpt_id`` as the base of the next write (after a restart).

        Returns False (and keeps a full write for next time) when that map is missing, unreadable or has
        another block size.
        """
        try:
            m = read_dcp_map(self.directory, self.rank, ckpt_id)
        except (StorageError, CheckpointNotFoundError):
            self.base = None
            return False
        if (m.block_size != self.block_size or not self._reusable(m)
                or not store_path(self.directory, self.rank, m.gen).exists()):
            self.base = None
            return False
        self.base = m
        return True

    def _reusable(self, m: DcpMap) -> bool:
        """Whether blocks of map ``m`` can be referenced by this writer's next map: a compressed map's blocks
        must have been shuffled as this writer shuffles (uncompressed blocks always can)."""
        return m.codecs is None or m.typesize == self.typesize or not m.codecs.any()

    def _next_gen(self) -> int:
        gens = [-1]
        if self.directory.is_dir():
            for name in os.listdir(self.directory):
                g = GEN_RE.match(name)
                if g and int(g.group(1)) == self.rank:
                    gens.append(int(g.group(2)))
        return max(gens) + 1

    def write(self, src: str | os.PathLike[str], ckpt_id: int, keep_ids: tuple[int, ...] = ()) -> DcpStats:
        """Write file ``src`` as checkpoint ``ckpt_id``, appending only blocks changed since the base.

        Parameters
        ----------
        src
            The rank's checkpoint file (its L1 file); it must not change during the call.
        ckpt_id
            Checkpoint id; its map becomes the base of the next write.
        keep_ids
            Checkpoint ids whose maps (and blocks) must survive pruning, besides this one and the base.

        Returns
        -------
        DcpStats
            Bytes written and blocks changed.

        Raises
        ------
        StorageError
            If ``src`` cannot be read or the L4 directory cannot be written.
        """
        src = Path(src)
        try:
            total = os.stat(src).st_size
        except OSError as exc:
            raise StorageError(f"cannot read checkpoint file {src} for the differential L4 flush: "
                               f"{exc}") from exc
        bs = self.block_size
        nblocks = -(-total // bs)
        base = self.base
        full = base is None or base.block_size != bs or not self._reusable(base)
        gen = base.gen if base is not None and not full else self._next_gen()
        store = store_path(self.directory, self.rank, gen)
        if not full:
            store_len = store.stat().st_size if store.exists() else -1
            if store_len < 0 or store_len > self.compact_factor * max(total, bs):
                full, gen = True, self._next_gen()
                store = store_path(self.directory, self.rank, gen)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            out_fd = os.open(store, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if full else 0), 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open the dCP block store {store}: {exc}") from exc
        offsets = np.zeros(nblocks, np.uint64)
        hashes = np.zeros((nblocks, 2), np.uint64)
        stored = np.zeros(nblocks, np.uint32)
        codecs = np.zeros(nblocks, np.uint8)
        base_stored = base.stored_lengths() if base is not None and not full else None
        whole = xxhash.xxh3_128()
        changed = 0
        buf = np.empty(bs * _CHUNK_BLOCKS, np.uint8)
        try:
            end = 0 if full else os.fstat(out_fd).st_size
            # A previous crashed write may have left unreferenced bytes at the end: they stay there, unused,
            # so bytes a committed map points to are never rewritten.
            start_end = end
            with open(src, "rb", buffering=0) as f:
                i = 0
                while i < nblocks:
                    got = f.readinto(buf.data)
                    if not got:
                        raise StorageError(f"{src} shrank while being flushed: it must not change during L4")
                    view = buf.data[:got]
                    whole.update(view)
                    nb = -(-got // bs)
                    for j in range(nb):
                        blk = view[j * bs:min(got, (j + 1) * bs)]
                        lo, hi = block_hash(blk)
                        hashes[i, 0], hashes[i, 1] = lo, hi
                        if (not full and i < base.nblocks  # type: ignore[union-attr]
                                and int(base.hashes[i, 0]) == lo and int(base.hashes[i, 1]) == hi  # type: ignore[union-attr]
                                and (i < nblocks - 1 or len(blk) == min(bs, base.total_size - i * bs))):  # type: ignore[union-attr]
                            offsets[i] = base.offsets[i]  # type: ignore[union-attr]
                            stored[i] = base_stored[i]  # type: ignore[index]
                            codecs[i] = 0 if base.codecs is None else base.codecs[i]  # type: ignore[union-attr]
                        else:
                            stored[i], codecs[i] = self._append(out_fd, blk, end)
                            offsets[i] = end
                            end += int(stored[i])
                            changed += 1
                        i += 1
            os.fsync(out_fd)
        except OSError as exc:
            raise StorageError(f"differential L4 flush of {src} to {store} failed: {exc}") from exc
        finally:
            os.close(out_fd)
        compressed = self.codec != "none" or bool(codecs.any())
        m = DcpMap(self.rank, int(ckpt_id), gen, bs, total, whole.hexdigest(), offsets, hashes,
                   stored if compressed else None, codecs if compressed else None,
                   self.typesize if compressed else 1)
        raw = encode_map(m)
        with AtomicWriter(dcp_map_path(self.directory, self.rank, ckpt_id)) as w:
            w.pwrite(raw, 0)
        keep = {int(ckpt_id), *map(int, keep_ids)}
        if base is not None:
            keep.add(base.ckpt_id)
        self.base = m
        self.prune(keep)
        return DcpStats(end - start_end, len(raw), changed, nblocks, total, full)

    def _append(self, fd: int, block: memoryview, at: int) -> tuple[int, int]:
        """Write ``block`` (compressed with the writer's codec if that pays) at byte ``at`` of the store;
        return its stored length and codec id."""
        packed, cid = (encode_chunk(self.codec, self.level, block, self.typesize) if self.codec != "none"
                       else (block, 0))
        done = 0
        while done < len(packed):
            done += os.pwrite(fd, packed[done:], at + done)
        return len(packed), cid

    def prune(self, keep_ids: set[int] | tuple[int, ...]) -> None:
        """Remove this rank's maps not in ``keep_ids`` and block stores no kept map refers to."""
        keep = set(int(k) for k in keep_ids)
        used_gens = set()
        for cid in list_dcp_ids(self.directory, self.rank):
            if cid in keep:
                try:
                    used_gens.add(read_dcp_map(self.directory, self.rank, cid).gen)
                except (StorageError, CheckpointNotFoundError):
                    pass
            else:
                dcp_map_path(self.directory, self.rank, cid).unlink(missing_ok=True)
        if self.base is not None:
            used_gens.add(self.base.gen)
        for name in os.listdir(self.directory):
            g = GEN_RE.match(name)
            if g and int(g.group(1)) == self.rank and int(g.group(2)) not in used_gens:
                (self.directory / name).unlink(missing_ok=True)
