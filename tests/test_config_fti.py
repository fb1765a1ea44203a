"""FTI 1.6's own configuration files load in ftkit, with FTI's meaning; ``ftkit config check`` explains them.

The files are read at test time from FTI 1.6's source tarball (``../shared/anchors/fti/fti-v1.6.tar.gz``
relative to the repository root; from a git worktree, relative to the main checkout).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import warnings
from functools import cache
from pathlib import Path

import pytest

from ftkit import Config, ConfigError, ConfigWarning
from ftkit.cli import main as ftkit_main
from ftkit.config_fti import KEYS, key_status

REPO = Path(__file__).resolve().parents[1]
TARBALL = "fti-v1.6.tar.gz"


def _anchor_dirs() -> list[Path]:
    dirs = [REPO.parent / "shared" / "anchors" / "fti"]
    try:  # a git worktree: the shared directory sits beside the main checkout
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=REPO,
                                capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        dirs.append(Path(common).parent.parent / "shared" / "anchors" / "fti")
    except (OSError, subprocess.SubprocessError):
        pass
    return dirs


@cache
def fti_examples() -> dict[str, str]:
    """Every .fti/.ini file of FTI 1.6's examples/ tree: path in the tarball -> text."""
    for d in _anchor_dirs():
        if (d / TARBALL).is_file():
            with tarfile.open(d / TARBALL) as tar:
                return {m.name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                        for m in tar.getmembers() if m.isfile() and m.name.startswith("examples/")
                        and m.name.endswith((".fti", ".ini"))}
    return {}


def _names() -> list[str]:
    return sorted(fti_examples()) or ["<tarball absent>"]


def _text(name: str) -> str:
    if not fti_examples():
        pytest.skip(f"FTI 1.6 tarball {TARBALL} not found in {[str(d) for d in _anchor_dirs()]}")
    return fti_examples()[name]


def _load(text: str, source: str) -> tuple[Config, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = Config.from_string(text, source=source)
    msgs = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert len(msgs) <= 1, msgs   # everything in ONE warning per load
    return cfg, msgs


# words every file's single warning must contain, beyond the ignored keys (checked for every file)
EXPECTED_NOTES = {
    "examples/GPU/heatdis/configH1.fti": ["line 5: [basic] ckpt_dir is empty", "meta_dir is set twice "
                                          "(line 7 and line 8)"],
    "examples/GPU/heatdis/configH0.fti": ["line 5: [basic] ckpt_dir is empty", "unknown key 'profile_dir'"],
    "examples/GPU/Jacobi/H0FTIFF.fti": ["ckpt_io = 3", "written as POSIX files"],
    "examples/GPU/Jacobi/H0FTIFFDCP.fti": ["ckpt_io = 3", "written as POSIX files", "dcp_mode = 1"],
    "examples/GPU/Jacobi/H0POSIXDCPCached.fti": ["cacheddcp = 1"],
    "examples/GPU/Jacobi/H1POSIX.fti": ["group_size = 1", "L2 or L3 checkpoint will be refused"],
}


def test_the_tarball_holds_the_eleven_example_files():
    if not fti_examples():
        pytest.skip(f"FTI 1.6 tarball {TARBALL} not found in {[str(d) for d in _anchor_dirs()]}")
    assert len(fti_examples()) == 11, sorted(fti_examples())
    assert set(EXPECTED_NOTES) <= set(fti_examples())


@pytest.mark.parametrize("name", _names())
def test_every_fti_example_loads_with_the_expected_warning(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    cfg, msgs = _load(_text(name), name)
    assert len(msgs) == 1 and msgs[0] == f"{name}: configuration notes:\n  " + "\n  ".join(cfg.notes)
    for words in EXPECTED_NOTES.get(name, []):
        assert words in msgs[0], (words, msgs[0])
    ignored = [s for s in KEYS if key_status(cfg, s)[0] == "ignored" and s.name in cfg.present]
    verbosity = next(s for s in KEYS if s.name == "verbosity")   # every example sets it: the log's level
    assert "verbosity" in cfg.present and key_status(cfg, verbosity)[0] == "used"
    for spec in ignored:
        assert f"[{spec.section}] {spec.ini} = {getattr(cfg, spec.name)}" in msgs[0], spec.name
    assert f"[{spec.section}] ckpt_l1 " not in msgs[0]   # used keys are not reported as ignored


def test_fti_values_mean_what_fti_means(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    t, _ = _load(_text("examples/template.ini"), "template.ini")   # [Basic], Ckpt_L1, Dcp_L4: any case
    assert (t.head, t.node_size, t.group_size) == (0, 2, 4)
    assert [t.interval(lv) for lv in (1, 2, 3, 4)] == [3, 5, 7, 11] and t.dcp_l4 == 0
    assert (t.inline(2), t.inline(3), t.inline(4), t.keep_last_ckpt, t.keep_l4_ckpt) == (True,) * 3 + (0, 0)
    assert t.ckpt_dir == tmp_path / "Local" and t.glbl_dir == tmp_path / "Global"   # '#' comment cut off
    assert t.exec_id == "" and t.interval_unit == "minutes"   # FTI's placeholder is no run id
    h, _ = _load(_text("examples/GPU/heatdis/configH1.fti"), "configH1.fti")
    assert (h.head, h.node_size, h.group_size, h.interval(4)) == (1, 3, 4, 5)
    assert (h.inline(2), h.inline(3), h.inline(4)) == (False, False, False)
    assert h.meta_dir == Path("/gpfs/scratch/bsc93/bsc93780/ftiTest/Profile/prf_")   # the last one wins
    assert h.ckpt_dir == tmp_path / "ftkit-local"                                   # empty: the default
    j, _ = _load(_text("examples/GPU/Jacobi/H1POSIX.fti"), "H1POSIX.fti")
    assert (j.head, j.node_size, j.group_size, j.interval(1), j.interval(4)) == (1, 5, 1, 1, 7)
    assert j.enable_dcp == 1
    j.check_level(1)
    j.check_level(4)
    for level in (2, 3):
        with pytest.raises(ConfigError, match=rf"L{level} checkpoint needs groups .* group_size = 1"):
            j.check_level(level)
    d, _ = _load(_text("examples/GPU/Jacobi/H0POSIXDCP.fti"), "H0POSIXDCP.fti")
    assert (d.enable_dcp, d.dcp_block_size, d.interval(1)) == (1, 4096, 2)


def test_dcp_l4_and_fast_forward(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = _text("examples/template.ini")
    on, msgs = _load(base.replace("Dcp_L4 = 0", "Dcp_L4 = 3").replace("Enable_dCP                  = 0",
                                                                      "Enable_dCP = 1"), "on")
    assert (on.dcp_l4, on.enable_dcp, on.interval(4)) == (3, 1, 11) and "dcp_l4" not in msgs[0]
    off, msgs = _load(base.replace("Dcp_L4 = 0", "Dcp_L4 = 3"), "off")
    assert off.dcp_l4 == 3 and "[basic] dcp_l4 = 3" in msgs[0] and "enable_dcp = 0" in msgs[0]
    ff, _ = _load("[advanced]\nfast_forward = 5\n", "ff")
    assert ff.fast_forward == 5 and Config().fast_forward == 1


def _check(path: Path, capsys) -> tuple[int, str]:
    code = ftkit_main(["config", "check", str(path)])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("name", _names())
def test_config_check_explains_every_example(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text = _text(name)
    path = tmp_path / Path(name).name
    path.write_text(text)
    cfg, _ = _load(text, str(path))
    code, out = _check(path, capsys)
    assert code == 0 and out.rstrip().endswith(f"result: the file loads ({len(cfg.notes)} warning(s))")
    ignored = [s for s in KEYS if s.name in cfg.present and key_status(cfg, s)[0] == "ignored"]
    assert ignored
    for spec in ignored:
        assert f"] {spec.ini} = " in out and f"ignored: {spec.instead}" in out, spec.name
    for note in cfg.notes:
        assert f"  - {note}" in out


def test_config_check_reports_errors_with_exit_1(tmp_path, capsys):
    bad = tmp_path / "bad.fti"
    bad.write_text("[Basic]\nCkpt_L1 = soon\nckpt_l2 = 2\n[Restart]\nexec_id = ..\n")
    code, out = _check(bad, capsys)
    assert code == 1 and "result: the file does not load" in out
    assert "ckpt_l1 = 'soon' is not an integer" in out and "ERROR" in out
    assert "exec_id = '..' is not a plain name" in out
    code, out = _check(tmp_path / "missing.fti", capsys)
    assert code == 2 and "cannot read" in out   # nothing to check: a usage error


def test_config_check_runs_as_a_command(tmp_path):
    path = tmp_path / "c.ini"
    path.write_text("[basic]\nckpt_io = 5\ntransfer_sise = 8\n")
    proc = subprocess.run([sys.executable, "-m", "ftkit", "config", "check", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ignored: ftkit writes POSIX files only" in proc.stdout
    assert "unknown key 'transfer_sise' in [basic] is ignored (closest known key: [advanced] transfer_size)" \
        in proc.stdout
    helptext = subprocess.run([sys.executable, "-m", "ftkit", "config", "check", "--help"],
                              capture_output=True, text=True, timeout=120).stdout
    assert "key by key" in helptext and "Exit status" in helptext

