"""Helpers for the checkpoint tests: configs, the heat example, copies of a run's directories."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

from ftkit.config import KEY_SECTIONS

from ..conftest import REPO, run_python

HEAT = REPO / "examples" / "heat.py"
APP = REPO / "tests" / "programs" / "ckpt_app.py"
TIMEOUT = 240.0

_spec = importlib.util.spec_from_file_location("ftkit_example_heat", HEAT)
heat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heat)


def write_config(d: Path, **keys: object) -> Path:
    """Write an FTI-style config in ``d`` with run directories under ``d/run``; return its path."""
    basic = {"ckpt_dir": "run/local", "glbl_dir": "run/global", "meta_dir": "run/meta"}
    ftk = {"interval_unit": "iterations", "failure_timeout": "120"}
    for k, v in keys.items():
        (ftk if KEY_SECTIONS.get(k) == "ftkit" else basic)[k] = str(v)
    text = "[basic]\n" + "".join(f"{k} = {v}\n" for k, v in basic.items())
    text += "[ftkit]\n" + "".join(f"{k} = {v}\n" for k, v in ftk.items())
    p = d / "ftkit.ini"
    d.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def copy_run(src: Path, dst: Path) -> Path:
    """Copy a test directory (config + run directories)."""
    shutil.copytree(src, dst)
    return dst


def run_heat(d: Path, nranks: int, *args: str, node_size: int = 2):
    return run_python(nranks, HEAT, "--config", "ftkit.ini", *args, node_size=node_size, cwd=d,
                      timeout=TIMEOUT)


def run_app(d: Path, nranks: int, *args: str, node_size: int = 2, timeout: float = TIMEOUT):
    return run_python(nranks, APP, "--config", "ftkit.ini", *args, node_size=node_size, cwd=d,
                      timeout=timeout)


def digest_of(stdout: str) -> str | None:
    m = re.search(r"^digest ([0-9a-f]{16})$", stdout, re.M)
    return m.group(1) if m else None


def rank_lines(stdout: str, nranks: int) -> dict[int, str]:
    """The ``R<rank> ...`` lines of ckpt_app.py, by rank (asserting one per rank)."""
    lines = {}
    for line in stdout.splitlines():
        m = re.match(r"^R(\d+) (.*)$", line)
        if m:
            lines[int(m.group(1))] = m.group(2)
    assert sorted(lines) == list(range(nranks)), stdout
    return lines


def node_dirs(d: Path) -> list[Path]:
    return sorted((d / "run" / "local").glob("node*"))


def l1_file(d: Path, ckpt_id: int, rank: int) -> Path:
    found = list((d / "run" / "local").glob(f"node*/*/l1/ckpt{ckpt_id}/rank{rank}.ftk"))
    assert len(found) == 1, found
    return found[0]


def ranks_running_in(d: Path, program: Path) -> list[int]:
    """Pids of ``program``'s processes whose working directory is ``d`` (a job's ranks, to kill them)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and os.readlink(entry / "cwd") == str(d)
                    and program.name.encode() in (entry / "cmdline").read_bytes()):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids
