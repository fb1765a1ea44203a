"""Is this a fresh start or a restart? Decided from the metadata, never from the user editing the config.

:func:`inspect_run` (called on rank 0) reads ``meta_dir/manifest.json``:

* no manifest and no checkpoint files for the run: a fresh start, with a new ``exec_id`` (the config's
  ``exec_id`` is ignored then, as FTI ignores it: FTI reads it only with ``failure = 1..3``);
* a manifest holding checkpoints: a restart, on any rank count (with ``failure = 1..3`` and an ``exec_id``
  in the config, the manifest must be that run's); ``recover()`` must then succeed or raise, it never turns
  into a fresh run;
* a manifest without checkpoints (the previous run died before its first one): a fresh start of the same run;
* anything inconsistent (damaged manifest -- any parse failure, or an ``exec_id`` that is not a plain name --,
  manifest of another run, checkpoint files but no manifest, ``failure >= 1`` with no
  metadata): a restart with a *problem*: ``recover()`` and ``checkpoint()`` raise it, naming what is wrong
  and what to do; nothing is created or removed for such a run.

Messages name only this run's own directories: another job may share ``ckpt_dir``/``glbl_dir`` (with its own
``meta_dir``), so ftkit never advises removing those roots wholesale.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from .._paths import check_plain_name
from ..config import Config
from ..storage.manifest import Manifest, manifest_path, read_manifest
from .contract import DAMAGED

__all__ = ["RunState", "inspect_run", "new_exec_id", "find_checkpoint_dirs", "leftover_problem"]


@dataclass
class RunState:
    """What the metadata says about this start."""

    exec_id: str
    manifest_text: str          # the manifest to use (JSON), fresh or read
    restarted: bool
    problem: str = ""           # non-empty: recovery is impossible, for this reason
    fresh_manifest: bool = False   # True if the manifest is new and must be committed


def new_exec_id() -> str:
    """A new run identity: UTC date and time plus 4 random hex digits."""
    return time.strftime("%Y-%m-%d_%H-%M-%S", time.gmtime()) + "-" + secrets.token_hex(2)


def find_checkpoint_dirs(config: Config, exec_id: str | None, local_dirs: list[Path]) -> list[Path]:
    """Checkpoint directories (``.../l<N>/ckpt<id>``) of run ``exec_id`` (any run if None) in the given
    node-local directories and in ``glbl_dir``."""
    run = exec_id or "*"
    found: list[Path] = []
    for d in local_dirs:
        found += sorted(d.glob(f"{run}/l[1-4]/ckpt*"))
    found += sorted(config.glbl_dir.glob(f"{run}/l4/ckpt*"))
    return found


def run_dirs(config: Config, exec_id: str) -> str:
    """This run's own directories, for messages: ``glbl_dir/<exec_id>`` and ``ckpt_dir/*/<exec_id>``."""
    return f"{config.glbl_dir / exec_id} and {config.ckpt_dir}/*/{exec_id}"


def leftover_problem(config: Config, found: Path) -> str:
    """Why a start that finds checkpoint files ``found`` (``.../<exec_id>/l<N>/ckpt<id>``) but no manifest
    stops (naming only that run's own directories)."""
    run = found.parent.parent.name
    mpath = manifest_path(config.meta_dir)
    return (f"checkpoint files of run {run!r} exist (e.g. {found}) but the manifest {mpath} is missing, so "
            f"ftkit cannot tell which checkpoint is complete. If run {run!r} is another job's (with its own "
            "meta_dir), give this job its own ckpt_dir and glbl_dir, or set exec_id; if it is this run's, "
            f"restore its manifest, or remove only that run's directories ({run_dirs(config, run)}) to "
            "start fresh")


def inspect_run(config: Config, nranks: int, local_dirs: list[Path]) -> RunState:
    """Decide fresh start or restart from ``meta_dir`` (run on one rank; ``local_dirs`` are the node-local
    directories that rank can see)."""
    mpath = manifest_path(config.meta_dir)
    try:
        manifest = read_manifest(config.meta_dir)
        if manifest is not None:
            check_plain_name(manifest.exec_id, f"exec_id in manifest {mpath}")
    except DAMAGED as exc:
        own = f" and this run's directories ({run_dirs(config, config.exec_id)})" if config.exec_id else ""
        return RunState(config.exec_id or "unknown", "", True,
                        f"the manifest is damaged: {exc}. Restore {mpath} from a backup, or remove "
                        f"{mpath}{own} to start fresh")
    if manifest is None:
        leftovers = find_checkpoint_dirs(config, config.exec_id or None, local_dirs)
        if leftovers:
            return RunState(config.exec_id or "unknown", "", True, leftover_problem(config, leftovers[0]))
        if config.failure:
            return RunState(config.exec_id or "unknown", "", True,
                            f"the config says failure = {config.failure} (a restart) but {config.meta_dir} "
                            "holds no checkpoint metadata: point meta_dir at the run's metadata, or set "
                            "failure = 0")
        exec_id = new_exec_id()   # exec_id is a restart's key only, as in FTI
        fresh = Manifest(exec_id=exec_id, nranks=nranks, created=time.time())
        return RunState(exec_id, fresh.dumps(), False, fresh_manifest=True)
    if config.failure and config.exec_id and manifest.exec_id != config.exec_id:
        return RunState(config.exec_id, "", True,
                        f"{mpath} belongs to run {manifest.exec_id!r} but the config names exec_id = "
                        f"{config.exec_id!r} (with failure = {config.failure}): use that run's meta_dir, or "
                        "fix exec_id")
    if manifest.nranks != nranks and not manifest.checkpoints:
        fresh = Manifest(exec_id=manifest.exec_id, nranks=nranks, created=time.time())
        return RunState(manifest.exec_id, fresh.dumps(), False, fresh_manifest=True)
    # Another rank count with checkpoints: a restart; recover() reshards arrays protected with a global
    # layout and says how to add one for the others (see ftkit.checkpoint.reshard).
    if not manifest.checkpoints:
        return RunState(manifest.exec_id, manifest.dumps(), False)
    return RunState(manifest.exec_id, manifest.dumps(), True)
