"""``exec_id`` read as FTI reads it (issue 36): ignored on a fresh start, the restart's key with
``failure = 1..3``; FTI's template placeholder never becomes a run id. Decided by ``inspect_run`` on real
files in ``meta_dir`` (it runs on one rank, without MPI)."""

from __future__ import annotations

import io
import re
import warnings

from ftkit.checkpoint.runstate import inspect_run
from ftkit.cli.config_cli import check_config
from ftkit.config import Config
from ftkit.storage.manifest import CheckpointEntry, Manifest, RankFile, write_manifest

ID_RE = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}-[0-9a-f]{4}$")


def _config(tmp_path, **kw) -> Config:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Config(ckpt_dir=tmp_path / "local", glbl_dir=tmp_path / "global", meta_dir=tmp_path / "meta",
                      **kw)


def _manifest_of(tmp_path, exec_id: str) -> None:
    (tmp_path / "meta").mkdir(exist_ok=True)
    m = Manifest(exec_id=exec_id, nranks=2, created=1.0)
    m.checkpoints.append(CheckpointEntry(id=1, seq=1, level=1, time=1.0, levels={1: True}, nodes=[0, 0],
                                         files=[RankFile(10, "0" * 16)] * 2))
    write_manifest(tmp_path / "meta", m)


def test_fti_placeholder_is_no_run_id(tmp_path):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        c = Config.from_string("[restart]\nexec_id = XXXX-XX-XX_XX-XX-XX\n", source="config.fti")
    assert c.exec_id == ""
    assert any("XXXX-XX-XX_XX-XX-XX (FTI's template placeholder)" in str(w.message) for w in seen)
    state = inspect_run(_config(tmp_path, exec_id=c.exec_id), 2, [])
    assert not state.restarted and ID_RE.match(state.exec_id), state.exec_id


def test_exec_id_is_ignored_on_a_fresh_start(tmp_path):
    state = inspect_run(_config(tmp_path, exec_id="named-run"), 2, [])
    assert not state.restarted and not state.problem
    assert state.exec_id != "named-run" and ID_RE.match(state.exec_id), state.exec_id


def test_exec_id_is_the_restarts_key_with_failure_1_to_3(tmp_path):
    _manifest_of(tmp_path, "run-a")
    # failure = 0: ftkit detects the restart from meta_dir; exec_id is not read (as in FTI)
    state = inspect_run(_config(tmp_path, exec_id="run-b"), 2, [])
    assert state.restarted and not state.problem and state.exec_id == "run-a"
    for failure in (1, 2, 3):
        state = inspect_run(_config(tmp_path, exec_id="run-b", failure=failure), 2, [])
        assert state.restarted and "belongs to run 'run-a'" in state.problem and "'run-b'" in state.problem
        state = inspect_run(_config(tmp_path, exec_id="run-a", failure=failure), 2, [])
        assert state.restarted and not state.problem and state.exec_id == "run-a"


def test_config_check_says_when_exec_id_is_read(tmp_path):
    path = tmp_path / "c.fti"
    path.write_text("[restart]\nfailure = 0\nexec_id = run-a\n")
    out = io.StringIO()
    assert check_config(path, out) == 0
    assert "exec_id = run-a\n        unused: matters only with failure != 0 (as in FTI)" in out.getvalue()
    path.write_text("[restart]\nfailure = 1\nexec_id = run-a\n")
    out = io.StringIO()
    assert check_config(path, out) == 0
    assert "exec_id = run-a\n        used: identity of the run to restart" in out.getvalue()
