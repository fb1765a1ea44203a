"""Find a run's manifest and its directories from what a user gives ``ftkit ls/verify/rebuild``.

``DIR`` is a run's ``meta_dir`` (it holds ``manifest.json``), a directory one level above it (a run directory
holding ``meta/``, ``local/``, ``global/``), or an FTI-style config file. The manifest's recorded ``dirs``
are used only as absolute paths (:meth:`Manifest.loads` refuses anything else), and every file
a command touches below them is checked to lie inside them (:mod:`ftkit._paths`).
"""

from __future__ import annotations

from pathlib import Path

from ..config import Config
from .manifest import MANIFEST_NAME, Manifest, read_manifest

__all__ = ["find_manifest", "run_roots"]


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


def run_roots(meta_dir: Path, m: Manifest) -> tuple[Path, Path]:
    """ckpt_dir and glbl_dir of the run; if the run's directories were moved together with meta_dir, their
    recorded places are translated to the new location."""
    recorded_meta = Path(m.dirs.get("meta_dir", meta_dir)).absolute()
    here = meta_dir.absolute()
    out = []
    for key, default in (("ckpt_dir", "local"), ("glbl_dir", "global")):
        p = Path(m.dirs.get(key, meta_dir.parent / default))
        if recorded_meta != here and not p.exists():
            try:
                p = here.parent / p.relative_to(recorded_meta.parent)
            except ValueError:
                pass
        out.append(p)
    return out[0], out[1]


