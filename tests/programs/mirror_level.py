"""A fifth checkpoint level, added from outside ftkit: a mirror of each rank's file in a second global
directory.

Everything a new level needs is here: its storage (the PFS layout under another root, so ``l5/`` directories
beside it), its pipeline steps (``LEVEL``: post-processing copies the primary file; recovery reads the
rank's mirror copy) and its line of the level table (``SPEC``), which the program registers with
:func:`ftkit.storage.levels.register_level` before building the Checkpointer. ``OBJECT_SPEC`` is the same
level kept in a store that has no local files (an object-store stand-in: every key is one flat file), to show
that a level need not be a directory: writes are staged and ``put``, reads are ``get``.
"""

from __future__ import annotations

from pathlib import Path

from ftkit.checkpoint.contract import CheckpointJob, Level, LevelFileStep, PipelineContext
from ftkit.errors import CheckpointNotFoundError
from ftkit.storage._fsutil import atomic_write_bytes, fsync_dir, make_dirs
from ftkit.storage.levels import GLOBAL, LevelSpec
from ftkit.storage.placement.global_dir import PFSLevel
from ftkit.storage.placement.store import Store


class MirrorLevel(PFSLevel):
    """Level 5 storage: ``<mirror>/<exec_id>/l5/ckpt<id>/rank<r>.ftk``."""

    level = 5
    name = "mirror"


class FlatStore(Store):
    """Keys as flat files of one directory (``a/b/c`` → ``a%b%c``): no local paths, like an object store."""

    supports_local_path = False

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _file(self, key: str) -> Path:
        return self.root / key.replace("/", "%")

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        try:
            data = self._file(key).read_bytes()
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"object {key!r} does not exist in {self.root}") from None
        return data[start:] if length is None else data[start:start + length]

    def put(self, key: str, data: bytes | memoryview) -> None:
        make_dirs(self.root)
        atomic_write_bytes(self._file(key), bytes(data))

    def list_dir(self, prefix: str) -> list[str]:
        flat = prefix.replace("/", "%") + "%"
        names = {p.name[len(flat):].split("%")[0] for p in self.root.glob("*") if p.name.startswith(flat)}
        return sorted(names)

    def delete(self, key: str, stop: str = "", what: str = "") -> None:
        self._file(key).unlink(missing_ok=True)

    def barrier(self, prefix: str) -> None:
        fsync_dir(self.root)


class ObjectMirrorLevel(MirrorLevel):
    """Level 5 storage in a :class:`FlatStore`."""

    def __init__(self, root, exec_id, nodes, chunk_bytes=1 << 20, fsync=True):  # noqa: ANN001
        super().__init__(root, exec_id, nodes, chunk_bytes, fsync, store=FlatStore(root))


def mirror_copy(ctx: PipelineContext, job: CheckpointJob) -> None:
    """Post-processing: copy this rank's primary file to its mirror (local work)."""
    src = ctx.level(job.primary, job.nodes).path(job.ckpt_id, ctx.rank)
    ctx.level(5, job.nodes).put_file(job.ckpt_id, ctx.rank, src)


class MirrorStep(LevelFileStep):
    """Recovery: the rank's mirror copy, verified against the manifest."""

    level = 5


#: The level's pipeline steps.
LEVEL = Level(5, "mirror", post=mirror_copy, recovery=(MirrorStep,))

#: The level's line of the table (a global root beside ``glbl_dir``: survives the loss of any node).
SPEC = LevelSpec(5, "mirror", MirrorLevel, GLOBAL, lambda topology, lost, code: True, __name__, order=5,
                 root=lambda ckpt_dir, glbl_dir: glbl_dir.parent / "mirror")
OBJECT_SPEC = LevelSpec(5, "mirror", ObjectMirrorLevel, GLOBAL, lambda topology, lost, code: True, __name__,
                        order=5, root=lambda ckpt_dir, glbl_dir: glbl_dir.parent / "mirror-objects")
