"""A whole job killed from outside while it writes direct L4 files (issue 37): the direct-I/O path of
:mod:`ftkit.storage._direct` (``O_DIRECT`` through staging buffers, the head and the last partial page
written at the end) must lose nothing a commit promised, as the buffered path does
(``test_redundancy_sync.py``'s random-moment kill, whose 8 MB files are below the direct threshold).
``FTKIT_DIRECT_MIN_BYTES`` lowers the threshold for the job, so its 8 MiB L4 files are written direct."""

from __future__ import annotations

import json
import random

import pytest

import ftkit.storage.format.container as container
from ftkit.cli import main as ftkit_main

from ..conftest import run_python
from ..storage.test_direct_io import _cached_fraction
from ._util import APP, TIMEOUT, write_config
from .test_redundancy_sync import _killed_after_first_commit, _manifest, _recovered

pytestmark = pytest.mark.mpi

N = 4                   # ranks
ELEMENTS = 1 << 20      # float64 per rank: 8 MiB files
DIRECT_ENV = {"FTKIT_DIRECT_MIN_BYTES": str(1 << 20)}


def _run(d, *args: str):
    return run_python(N, APP, "--config", "ftkit.ini", *args, node_size=2, cwd=d, timeout=TIMEOUT,
                      env=DIRECT_ENV)


def _l4_files(d, ckpt_id: int) -> list:
    return sorted((d / "run" / "global").glob(f"*/l4/ckpt{ckpt_id}/rank*.ftk"))


@pytest.mark.parametrize("seed", range(3))
def test_every_rank_killed_at_a_random_moment_while_writing_direct_l4_files_loses_nothing(tmp_path, seed):
    # Twelve inline L4 checkpoints, 0.2 s of "computation" between them: a kill lands in a direct write
    # (staging buffers in flight, the head not yet rewritten, the last page not yet written), in the
    # fsync, the rename, the commit, or between calls. The relaunch recovers the newest checkpoint the
    # manifest on disk names, bit for bit (data = value(rank, step)), from its L4 files.
    d = tmp_path / "run"
    write_config(d, group_size=2, failure_timeout=60, inline_l4=1)
    delay = 2.0 * random.Random(3700 + seed).random()
    _killed_after_first_commit(d, delay, lambda: _run(d, "--mode", "write", "--levels", ",".join(["4"] * 12),
                                                      "--n", str(ELEMENTS), "--pause", "0.2"))
    newest = max(_manifest(d))
    files = _l4_files(d, newest)
    assert len(files) == N, (delay, newest, files)
    # The committed files were written direct (the threshold reached the ranks): none of their pages but
    # the last partial one is in the page cache before the relaunch reads them.
    assert all(_cached_fraction(f) < 0.01 for f in files), (delay, [_cached_fraction(f) for f in files])
    got = _recovered(_run(d, "--mode", "recover", "--n", str(ELEMENTS)).check().stdout)
    assert all(v["id"] == str(newest) and v["step"] == str(newest - 1) and v["source"] == "4"
               for v in got.values()), (delay, newest, got)


def test_flush_copies_large_files_to_l4_without_the_page_cache_and_they_verify(tmp_path, monkeypatch, capsys):
    # `ftkit flush` puts a job's newest checkpoint at L4 as the job's own L4 copy does: a file at or above
    # the direct threshold bypasses the page cache (it was copied buffered before: every page cached).
    d = tmp_path / "run"
    write_config(d, group_size=2)
    r = _run(d, "--mode", "write", "--levels", "1", "--n", str(ELEMENTS))
    assert r.returncode == 0, r.stdout + r.stderr
    newest = max(_manifest(d))
    assert not _l4_files(d, newest)
    monkeypatch.setattr(container, "DIRECT_MIN_BYTES", 1 << 20)   # the job's FTKIT_DIRECT_MIN_BYTES, here
    meta = str(d / "run" / "meta")
    assert ftkit_main(["flush", meta, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["result"] == "flushed"
    files = _l4_files(d, newest)
    assert len(files) == N, files
    assert all(_cached_fraction(f) < 0.01 for f in files), [_cached_fraction(f) for f in files]
    assert ftkit_main(["flush", meta, "--json"]) == 0   # every L4 file now verifies against the manifest
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["result"] == "already"
