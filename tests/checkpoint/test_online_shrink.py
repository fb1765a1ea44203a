"""Issue 18, "continue with fewer ranks": with ``steps(on_shrink=...)`` a rank SIGKILLed from outside while no
spare is left makes the survivors shrink, re-decompose the heat plate and refill it from the checkpoint
through the resharding path; the job ends with the field of the failure-free run bit for bit. What cannot
go on (an array without a layout, a kill during the shrink recovery itself) raises the same
OnlineRecoveryError on every survivor, and a relaunch recovers from the checkpoint on disk.
"""

from __future__ import annotations

import re
import shutil

import pytest

from ftkit.inject import kill_pid

from ..conftest import REPO, run_python
from ._util import digest_of, heat, run_heat, write_config
from .test_online import Job, _bit_identical_recoveries, _digests, _wait_for

pytestmark = pytest.mark.mpi

PROGRAM = REPO / "tests" / "programs" / "online_shrink.py"


def _job(d, napp: int, spares: int, *args: str) -> Job:
    return Job(d, napp, spares, "--pause", "0.02", *args, program=PROGRAM)


def _shrinks(out: str) -> list[tuple[int, int, str, int, int]]:
    """``(old, new, failed, level, recovery number)`` of every shrink line."""
    return [(int(o), int(n), f, int(lv), int(k)) for o, n, f, lv, k in
            re.findall(r"^shrink old=(\d+) new=(\d+) failed=\[(.*)\] ckpt=\d+ level=(\d+) number=(\d+)$", out,
                       re.M)]


def _check_reprs(out: str) -> None:
    """``ckpt.shrinks`` and ``ckpt.recoveries`` show seconds per phase, the same for one recovery."""
    phases = r"repair=(\d+\.\d{3}) s, adopt=(\d+\.\d{3}) s, restore=(\d+\.\d{3}) s, total=(\d+\.\d{3}) s\)$"
    shrink = re.findall(r"^shrink-repr ShrinkReport\(number=1, old_size=8, new_size=7, failed=\(5,\), "
                        r"checkpoint_id=\d+, level=1, " + phases, out, re.M)
    recovery = re.findall(r"^recovery-repr RepairReport\(number=1, dead=\(5,\), checkpoint_id=\d+, level=1, "
                          + phases, out, re.M)
    assert len(shrink) == 1 and shrink == recovery, out
    repair, adopt, restore, total = map(float, shrink[0])
    assert restore > 0 and abs(repair + adopt + restore - total) < 0.002, out


def _errors(d) -> dict[str, str]:
    return {p.name.split(".", 1)[1]: p.read_text() for p in d.glob("online-error.*")}


def _relaunch_recovers(d, nranks: int) -> None:
    again = Job(d, nranks, 0, "--steps", "30", program=PROGRAM).done()
    assert again.returncode == 0, again.stdout + again.stderr
    got, ref = _digests(again.stdout)
    assert got == ref, again.stdout


def test_rank_killed_without_spares_continues_on_seven(tmp_path):
    # 8 ranks on 4 emulated nodes, no spare, L2 every 5 steps: rank 5 dies at step 12. The 7 survivors hold
    # uneven nodes (no L2 groups any more: L4 from now on) and refill 7 bands from the L1 files.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = _job(tmp_path, 8, 0, "--steps", "30")
    job.kill_at(12, [5])
    r = job.done()
    _bit_identical_recoveries(r)
    assert _shrinks(r.stdout) == [(8, 7, "5", 1, 1)], r.stdout
    _check_reprs(r.stdout)
    assert "ConfigWarning" in r.stderr and "nodes hold [2, 2, 1, 2] ranks" in r.stderr, r.stderr
    assert "taken at L4 instead (ckpt_l4 = 5)" in r.stderr, r.stderr


def test_node_lost_then_a_rank_lost_shrinks_twice(tmp_path):
    # Node 2 (ranks 4, 5) dies with its directory at step 12: 6 ranks on 3 nodes, L2 still fits, the old
    # files of node 2 come from their partner copies. Then rank 1 (of the first 8) dies: 5 ranks.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = _job(tmp_path, 8, 0, "--steps", "40")
    job.kill_at(12, [4, 5], node_dirs=(2,))
    job.kill_at(26, [1])
    r = job.done()
    _bit_identical_recoveries(r)
    got = _shrinks(r.stdout)
    assert [(o, n, lv, k) for o, n, _, lv, k in got] == [(8, 6, 2, 1), (6, 5, 1, 2)], r.stdout
    assert got[0][2] == "4, 5" and got[1][2] == "1", r.stdout  # ranks of the communicator of the time


def test_node_lost_with_l3_decodes_on_the_survivors_and_falls_back_to_l4(tmp_path):
    # 4 nodes in one RS group (group_size 4), L3 every 5 steps: node 3 (ranks 6, 7) dies with its directory.
    # The 6 survivors decode the lost files in the smaller job; 3 nodes no longer make a group of 4: L4.
    write_config(tmp_path, group_size=4, ckpt_l3=5)
    job = _job(tmp_path, 8, 0, "--steps", "30")
    job.kill_at(12, [6, 7], node_dirs=(3,))
    r = job.done()
    _bit_identical_recoveries(r)
    assert [(o, n, f, lv) for o, n, f, lv, _ in _shrinks(r.stdout)] == [(8, 6, "6, 7", 3)], r.stdout
    assert "3 node(s) left for group_size = 4" in r.stderr and "(ckpt_l4 = 5)" in r.stderr, r.stderr


def test_spares_exhausted_then_the_job_shrinks(tmp_path):
    # 4 ranks + 1 spare: rank 1 dies and the spare takes its place; then rank 2 dies with no spare left.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = _job(tmp_path, 4, 1, "--steps", "30")
    job.kill_at(10, [1])
    job.kill_at(20, [2])
    r = job.done()
    rec = _bit_identical_recoveries(r)
    assert [d for d, _, _ in rec] == ["1", "2"], r.stdout
    assert [(o, n, f, k) for o, n, f, _, k in _shrinks(r.stdout)] == [(4, 3, "2", 2)], r.stdout


def test_array_without_layout_gives_the_same_error_on_every_survivor(tmp_path):
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = _job(tmp_path, 8, 0, "--steps", "30", "--no-layout")
    job.kill_at(12, [5])
    r = job.done()
    errors = _errors(tmp_path)
    assert sorted(errors) == [f"rank{i}" for i in (0, 1, 2, 3, 4, 6, 7)], (errors, r.stdout + r.stderr)
    assert len(set(errors.values())) == 1, errors
    msg = next(iter(errors.values()))
    assert "cannot continue with fewer ranks" in msg and "['u'] have no global layout" in msg, msg
    assert "digest" not in r.stdout


def test_kill_during_the_shrink_recovery_then_a_relaunch_recovers(tmp_path):
    # rank 5 dies at step 12; rank 2 stops as the survivors' restore begins and is killed there: the 6 left
    # raise the same error; a relaunch on 6 ranks recovers the 8-rank checkpoint and ends bit for bit.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = _job(tmp_path, 8, 0, "--steps", "30", "--hold-rank", "2")
    job.kill_at(12, [5])
    _wait_for(lambda: (tmp_path / "held").exists() or not job.thread.is_alive(), "rank 2 held in the restore")
    kill_pid(int((tmp_path / "held").read_text()))
    r = job.done()
    errors = _errors(tmp_path)
    assert sorted(errors) == [f"rank{i}" for i in (0, 1, 3, 4, 6, 7)], (errors, r.stdout + r.stderr)
    assert len(set(errors.values())) == 1, errors
    assert "died during the recovery onto fewer ranks" in next(iter(errors.values())), errors
    for p in tmp_path.glob("online-error.*"):
        p.unlink()
    shutil.rmtree(tmp_path / "held", ignore_errors=True)
    _relaunch_recovers(tmp_path, 6)


def test_survivor_that_never_joins_the_shrink_ends_it_within_failure_timeout(tmp_path):
    # rank 5 dies at step 12; rank 2 stays out of the repair (alive, in MPI) until another has given up. The
    # 6 others raise an error naming failure_timeout (before the fix they waited in the split for good: the
    # job hung); rank 2, coming late, finds the repair given up and raises the same. Nothing hangs.
    write_config(tmp_path, group_size=2, ckpt_l2=5, failure_timeout=20)
    job = _job(tmp_path, 8, 0, "--steps", "30", "--late-rank", "2", "--killed", "5")
    job.kill_at(12, [5])
    r = job.done()
    assert (tmp_path / "late").exists(), r.stdout + r.stderr
    errors = _errors(tmp_path)
    assert sorted(errors) == [f"rank{i}" for i in (0, 1, 2, 3, 4, 6, 7)], (errors, r.stdout + r.stderr)
    assert len(set(errors.values())) == 1, errors
    msg = next(iter(errors.values()))
    assert "did not all take part in the recovery onto fewer ranks within failure_timeout (20 s)" in msg, msg
    assert r.returncode != 0 and "digest" not in r.stdout


def test_heat_example_continues_on_fewer_ranks(tmp_path):
    # examples/heat.py --shrink: 6 ranks, no spare, L1 every 5 steps; rank 4 kills itself at step 17.
    write_config(tmp_path, ckpt_l1=5)
    r = run_heat(tmp_path, 6, "--steps", "30", "--size", "32", "--shrink", "--kill-at", "17",
                 "--kill-rank", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    line = (r"^heat: online recovery: ranks \[4\] continued on 5 of 6 ranks, checkpoint \d+ restored from "
            r"level 1,")
    assert re.search(line, r.stdout, re.M), r.stdout
    assert digest_of(r.stdout) == heat.digest(heat.reference(32, 30)), r.stdout


def test_on_shrink_must_be_callable(tmp_path):
    write_config(tmp_path, ckpt_l1=5)
    r = run_python(2, PROGRAM, "--config", "ftkit.ini", "--dir", str(tmp_path), "--bad-callback",
                   cwd=tmp_path, node_size=1, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = re.findall(r"^R(\d) (.*)$", r.stdout, re.M)
    assert sorted(rank for rank, _ in lines) == ["0", "1"], r.stdout
    want = "CheckpointError: steps(on_shrink='x'): expected a function"
    assert all(m.startswith(want) for _, m in lines), lines


def test_edge_sendrecv_on_a_revoked_comm_raises_instead_of_crashing(tmp_path):
    # After a failure the survivors revoke ckpt.comm; rank 0 of a halo exchange sends down and receives from
    # PROC_NULL. Open MPI 5.0's MPI_Sendrecv segfaults there (it cancels a request it never posted), which
    # killed rank 0 in 2 of 8 heat runs with --shrink or spares: AppComm sends alone instead.
    r = run_python(2, REPO / "tests" / "programs" / "appcomm_sendrecv.py", cwd=tmp_path, timeout=120)
    assert "R0 alive" in r.stdout and "R1 alive" in r.stdout, r.stdout + r.stderr
    assert re.search(r"^sendrecv raised \d+$", r.stdout, re.M), r.stdout


def test_object_reductions_are_in_rank_order_and_a_revoke_ends_them(tmp_path):
    # mpi4py's lowercase allreduce/reduce/scan/exscan run point to point on a hidden duplicate of the
    # communicator: a rank waiting there for a survivor that had started the repair waited forever (the
    # node-killed FTI loop hung in CI). AppComm's gather on the communicator itself, which the revoke ends.
    r = run_python(3, REPO / "tests" / "programs" / "appcomm_reductions.py", cwd=tmp_path, timeout=120)
    assert all(f"R{i} alive" in r.stdout for i in range(3)), r.stdout + r.stderr
    assert re.search(r"^allreduce raised \d+$", r.stdout, re.M), r.stdout + r.stderr
    want = {0: "allreduce=[0, 1, 2] reduce=None scan=[0] exscan=None max=2",
            1: "allreduce=[0, 1, 2] reduce=[0, 1, 2] scan=[0, 1] exscan=[0] max=2",
            2: "allreduce=[0, 1, 2] reduce=None scan=[0, 1, 2] exscan=[0, 1] max=2"}
    for rank, text in want.items():
        assert f"R{rank} {text}" in r.stdout, r.stdout


def test_a_repair_whose_shrink_never_completes_ends_the_job(tmp_path):
    # Open MPI 5 stayed in MPI_Comm_shrink (ompi_comm_nextcid) for good when a second rank died during a
    # repair: the blocking ULFM calls of the repair now end their process after failure_timeout. A live
    # rank that never takes part holds a Shrink the same way, deterministically.
    r = run_python(3, REPO / "tests" / "programs" / "stuck_repair.py", cwd=tmp_path, timeout=120)
    assert not r.timed_out and r.returncode != 0, r.stdout + r.stderr
    assert "returned" not in r.stdout and "R2 saw rank 0 gone" in r.stdout, r.stdout + r.stderr
    want = "MPI_Comm_shrink in the repair did not return within failure_timeout (3 s)"
    assert r.stderr.count(want) == 1, r.stderr  # once, in ftkit launch's line naming both ranks
    launcher = next(line for line in r.stderr.splitlines() if line.startswith("ftkit launch:"))
    assert "ranks 0,1 ended by ftkit's exit hook (" + want in launcher, r.stderr


def test_a_repair_after_a_creation_that_failed_with_the_death_completes(tmp_path):
    # Open MPI 5 keeps its context-id allocator marked by a communicator creation that failed (a rank died
    # during a Dup), so the repair's Shrink from a communicator with a higher id waited for good (a second
    # rank killed during the FTI loop's repair). rebuild() releases the allocator first.
    r = run_python(4, REPO / "tests" / "programs" / "shrink_after_failed_creation.py", "30", cwd=tmp_path,
                   timeout=120)
    assert not r.timed_out, r.stdout + r.stderr
    for rank in range(3):
        assert f"R{rank} dup raised" in r.stdout, r.stdout + r.stderr
        assert f"R{rank} rebuilt dead=[3] size=3" in r.stdout, r.stdout + r.stderr
