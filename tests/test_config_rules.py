"""FTI's INI parser rules (case, comments, repeats, empty values, unknown keys) and directory keys
($VAR expansion, the node-local default)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from ftkit import Config, ConfigError, ConfigWarning
from ftkit.config import node_local_default


def _load(text: str, **overrides) -> tuple[Config, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = Config.from_string(text, source="t.ini", **overrides)
    msgs = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert len(msgs) <= 1, msgs
    return cfg, (msgs[0] if msgs else "")


def test_section_and_key_names_are_case_insensitive():
    cfg, msg = _load("[BASIC]\nCKPT_L2 = 4\nGroup_Size = 8\n[Advanced]\nTransfer_Size = 32\n")
    assert (cfg.ckpt_l2, cfg.group_size, cfg.transfer_size) == (4, 8, 32) and msg == ""


def test_comments_as_iniparser_allows_them():
    text = ("# a comment\n; another\n   # indented comment\n[basic]\n"
            "ckpt_l1 = 3 # minutes\nckpt_l2 = 4;no space\n"
            "ckpt_l3 = \\\n  5\n[restart]\nexec_id = \"run#1\"\n")
    with pytest.raises(ConfigError, match="'run#1' is not a plain name"):   # quoted: '#' is in the value
        _load(text)
    cfg, msg = _load(text.replace('"run#1"', "'run-1' ; the run"))
    assert (cfg.ckpt_l1, cfg.ckpt_l2, cfg.ckpt_l3, cfg.exec_id) == (3, 4, 5, "run-1") and msg == ""
    cfg, _ = _load('[restart]\nexec_id = ""\n')
    assert cfg.exec_id == ""


def test_a_repeated_key_keeps_the_last_value_and_names_both_lines():
    cfg, msg = _load("[basic]\nckpt_l4 = 2\n\nckpt_l4 = 9\n")
    assert cfg.ckpt_l4 == 9
    assert "ckpt_l4 is set twice (line 2 and line 4): the last value, '9', is used" in msg
    # FTI's code spells the Lustre keys 'stiping': both spellings are the same key
    cfg, msg = _load("[advanced]\nlustre_striping_unit = 1\nlustre_stiping_unit = 2\n")
    assert cfg.lustre_striping_unit == 2 and "set twice (line 2 and line 3)" in msg


def test_an_empty_value_means_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    cfg, msg = _load("[basic]\nckpt_l1 = 7\nckpt_l1 =\ngroup_size = ;comment\nckpt_dir =\n")
    assert (cfg.ckpt_l1, cfg.group_size, cfg.ckpt_dir) == (0, 4, tmp_path / "ftkit-local")
    assert "line 3: [basic] ckpt_l1 is empty: the default, 0, is used" in msg
    assert "line 4: [basic] group_size is empty: the default, 4, is used" in msg
    assert "line 5: [basic] ckpt_dir is empty" in msg
    assert "set twice (line 2 and line 3)" in msg
    _, msg = _load("[restart]\nexec_id =\n")   # empty is exec_id's default: nothing to say
    assert msg == ""


@pytest.mark.parametrize("text,words", [
    ("[basic]\nckpt_lvl = 3\n", ["unknown key 'ckpt_lvl' in [basic] is ignored",
                                 "closest known key: [basic] ckpt_l"]),
    ("[basic]\ntransfer_size = 8\n", ["unknown key 'transfer_size' in [basic]", "[advanced] transfer_size"]),
    ("[basics]\nhead = 1\n", ["section [basics] is not one FTI or ftkit reads", "[basic]"]),
    ("head = 1\n[basic]\n", ["unknown key 'head' outside any section", "[basic] head"]),
    ("[basic]\nzzqq = 1\n", ["unknown key 'zzqq' in [basic] is ignored"]),
])
def test_unknown_keys_are_a_warning_naming_the_closest_key(text, words):
    cfg, msg = _load(text)
    for w in words:
        assert w in msg, (w, msg)
    assert cfg.head == 0 and cfg.transfer_size == 16      # nothing unknown was applied


def test_every_fti_16_key_is_accepted():
    text = """
[basic]
dcp_l4 = 2
cacheddcp = 1
keep_heads_alive = 1
max_var_id = 500
h5_single_file_dir = /h5
h5_single_file_prefix = run
h5_single_file_keep = yes
h5_single_file_enable = true
h5_single_file_inline = 0
ckpt_io = 5
dcp_block_size = -1
enable_dcp = 1
enable_staging = 1
[advanced]
fast_forward = 2
gpu_host_bufsize = 1048576
lustre_stiping_unit = 1048576
lustre_stiping_factor = 4
lustre_stiping_offset = 0
[injection]
index = 3
number = 2
"""
    cfg, msg = _load(text)
    assert (cfg.dcp_l4, cfg.fast_forward, cfg.dcp_block_size, cfg.inj_index) == (2, 2, 16384, 3)
    assert (cfg.lustre_striping_unit, cfg.lustre_striping_factor, cfg.h5_single_file_keep) == (1048576, 4, 1)
    assert "dcp_block_size = -1 (FTI's 'unset'): ftkit uses 16384 bytes" in msg
    for words in ("ckpt_io = 5", "written as POSIX files", "cacheddcp = 1", "keep_heads_alive = 1",
                  "max_var_id = 500", "h5_single_file_dir = /h5", "h5_single_file_enable = 1",
                  "h5_single_file_inline = 0", "enable_staging = 1", "gpu_host_bufsize = 1048576",
                  "lustre_striping_factor = 4", "[injection] index = 3", "[injection] number = 2",
                  "use ftkit.inject"):
        assert words in msg, words
    assert msg.count("ignored keys") == 1     # ONE warning, one list


def test_group_size_1_loads_only_without_l2_l3():
    cfg, msg = _load("[basic]\ngroup_size = 1\nckpt_l1 = 1\nckpt_l4 = 2\n")
    assert cfg.group_size == 1 and "L2 or L3 checkpoint will be refused" in msg
    with pytest.raises(ConfigError, match="L3 checkpoint needs groups"):
        cfg.check_level(3)
    Config().check_level(2)
    with pytest.raises(ConfigError, match="ckpt_l3 = 4"):
        Config(group_size=1, ckpt_l3=4)


def test_dollar_variables_in_directory_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("FTK_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("FTK_JOB", "job7")
    cfg, _ = _load("[basic]\nckpt_dir = $FTK_SCRATCH/ckpt\nglbl_dir = ${FTK_SCRATCH}/g/${FTK_JOB}\n"
                   "meta_dir = ~/m\n")
    assert cfg.ckpt_dir == tmp_path / "scratch" / "ckpt"
    assert cfg.glbl_dir == tmp_path / "scratch" / "g" / "job7"
    assert cfg.meta_dir == Path.home() / "m"
    monkeypatch.delenv("FTK_UNSET_VAR", raising=False)
    with pytest.raises(ConfigError, match=r"ckpt_dir = '\$FTK_UNSET_VAR/x'.*\$FTK_UNSET_VAR is not set"):
        _load("[basic]\nckpt_dir = $FTK_UNSET_VAR/x\n")
    with pytest.raises(ConfigError, match=r"glbl_dir.*FTK_UNSET_VAR is not set"):
        Config(glbl_dir="${FTK_UNSET_VAR}")
    with pytest.raises(ConfigError, match="not an environment variable name"):
        Config(meta_dir="${A:-b}")


def test_node_local_default_for_ckpt_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_TMPDIR", str(tmp_path / "slurm"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    assert Config().ckpt_dir == tmp_path / "slurm" / "ftkit-local" == node_local_default()
    monkeypatch.delenv("SLURM_TMPDIR")
    assert Config().ckpt_dir == tmp_path / "tmp" / "ftkit-local"
    monkeypatch.delenv("TMPDIR")
    assert Config().ckpt_dir == tmp_path / "ftkit-local"
    assert Config().glbl_dir == tmp_path / "ftkit-global"     # global and meta stay in the working directory


def test_boolean_keys_read_as_fti_reads_them():
    for word, value in (("yes", 1), ("No", 0), ("TRUE", 1), ("f", 0), ("1", 1)):
        assert _load(f"[basic]\nenable_dcp = {word}\n")[0].enable_dcp == value
