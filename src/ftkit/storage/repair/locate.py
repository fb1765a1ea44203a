"""Find a run's manifest and its directories from what a user gives ``ftkit ls/verify/rebuild/export``.

``DIR`` is a run's ``meta_dir`` (it holds ``manifest.json``), a directory one level above it (a run directory
holding ``meta/``, ``local/``, ``global/``), or an FTI-style config file. The manifest's recorded ``dirs``
are used only as absolute paths (:meth:`Manifest.loads` refuses anything else), and every file
a command touches below them is checked to lie inside them (:mod:`ftkit._paths`).

Where the checkpoint files are looked for (:func:`locate_run`), first rule that applies:

1. ``root`` given (``--root NEW``): every recorded directory is rebased under ``NEW``, relative to the
   deepest directory holding all of them (a run recorded as ``/a/run/{meta,local,global}`` read under
   ``NEW/{meta,local,global}``);
2. a config file: its ``ckpt_dir`` and ``glbl_dir`` (a config that points at a copied run reads the copy);
3. a ``meta_dir`` found elsewhere than where it was recorded (the run was moved or copied): each recorded
   directory translated the same way, when that place exists (the copy, not the original); else the
   recorded directory;
4. the recorded directories.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...config import Config
from ..manifest import MANIFEST_NAME, Manifest, read_manifest

__all__ = ["find_manifest", "run_roots", "RunPlace", "locate_run"]


@dataclass(frozen=True)
class RunPlace:
    """A run's manifest and the directories its files are read from."""

    meta_dir: Path
    manifest: Manifest
    ckpt_dir: Path
    glbl_dir: Path


def find_manifest(target: str | Path) -> tuple[Path, Manifest] | None:
    """Locate the manifest for ``target`` (meta_dir, its parent, or a config file); None if there is none.

    Raises
    ------
    FormatError
        If a manifest is found but damaged.
    """
    p = Path(target)
    if p.is_file():
        meta = Config.from_file(p).meta_dir
        m = read_manifest(meta)
        return (meta, m) if m else None
    candidates = [p] + sorted(c.parent for c in p.glob(f"*/{MANIFEST_NAME}"))
    for d in candidates:
        m = read_manifest(d)
        if m is not None:
            return d, m
    return None


def locate_run(target: str | Path, root: str | Path | None = None) -> RunPlace | None:
    """Find the run at ``target`` and where its files are (see the module docstring); None: no manifest.

    Raises
    ------
    FormatError
        If a manifest is found but damaged.
    ConfigError
        If ``target`` is a config file that does not load.
    """
    found = find_manifest(target)
    if found is None:
        return None
    meta_dir, m = found
    if root is not None:
        ckpt, glbl = _rebased(m, Path(root))
    elif Path(target).is_file():
        config = Config.from_file(Path(target))
        ckpt, glbl = config.ckpt_dir, config.glbl_dir
    else:
        ckpt, glbl = run_roots(meta_dir, m)
    return RunPlace(meta_dir, m, Path(ckpt), Path(glbl))


def _rebased(m: Manifest, root: Path) -> tuple[Path, Path]:
    recorded = {k: Path(v) for k, v in m.dirs.items()}
    if not recorded:
        return root / "local", root / "global"
    base = Path(os.path.commonpath([str(p) for p in recorded.values()]))
    if len(recorded) == 1:
        base = base.parent
    out = []
    for key, default in (("ckpt_dir", "local"), ("glbl_dir", "global")):
        out.append(root / recorded[key].relative_to(base) if key in recorded else root / default)
    return out[0], out[1]


def run_roots(meta_dir: Path, m: Manifest) -> tuple[Path, Path]:
    """ckpt_dir and glbl_dir of the run; if meta_dir is not where it was recorded (the run was moved or
    copied with its directories), each recorded directory is translated the same way, and the translated
    place is used when it exists."""
    recorded_meta = Path(m.dirs.get("meta_dir", meta_dir)).absolute()
    here = meta_dir.absolute()
    out = []
    for key, default in (("ckpt_dir", "local"), ("glbl_dir", "global")):
        p = Path(m.dirs.get(key, meta_dir.parent / default))
        if recorded_meta != here:
            try:
                moved = here.parent / p.relative_to(recorded_meta.parent)
            except ValueError:
                moved = None
            if moved is not None and (moved.exists() or not p.exists()):
                p = moved
        out.append(p)
    return out[0], out[1]
