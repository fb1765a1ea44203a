"""Faults during and between runs: a rank killed mid-checkpoint, corrupted and truncated files, missing or
foreign manifests, wrong shapes. Every case ends in correct data or a clear error on every rank, never a
hang."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from ftkit.inject import corrupt_file, truncate_file

from ._util import copy_run, l1_file, rank_lines, run_app, write_config

pytestmark = pytest.mark.mpi

N = 4  # ranks, in 2 emulated nodes


def _recovered(lines: dict[int, str]) -> dict[int, dict[str, str]]:
    out = {}
    for r, line in lines.items():
        assert line.startswith("recovered"), f"rank {r}: {line}"
        out[r] = dict(re.findall(r"(\w+)=(\S+)", line))
        assert out[r]["data"] == "ok", f"rank {r} recovered wrong data: {line}"
    return out


@pytest.mark.parametrize("kill_rank,stage", [(1, "after_write"), (0, "before_commit")])
def test_killed_during_checkpoint_leaves_previous_recoverable(tmp_path, kill_rank, stage):
    d = tmp_path / "run"
    write_config(d)
    r = run_app(d, N, "--mode", "write", "--levels", "1,1", "--kill-rank", str(kill_rank),
                "--kill-stage", stage,
                "--kill-index", "1")
    assert f"R{kill_rank} wrote id=1" in r.stdout and "wrote id=2" not in r.stdout, r.stdout + r.stderr
    r = run_app(d, N, "--mode", "recover").check()
    got = _recovered(rank_lines(r.stdout, N))
    assert all(v["id"] == "1" and v["step"] == "0" and v["level"] == "1" for v in got.values()), r.stdout


@pytest.mark.parametrize("stage", ["after_commit", "before_remove", "removed_level"])
def test_killed_between_commit_and_removal_recovers_the_new_checkpoint_bit_for_bit(tmp_path, stage):
    # Checkpoint 2's commit prunes checkpoint 1, whose files are removed after the call returns, in a
    # background thread (issue 37). Rank 1 is killed after the commit: before the removal starts (in the call,
    # or in the thread) or with it half done (its L1 file of checkpoint 1 gone, the other levels not yet
    # visited). Checkpoint 2 is recovered on every rank, bit for bit.
    d = tmp_path / "run"
    write_config(d)
    r = run_app(d, N, "--mode", "write", "--levels", "1,1", "--kill-rank", "1", "--kill-stage", stage,
                "--kill-index", "1", "--wait-after")
    assert not r.timed_out, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "R1 wrote id=1" in out and "R0 wrote id=2" in out, out
    if stage == "after_commit":  # killed in the call; else in the removal thread (maybe before the print)
        assert "R1 wrote id=2" not in out, out
    assert "ftkit launch: rank 1 killed" in out, out
    assert "checkpoint error" not in out, out
    if stage == "removed_level":
        assert not list((d / "run" / "local").glob("node*/*/l1/ckpt1/rank1.ftk")), "the removal had begun"
    r = run_app(d, N, "--mode", "recover").check()
    got = _recovered(rank_lines(r.stdout, N))  # data=ok: np.array_equal with the values written
    assert all(v["id"] == "2" and v["step"] == "1" and v["level"] == "1" for v in got.values()), r.stdout


def test_pruned_checkpoints_are_removed_once_the_job_leaves(tmp_path):
    # The removal of pruned checkpoints runs after the calls; a job that ends (without finalize) has finished
    # it: only the newest checkpoint's files are left.
    d = tmp_path / "run"
    write_config(d)
    run_app(d, N, "--mode", "write", "--levels", "1,1,1").check()
    left = sorted(p.relative_to(d / "run" / "local") for p in (d / "run" / "local").rglob("*.ftk"))
    assert [p.parent.name for p in left] == ["ckpt3"] * N, left
    assert not list((d / "run" / "local").glob("node*/*/l1/ckpt[12]")), "pruned directories are removed"


def test_a_failure_seen_by_one_rank_before_the_commit_commits_nothing(tmp_path):
    # Rank 3 alone sees a process failure after the last agreement before the commit, which ranks 0-2 passed
    # (as when a peer dies inside that allreduce: it can complete on some ranks and fail on others). Before,
    # ranks 0-2 committed checkpoint 2 and pruned checkpoint 1 while rank 3 deleted its files of 2: neither
    # was recoverable. Now one agreement decides the commit alike everywhere: 2 is not committed, 1 stays.
    d = tmp_path / "run"
    write_config(d)
    r = run_app(d, N, "--mode", "write", "--levels", "1,1", "--kill-rank", "3", "--kill-stage", "after_post",
                "--kill-index", "1", "--kill-how", "raise")
    assert not r.timed_out, r.stdout + r.stderr
    lines = rank_lines(r.stdout, N)
    assert all("ProcessFailure" in line for line in lines.values()), r.stdout + r.stderr
    assert "wrote id=2" not in r.stdout, r.stdout
    r = run_app(d, N, "--mode", "recover").check()
    got = _recovered(rank_lines(r.stdout, N))
    assert all(v["id"] == "1" and v["step"] == "0" for v in got.values()), r.stdout


def test_an_inline_level_failing_on_some_ranks_fails_on_every_rank_and_commits_nothing(tmp_path, small_disk):
    # The node-local disk fills up with checkpoint 2's partner copies (ENOSPC on some ranks only, in the
    # inline L2 step). That step's outcome is agreed in the commit gate's agreement, with the commit
    # (issue 37: one round instead of two): every rank raises the same CheckpointError naming the failed
    # ranks, checkpoint 2 is committed nowhere and its files are gone, and checkpoint 1 is recovered.
    d = tmp_path / "run"
    n = 200_000                                            # 1.6 MB per rank's file
    local = small_disk(10 * n * 8)                         # 8 L1 files fit, not the 4 partner copies too
    write_config(d, group_size=2, ckpt_dir=local)
    r = run_app(d, N, "--mode", "write", "--levels", "1,2", "--n", str(n))
    assert not r.timed_out, r.stdout + r.stderr
    for rank, line in rank_lines(r.stdout, N).items():     # each rank's last line
        assert re.match(r"checkpoint error CheckpointError: checkpoint 2: L2 post-processing failed on "
                        r"\d rank", line), f"rank {rank}: {line}"
        assert "No space left on device" in line, line
    assert "wrote id=2" not in r.stdout, r.stdout
    manifest = json.loads((d / "run" / "meta" / "manifest.json").read_text())
    assert [e["id"] for e in manifest["checkpoints"]] == [1], manifest
    assert not list(local.glob("node*/*/l*/ckpt2/*.ftk")), "the failed checkpoint's files are left"
    got = _recovered(rank_lines(run_app(d, N, "--mode", "recover", "--n", str(n)).check().stdout, N))
    assert all(v["id"] == "1" and v["step"] == "0" for v in got.values()), got


def test_corrupted_l1_falls_back_to_l4(tmp_path):
    d = tmp_path / "run"
    write_config(d, inline_l4=0)          # L4 through L1 + flush: checkpoint 1 exists at L1 and L4
    run_app(d, N, "--mode", "write", "--levels", "4,1").check()
    corrupt_file(l1_file(d, 2, 2), offset=-100)   # newest checkpoint (L1 only): unusable on rank 2
    corrupt_file(l1_file(d, 1, 1), offset=-8)     # older one: rank 1 must read its L4 copy
    r = run_app(d, N, "--mode", "recover").check()
    got = _recovered(rank_lines(r.stdout, N))
    assert all(v["id"] == "1" and v["step"] == "0" and v["level"] == "4" for v in got.values()), r.stdout
    assert got[1]["source"] == "4" and got[0]["source"] == "1" and got[3]["source"] == "1"
    assert "checkpoint 2" in r.stdout and "rank 2" in r.stdout and "checksum mismatch" in r.stdout


@pytest.fixture(scope="module")
def l1_only_run(tmp_path_factory):
    """A 4-rank run that took two L1 checkpoints and died (no L4 copy anywhere)."""
    d = tmp_path_factory.mktemp("l1only") / "run"
    write_config(d)
    run_app(d, N, "--mode", "write", "--levels", "1,1").check()
    return d


def _error_lines(d, nranks, *args):
    r = run_app(d, nranks, "--mode", "recover", *args)
    assert not r.timed_out
    lines = rank_lines(r.stdout, nranks)
    for rank, line in lines.items():
        assert line.startswith("error "), f"rank {rank}: {line}"
        assert "restarted=True" in line and "untouched=True" in line, line
        assert "again=" in line and "again=none" not in line, "a second recover() must raise too"
        assert "ckpt=CheckpointError" in line, "checkpoint() on an unrecovered restart must raise"
    return lines


def test_corrupted_l1_without_l4_raises_everywhere(l1_only_run, tmp_path):
    d = copy_run(l1_only_run, tmp_path / "c")
    corrupt_file(l1_file(d, 2, 3), offset=-1)
    lines = _error_lines(d, N)
    assert all("RecoveryError" in v and "checksum mismatch" in v and "rank 3" in v for v in lines.values())


def test_truncated_file_raises_everywhere(l1_only_run, tmp_path):
    d = copy_run(l1_only_run, tmp_path / "t")
    f = l1_file(d, 2, 0)
    truncate_file(f, f.stat().st_size - 10)
    lines = _error_lines(d, N)
    assert all("RecoveryError" in v and "truncated" in v for v in lines.values())


def test_missing_manifest_is_a_clear_error(l1_only_run, tmp_path):
    d = copy_run(l1_only_run, tmp_path / "m")
    (d / "run" / "meta" / "manifest.json").unlink()
    lines = _error_lines(d, N)
    assert all("manifest" in v and "missing" in v for v in lines.values())


def test_manifest_from_another_run_is_a_clear_error(l1_only_run, tmp_path):
    d = copy_run(l1_only_run, tmp_path / "ranks")
    lines = _error_lines(d, 2)   # relaunched with another rank count
    assert all("4 ranks" in v and "-n 4" in v for v in lines.values())
    d2 = copy_run(l1_only_run, tmp_path / "exec")
    cfg = d2 / "ftkit.ini"
    cfg.write_text(cfg.read_text() + "[restart]\nfailure = 1\nexec_id = some-other-run\n")
    lines = _error_lines(d2, N)
    assert all("some-other-run" in v and "belongs to run" in v for v in lines.values())


def test_wrong_shape_is_refused_before_overwriting(l1_only_run, tmp_path):
    d = copy_run(l1_only_run, tmp_path / "s")
    lines = _error_lines(d, N, "--n", "4000")
    assert all("ShapeMismatchError" in v and "(5000,)" in v and "(4000,)" in v for v in lines.values())


def test_finalize_cleans_up_or_keeps_last(tmp_path):
    d = tmp_path / "fin"
    write_config(d)
    run_app(d, N, "--mode", "write", "--levels", "1,4,1", "--finalize").check()
    assert not (d / "run" / "meta" / "manifest.json").exists()
    assert not (d / "run" / "meta" / "ftkit.run").exists(), "the run is over: the next job starts a new one"
    assert not list((d / "run").rglob("*.ftk"))
    k = tmp_path / "keep"
    write_config(k, keep_last_ckpt=1)
    run_app(k, N, "--mode", "write", "--levels", "1,4,1", "--finalize").check()
    assert len(list((k / "run").rglob("*.ftk"))) == N, "keep_last_ckpt keeps exactly the last checkpoint"
    assert (k / "run" / "meta" / "ftkit.run").read_text().strip() == \
        json.loads((k / "run" / "meta" / "manifest.json").read_text())["exec_id"]
    r = run_app(k, N, "--mode", "recover").check()
    got = _recovered(rank_lines(r.stdout, N))
    assert all(v["id"] == "3" and v["step"] == "2" for v in got.values())
    shutil.rmtree(k)
