"""Config: FTI's INI keys as they are, ftkit's own keys, and clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ftkit import Config, ConfigError, ConfigWarning, UnsafePathError
from ftkit.config import load_config

from .conftest import run_python

FTI_SAMPLE = """
[basic]
head                           = 0
node_size                      = 2
ckpt_dir                       = ./local
glbl_dir                       = ./global
meta_dir                       = ./.fti
ckpt_l1                        = 3
ckpt_l2                        = 5
ckpt_l3                        = 7
ckpt_l4                        = 11
inline_l2                      = 1
inline_l3                      = 1
inline_l4                      = 1
keep_last_ckpt                 = 0
keep_l4_ckpt                   = 0
group_size                     = 4
max_sync_intv                  = 0
verbosity                      = 2
ckpt_io                        = 1
enable_staging                 = 0
enable_dcp                     = 0
dcp_mode                       = 0
dcp_block_size                 = 16384
dcp_stack_size                 = 5
enable_icp                     = 0

[restart]
failure                        = 0
exec_id                        = 2018-09-13_12-42-17

[injection]
rank                           = 0
number                         = 0
position                       = 0
frequency                      = 0

[advanced]
block_size                     = 1024
transfer_size                  = 16
general_tag                    = 2612
ckpt_tag                       = 711
stage_tag                      = 406
final_tag                      = 3107
local_test                     = 1
lustre_striping_unit           = 4194304
lustre_striping_factor         = -1
lustre_striping_offset         = -1
"""


def test_reads_fti_config_as_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.fti").write_text(FTI_SAMPLE)
    with pytest.warns(ConfigWarning, match=r"ignored keys .*general_tag = 2612"):
        c = Config.from_file("config.fti")
    assert (c.node_size, c.group_size, c.ckpt_l1, c.ckpt_l2, c.ckpt_l3, c.ckpt_l4) == (2, 4, 3, 5, 7, 11)
    assert c.ckpt_dir == tmp_path / "local" and c.meta_dir == tmp_path / ".fti"
    assert c.exec_id == "2018-09-13_12-42-17" and c.dcp_block_size == 16384 and c.transfer_size == 16
    assert c.interval_unit == "minutes" and c.l3_code == "rs" and c.io_chunk_bytes == 16 * 2**20
    assert c.inline(1) and c.inline(4) and c.interval(3) == 7


def test_ftkit_keys_in_their_section_or_basic():
    c = Config.from_string("[ftkit]\ninterval_unit = iterations\nl3_code = XOR\nmtbf = 3600\n"
                           "failure_timeout = 12.5\n")
    assert (c.interval_unit, c.l3_code, c.mtbf, c.failure_timeout) == ("iterations", "xor", 3600.0, 12.5)
    assert Config.from_string("[basic]\ninterval_unit = iterations\n").interval_unit == "iterations"
    assert Config().redundancy_sync == "background"
    assert Config.from_string("[ftkit]\nredundancy_sync = Commit\n").redundancy_sync == "commit"
    assert Config.from_string("[basic]\nckpt_l1 = 2 ; a comment\n").ckpt_l1 == 2
    assert Config.from_string("[ftkit]\ngroup_access = 1\n").group_access == 1
    assert Config().group_access == 0


@pytest.mark.parametrize("text,words", [
    ("[basic]\ngroup_size = 0\n", ["group_size", "0", ">= 1"]),
    ("[basic]\ngroup_size = 1\nckpt_l2 = 5\n", ["group_size = 1", "ckpt_l2 = 5", "group_size >= 2"]),
    ("[basic]\ngroup_size = four\n", ["group_size", "'four'", "not an integer"]),
    ("[basic]\nhead = 2\n", ["head", "2", "0 or 1"]),
    ("[basic]\nckpt_l1 = -5\n", ["ckpt_l1", "-5", ">= 0"]),
    ("[basic]\nckpt_l1 = 3 minutes\n", ["ckpt_l1", "'3 minutes'", "not an integer"]),
    ("[basic]\ndcp_l4 = often\n", ["dcp_l4", "'often'", "not an integer"]),
    ("[basic]\nckpt_io = 7\n", ["ckpt_io", "7", "1 or 2 or 3 or 4 or 5 or 6"]),
    ("[basic]\nenable_dcp = maybe\n", ["enable_dcp", "'maybe'", "not a boolean"]),
    ("[basic]\nverbosity = 0\n", ["verbosity", "1 or 2 or 3"]),
    ("[basic]\ndcp_block_size = 100\n", ["dcp_block_size", ">= 512", "-1"]),
    ("[advanced]\ntransfer_size = 100\n", ["transfer_size", "<= 64", "memory"]),
    ("[advanced]\nfast_forward = 11\n", ["fast_forward", "<= 10"]),
    ("[advanced]\nfast_forward = 0\n", ["fast_forward", ">= 1"]),
    ("[restart]\nfailure = 7\n", ["failure", "7"]),
    ("[restart]\nexec_id = ../../etc\n", ["exec_id", "plain name"]),
    ("[restart]\nexec_id = ..\n", ["exec_id", "'..'", "plain name"]),
    ("[restart]\nexec_id = .\n", ["exec_id", "'.'", "plain name"]),
    ("[restart]\nexec_id = /abs/run\n", ["exec_id", "plain name"]),
    ("[ftkit]\ninterval_unit = hours\n", ["interval_unit", "minutes or iterations"]),
    ("[ftkit]\nl3_code = lrc\n", ["l3_code", "rs or xor"]),
    ("[ftkit]\nfailure_timeout = 0\n", ["failure_timeout", "> 0"]),
    ("[ftkit]\nmtbf = nan\n", ["mtbf", "finite"]),
    ("[ftkit]\ngroup_access = 2\n", ["group_access", "0 or 1"]),
    ("[ftkit]\nredundancy_sync = later\n", ["redundancy_sync", "background or commit"]),
    ("[basic]\nthis line has no equals sign\n", ["line 2", "neither a [section]"]),
])
def test_bad_values_name_key_value_and_allowed(text, words):
    with pytest.raises(ConfigError) as err:
        Config.from_string(text)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_exec_id_dot_is_an_unsafe_path_error():
    # issue 13 defect 2: '..' as exec_id put files outside glbl_dir and finalize() removed its parent.
    for bad in ("..", ".", "a/b"):
        with pytest.raises(UnsafePathError):
            Config(exec_id=bad)
    assert Config(exec_id="").exec_id == "" and Config(exec_id="run-1.a_b").exec_id == "run-1.a_b"


def test_keyword_construction_is_validated():
    with pytest.raises(ConfigError, match="node_size"):
        Config(node_size=-1)
    with pytest.raises(ConfigError, match="not an integer"):
        Config(ckpt_l1=1.5)
    with pytest.raises(ConfigError, match="not an integer"):
        Config(head=True)
    assert Config(ckpt_l4=2).replace(ckpt_l4=3).ckpt_l4 == 3
    with pytest.raises(ConfigError, match="unknown configuration key"):
        load_config({"ckpt_l9": 1})
    assert load_config({"ckpt_l2": 4}).ckpt_l2 == 4


def test_job_dependent_checks(tmp_path):
    with pytest.raises(ConfigError, match=r"node_size = 3 does not divide the number of ranks \(8\)"):
        Config(node_size=3).validate_for(8)
    Config(node_size=4).validate_for(8)
    with pytest.raises(ConfigError, match="head = 1"):
        Config(head=1, node_size=1).validate_for(4)


def test_directories_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    c = Config(ckpt_dir=blocker / "sub", glbl_dir=tmp_path / "g", meta_dir=tmp_path / "m")
    with pytest.raises(ConfigError) as err:
        c.ensure_dirs()
    assert "ckpt_dir" in str(err.value) and str(blocker / "sub") in str(err.value)
    Config(ckpt_dir=tmp_path / "a", glbl_dir=tmp_path / "b", meta_dir=tmp_path / "c").ensure_dirs()
    assert all((tmp_path / x).is_dir() for x in "abc")


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.from_file(tmp_path / "nope.ini")
    with pytest.raises(ConfigError):
        load_config(Path(tmp_path / "nope.ini"))


# -- issue 30 (C1, W1) ---------------------------------------------------------------------------------------

_PROGRAM = Path(__file__).resolve().parent / "programs" / "config_start.py"
_DIRS = "[basic]\nckpt_dir = run/local\nglbl_dir = run/global\nmeta_dir = run/meta\nnode_size = 2\n"
_FTKIT = "[ftkit]\nfailure_timeout = 120\n"


def test_nul_byte_in_a_directory_is_a_config_error(tmp_path):
    for key in ("ckpt_dir", "glbl_dir", "meta_dir"):
        with pytest.raises(ConfigError, match=rf"{key} = .*NUL byte"):
            Config.from_string(f"[basic]\n{key} = run/a\x00b\n")
        with pytest.raises(ConfigError, match="NUL byte"):
            Config(**{key: Path("run/a\x00b")})
    path = tmp_path / "nul.ini"
    path.write_text("[basic]\nckpt_dir = run/lo\x00cal\n")
    proc = subprocess.run([sys.executable, "-m", "ftkit", "config", "check", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NUL byte" in proc.stdout and "result: the file does not load" in proc.stdout, proc.stdout


@pytest.mark.mpi
def test_nul_byte_in_a_directory_is_a_config_error_from_the_checkpointer(tmp_path):
    (tmp_path / "c.ini").write_text(_DIRS.replace("run/meta", "run/me\x00ta") + _FTKIT)
    r = run_python(2, _PROGRAM, "--config", "c.ini", node_size=2, cwd=tmp_path, timeout=240)
    assert not r.timed_out and r.returncode == 0, r.stdout + r.stderr
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("R"))
    assert len(lines) == 2, r.stdout + r.stderr
    for line in lines:
        assert " error ConfigError: " in line and "meta_dir" in line and "NUL byte" in line, line


@pytest.mark.mpi
def test_config_warning_once_per_job_at_the_users_call(tmp_path):
    (tmp_path / "c.ini").write_text(_DIRS + "verbosity = 3\n[advanced]\ngeneral_tag = 5\n" + _FTKIT)
    r = run_python(4, _PROGRAM, "--config", "c.ini", node_size=2, cwd=tmp_path, timeout=240).check()
    assert r.stdout.count("started") == 4, r.stdout + r.stderr
    assert r.stderr.count("ConfigWarning") == 1, r.stderr   # rank 0 only, not one blob per rank
    assert r.stderr.count("general_tag = 5") == 1, r.stderr
    line = next(i for i, text in enumerate(_PROGRAM.read_text().splitlines(), 1) if "# USER CALL" in text)
    assert f"{_PROGRAM}:{line}: ConfigWarning" in r.stderr, r.stderr
    assert "src/ftkit" not in r.stderr, r.stderr
