"""L4, the parallel file system: each rank's file under ``glbl_dir``, written whole or differentially (dCP).

Post-processing (:func:`flush_l4`, local work): copy this rank's L1 file to ``glbl_dir`` (compressed with
``compression`` = lz4 | zstd | blosc: see :mod:`ftkit.storage.format.compressed`; read back transparently), or
with ``enable_dcp = 1`` write only the blocks that changed since the rank's previous L4 checkpoint
(:mod:`ftkit.checkpoint.dcp`) into ``glbl_dir/<exec_id>/l4dcp``
(:func:`~ftkit.storage.format.dcpstore.dcp_dir`). An inline L4 checkpoint (``inline_l4 = 1`` without dCP) is
written straight to L4 as the primary level and needs no post-processing.

Recovery: :class:`DcpStep` (entries written with dCP) rebuilds the rank's file from its block store into
the L4 directory and makes that map the base of the rank's next differential write; :class:`PFSStep` reads
and verifies the rank's L4 file. A head (a new process after a restart) starts a new block store with a
full write.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ProcessFailure
from ...storage._fsutil import make_dirs
from ...storage.format.compressed import compress_file
from ...storage.format.container import copy_file, read_header
from ...storage.format.dcpstore import DCP_DIR, dcp_dir
from ...storage.manifest import CheckpointEntry
from ..contract import DAMAGED, CheckpointJob, Level, LevelFileStep, Located, PipelineContext, RecoveryStep
from ..dcp import DcpWriter, restore_dcp

__all__ = ["LEVEL", "DCP_DIR", "dcp_dir", "flush_to_pfs", "flush_dcp", "flush_l4", "PFSStep", "DcpStep",
           "pfs_request", "pfs_work"]

_WRITERS: dict[tuple[str, int], DcpWriter] = {}
_WRITERS_LOCK = threading.Lock()


def _writer(directory: Path, rank: int, block_size: int, codec: str, level: int) -> DcpWriter:
    with _WRITERS_LOCK:
        key = (str(directory), rank)
        w = _WRITERS.get(key)
        if w is None or (w.block_size, w.codec, w.level) != (block_size, codec, level):
            w = _WRITERS[key] = DcpWriter(directory, rank, block_size, codec=codec, level=level)
        return w


def _l4_keep_ids(ctx: PipelineContext) -> tuple[int, ...]:
    with ctx.store.lock:
        return tuple(e.id for e in ctx.store.manifest.checkpoints if e.complete(4))


def flush_to_pfs(ctx: PipelineContext, job: CheckpointJob) -> None:
    """L4 post-processing: copy this rank's L1 file to ``glbl_dir`` (local work; collective-safe).

    When the L1 file is removed right after (``job.primary_removed``) and ``glbl_dir`` is on its file system,
    it is hard-linked instead: no second write of the bytes.
    """
    src = ctx.level(job.primary, job.nodes).path(job.ckpt_id, ctx.rank)
    storage = ctx.level(4, job.nodes)
    codecs = job.extra.get("codecs", {})
    if ctx.config.compression != "none" or any(c != "none" for c in codecs.values()):
        compress_copy(src, storage.prepare_dir(job.ckpt_id, ctx.rank), ctx.config.compression,
                      ctx.config.compression_level, codecs)
        return
    storage.put_file(job.ckpt_id, ctx.rank, src, link=job.primary_removed)


def compress_copy(src: str | Path, dst: str | Path, codec: str, level: int,
                  codecs: dict[str, str] | None = None) -> tuple[int, int]:
    """Write a compressed copy of the checkpoint file ``src`` at ``dst``, chunked by section (each shuffled
    by its item size, with the codec ``codecs`` names for it, else ``codec``); return its (logical, stored)
    sizes in bytes."""
    header = read_header(src)
    codecs = codecs or {}
    pieces = [(0, header.data_offset, 1, codec)]
    pieces += [(s.offset, s.nbytes, np.dtype(s.dtype).itemsize, codecs.get(s.name, codec))
               for s in header.sections]
    return compress_file(src, dst, pieces, level)


def flush_dcp(ctx: PipelineContext, job: CheckpointJob) -> None:
    """L4 post-processing with ``enable_dcp``: write the blocks of this rank's file changed since last L4."""
    src = ctx.level(job.primary, job.nodes).path(job.ckpt_id, ctx.rank)
    cfg = ctx.config
    w = _writer(dcp_dir(cfg.glbl_dir, ctx.exec_id), ctx.rank, cfg.dcp_block_size, cfg.compression,
                cfg.compression_level)
    w.write(src, job.ckpt_id, keep_ids=_l4_keep_ids(ctx))


def flush_l4(ctx: PipelineContext, job: CheckpointJob) -> None:
    """L4 post-processing: a differential write with ``enable_dcp = 1``, else a full copy of the L1 file."""
    if ctx.config.enable_dcp:
        flush_dcp(ctx, job)
    else:
        flush_to_pfs(ctx, job)


def prepare_l4(ctx: PipelineContext, job: CheckpointJob) -> None:
    """Record that the entry's L4 copy is differential (recovery must rebuild it from the block store)."""
    if ctx.config.enable_dcp:
        job.extra["dcp"] = True


class PFSStep(LevelFileStep):
    """L4: the rank's file on the parallel file system."""

    level = 4


class DcpStep(RecoveryStep):
    """L4 with dCP: rebuild the rank's file from its block store into the L4 directory, then verify it."""

    level = 4

    def applies(self, entry: CheckpointEntry) -> bool:
        return entry.complete(4) and bool(entry.extra.get("dcp"))

    def locate(self, ctx: PipelineContext, entry: CheckpointEntry, need: bool) -> Located:
        if not need:
            return Located()
        storage = ctx.level(4, entry.nodes)
        try:
            dst = storage.path(entry.id, ctx.rank)
            make_dirs(dst.parent)
            directory = dcp_dir(ctx.config.glbl_dir, ctx.exec_id)
            restore_dcp(directory, ctx.rank, entry.id, dst)
            header = storage.verify(entry.id, ctx.rank, entry.files[ctx.rank].digest)
        except ProcessFailure:
            raise
        except DAMAGED as exc:
            return Located(reason=f"differential L4: {exc}", level=4)
        # The next differential write of this process continues from this map instead of a full write.
        cfg = ctx.config
        _writer(directory, ctx.rank, cfg.dcp_block_size, cfg.compression, cfg.compression_level
                ).load_base(entry.id)
        return Located(storage, header, level=4)


def pfs_request(ctx: PipelineContext, job: CheckpointJob) -> dict[str, Any]:
    """Head mode: where the head writes this rank's L4 copy (and the dCP settings)."""
    req: dict[str, Any] = {"dst": str(ctx.level(4, job.nodes).path(job.ckpt_id, ctx.rank))}
    if ctx.config.enable_dcp:
        req["dcp_dir"] = str(dcp_dir(ctx.config.glbl_dir, ctx.exec_id))
        req["dcp_block"] = ctx.config.dcp_block_size
        req["dcp_codec"] = [ctx.config.compression, ctx.config.compression_level]
        req["keep"] = list(_l4_keep_ids(ctx))
    elif ctx.config.compression != "none" or job.extra.get("codecs"):
        req["compression"] = [ctx.config.compression, ctx.config.compression_level,
                              job.extra.get("codecs", {})]
    return req


def pfs_work(req: dict[str, Any], head_set: Any) -> None:
    """Head mode: flush one rank's file to L4 (local work; ``head_set`` is not used)."""
    if "dcp_dir" in req:
        codec, level = req.get("dcp_codec", ["none", 3])
        w = _writer(Path(req["dcp_dir"]), int(req["rank"]), int(req["dcp_block"]), str(codec), int(level))
        w.write(req["src"], int(req["id"]), keep_ids=tuple(int(k) for k in req.get("keep", ())))
    else:
        dst = Path(req["dst"])
        make_dirs(dst.parent)
        if "compression" in req:
            codec, level, codecs = req["compression"]
            codecs = {str(k): str(v) for k, v in codecs.items()}
            compress_copy(req["src"], dst, str(codec), int(level), codecs)
        else:
            copy_file(req["src"], dst, chunk_bytes=int(req["chunk"]), direct=True)   # as PFSLevel.put_file


#: Level 4 in the level table (dCP's recovery step first: it applies only to differential entries).
LEVEL = Level(4, "pfs", post=flush_l4, recovery=(DcpStep, PFSStep), prepare=prepare_l4,
              head_request=pfs_request, head_work=pfs_work)
