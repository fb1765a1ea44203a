"""Elastic restart: recover a checkpoint on another rank count or decomposition (issue 18).

Real MPI jobs, real files, real node loss (a node's directory deleted). One chain of launches covers:
8 -> 6 from L1 + decoded L3 groups (with the hostile layouts: overlap, hole, dtype, global shape, each
refused on every rank with the arrays untouched), 6 -> 6 re-decomposed after a node loss with a
block-cyclic matrix checkpointed on a 2x3 grid restored onto 2x3, 2x2 and 1x5 grids (sub-communicators: the
same restore path the online shrink uses), 8 -> 4 from L4 after every node-local directory is lost (the
newer L3 checkpoint skipped), 4 -> 8 from L1 + L2 partner copies after a node loss, with the matrix from
2x2 onto 4x2 and 1x5, then a rank killed and the survivors' shrunk communicator refilled from the
checkpoint (online "continue with fewer ranks"). Every element is compared
with its expected value. Differential L4 (dCP) checkpoints are recovered elastically from their block stores
read in place, with a truncated L1 file (its dCP copy is used) and a truncated block store (a clear error).
The heat example crashes on 6 ranks and continues on 4: its final field is bit-identical to the failure-free
run.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from ftkit.inject import delete_node_dir
from ftkit.storage.export import export_checkpoint

from ..conftest import REPO, run_python
from ._util import TIMEOUT, copy_run, digest_of, heat, l1_file, node_dirs, run_heat, write_config

pytestmark = pytest.mark.mpi

PROG = REPO / "tests" / "programs" / "reshard_cases.py"


def _run(d, nranks, *args):
    r = run_python(nranks, PROG, "--config", "ftkit.ini", *args, node_size=2, cwd=d, timeout=TIMEOUT)
    assert not r.timed_out, r.stdout + r.stderr
    return r


def _lines(stdout: str, nranks: int, kind: str = "") -> dict[int, str]:
    out = {}
    for line in stdout.splitlines():
        m = re.match(rf"^R(\d+) {kind}(.*)$", line)
        other = ("case ", "subgrid ", "shrink ", "checkpointed", "wrote")
        if m and (kind or not m.group(2).startswith(other)):
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    assert sorted(out) == list(range(nranks)), stdout
    return out


def _recovered(r, nranks: int, sources: str, ckpt_id: int, skipped: int = 0) -> None:
    lines = _lines(r.stdout, nranks)
    for rank, (line,) in lines.items():
        assert line.startswith("ok "), f"rank {rank}: {line}\n{r.stderr}"
        assert f"sources={sources} id={ckpt_id} skipped={skipped}" in line, line
        read, need = (int(x) for x in re.search(r"read=(\d+) need=(\d+)", line).groups())
        assert 0 < need <= read, line


def _lose_node(d, node: int) -> None:
    (lost,) = [p for p in node_dirs(d) if p.name == f"node{node}"]
    delete_node_dir(lost)


def test_elastic_restart_chain(tmp_path):
    a = tmp_path / "a"
    write_config(a, inline_l4=0, group_size=2)
    # checkpoint 1 at L4 (L1 + flush), checkpoint 2 at L3 (L1 + Reed-Solomon parity, groups of 2 nodes)
    r = _run(a, 8, "--mode", "write", "--grid", "2x4", "--levels", "4,3")
    assert r.returncode == 0 and r.stdout.count("wrote") == 8, r.stdout + r.stderr
    b = copy_run(a, tmp_path / "b")

    # Node 1 (old ranks 2, 3) lost: its L3 groups are decoded, then 8 -> 6; the hostile layouts first; then
    # checkpoint at L2 (with a 2x3 block-cyclic matrix) on 6.
    _lose_node(a, 1)
    r = _run(a, 6, "--mode", "recover", "--grid", "3x2", "--split", "uneven", "--hostile", "--matrix", "2x3",
             "--add-matrix", "--then-level", "2")
    _recovered(r, 6, "11331111", 2)
    cases = _lines(r.stdout, 6, "case ")
    expect = {"overlap": ("RecoveryError", "overlap", "[0:"), "hole": ("RecoveryError", "holes", "999 of"),
              "dtype": ("ShapeMismatchError", "dtype", "<f4"),
              "global_shape": ("ShapeMismatchError", "global shape", "[1005]")}
    for rank, got in cases.items():
        assert len(got) == len(expect), got
        for line, (name, words) in zip(got, expect.items(), strict=True):
            assert line.startswith(name + " ") and line.endswith("untouched=True"), f"rank {rank}: {line}"
            assert all(w in line for w in words), f"rank {rank}: {line}"
    assert r.stdout.count("checkpointed") == 6

    # Node 1 lost again: 6 -> 6 re-decomposed (on as many ranks the recovery chain's L2 step rebuilds node
    # 1's files from the partner copies first); the 2x3 matrix onto its grid, then onto 2x2 and 1x5
    # sub-communicators.
    _lose_node(a, 1)
    r = _run(a, 6, "--mode", "recover", "--grid", "2x3", "--matrix", "2x3", "--subgrids", "2x2,1x5")
    _recovered(r, 6, "111111", 3)
    sub = re.findall(r"^R(\d+) subgrid (\S+) (\S+)$", r.stdout, re.M)
    assert sorted(sub) == sorted([(str(i), "2x2", "ok") for i in range(4)]
                                 + [(str(i), "1x5", "ok") for i in range(5)]), r.stdout + r.stderr

    # Every node-local directory lost: checkpoint 2 (L3) is skipped, 8 -> 4 from checkpoint 1 at L4, then
    # checkpoint at L2 on 4 (with a 2x2 matrix); node 1 (old ranks 2, 3) lost: 4 -> 8 from L1 and the
    # partner copies, the matrix onto a 4x2 grid and a 1x5 sub-communicator.
    for d in node_dirs(b):
        delete_node_dir(d)
    r = _run(b, 4, "--mode", "recover", "--grid", "2x2", "--matrix", "2x2", "--add-matrix",
             "--then-level", "2")
    _recovered(r, 4, "4" * 8, 1, skipped=1)
    _lose_node(b, 1)
    # Then rank 5 dies: the 7 survivors shrink and refill a 7-rank decomposition from the checkpoint.
    r = _run(b, 8, "--mode", "recover", "--grid", "4x2", "--split", "uneven", "--matrix", "4x2",
             "--subgrids", "1x5", "--shrink-kill", "5")
    _recovered(r, 8, "1122", 3)
    sub = re.findall(r"^R(\d+) subgrid (\S+) (\S+)$", r.stdout, re.M)
    assert sorted(sub) == sorted((str(i), "1x5", "ok") for i in range(5)), r.stdout + r.stderr
    shrunk = re.findall(r"^R(\d+) shrink (\d+) (.*)$", r.stdout, re.M)
    assert sorted(shrunk) == sorted((str(i), "7", "ok") for i in range(7)), r.stdout + r.stderr


def _host_configs(d, hosts: int, **keys) -> None:
    """One config per emulated host: ``ckpt_dir`` is that host's own directory (``hosts/h<k>/local``);
    the global and meta directories are shared."""
    for k in range(hosts):
        write_config(d, ckpt_dir=f"hosts/h{k}/local", **keys).rename(d / f"ftkit.h{k}.ini")


def _lose_host(d, host: int) -> None:
    for node in sorted((d / "hosts" / f"h{host}" / "local").glob("node*")):
        delete_node_dir(node)


def test_elastic_restart_with_node_local_files_on_their_own_hosts(tmp_path):
    """Issue 31's defect, emulated: each "host" has its own ckpt_dir and no rank is given another host's
    directory, as on separate disks. 8 ranks on hosts 0-3 checkpoint at L2; host 1 is lost; 6 ranks on
    hosts 0, 2, 3 (renumbered nodes 0, 1, 2) reshard it from the L1 files and partner copies each read on
    the host that holds them, then checkpoint at L3; host 2 is lost; 4 ranks on hosts 0 and 3 reshard that
    from L1 after the L3 group is decoded across the hosts. Every element is checked."""
    d = tmp_path / "hosts"
    _host_configs(d, 4, inline_l4=0, group_size=2)
    r = _run(d, 8, "--mode", "write", "--grid", "2x4", "--levels", "2", "--hosts", "0,1,2,3")
    assert r.returncode == 0 and r.stdout.count("wrote") == 8, r.stdout + r.stderr
    _lose_host(d, 1)
    r = _run(d, 6, "--mode", "recover", "--grid", "3x2", "--split", "uneven", "--hosts", "0,2,3",
             "--then-level", "3")
    _recovered(r, 6, "11221111", 1)
    assert r.stdout.count("checkpointed") == 6, r.stdout + r.stderr
    _lose_host(d, 2)
    r = _run(d, 4, "--mode", "recover", "--grid", "2x2", "--hosts", "0,3")
    _recovered(r, 4, "113311", 2)


def test_same_rank_count_on_other_hosts_fetches_files_from_their_holders(tmp_path):
    """8 ranks on hosts 0-3 checkpoint at L2; host 1 is lost; 8 ranks relaunched on hosts 0, 2, 3 and a fresh
    host 4 (as after moving to a spare node): every new node's host holds another node's files, or none, so
    the recovery chain alone finds neither the L1 files nor both members of a group; each missing file is
    sent by the rank whose host holds a copy (L1 or partner copy), and every element checks."""
    d = tmp_path / "moved"
    _host_configs(d, 5, inline_l4=0, group_size=2)
    r = _run(d, 8, "--mode", "write", "--grid", "2x4", "--levels", "2", "--hosts", "0,1,2,3")
    assert r.returncode == 0 and r.stdout.count("wrote") == 8, r.stdout + r.stderr
    _lose_host(d, 1)
    r = _run(d, 8, "--mode", "recover", "--grid", "2x4", "--hosts", "0,2,3,4")
    lines = _lines(r.stdout, 8)
    for rank, (line,) in lines.items():
        assert line == "ok level=2 same-count", f"rank {rank}: {line}\n{r.stderr}"


def test_differential_l4_truncated_files_and_a_second_job(tmp_path):
    """Elastic recovery of differential L4 (dCP) checkpoints, read in place from the block stores."""
    a = tmp_path / "a"
    write_config(a, inline_l4=0, enable_dcp=1)
    # checkpoint 1: a full dCP write, checkpoint 2: differential (same data: only the header's blocks change)
    r = _run(a, 8, "--mode", "write", "--grid", "2x4", "--levels", "4,4")
    assert r.returncode == 0 and r.stdout.count("wrote") == 8, r.stdout + r.stderr
    dcp = a / "run" / "global"
    assert len(list(dcp.glob("*/l4dcp/dcp-r*-c2.map"))) == 8 and not list(dcp.glob("*/l4/ckpt2/*.ftk"))
    b = copy_run(a, tmp_path / "b")

    # Old rank 3's L1 file cut short: its header does not match the file's size -> its dCP copy is read in
    # place (no file rebuilt); 8 -> 6, then a second job checkpoints differentially on 6 ranks.
    f = l1_file(a, 2, 3)
    f.write_bytes(f.read_bytes()[:f.stat().st_size // 2])
    r = _run(a, 6, "--mode", "recover", "--grid", "3x2", "--split", "uneven", "--then-level", "4")
    _recovered(r, 6, "11141111", 2)
    assert r.stdout.count("checkpointed") == 6
    assert not list(dcp.glob("*/l4/ckpt2/*.ftk")), "the differential copy is read in place"
    # Every node-local directory lost: checkpoint 3 of the 6 ranks, from its dCP copies, onto 4 ranks.
    for d in node_dirs(a):
        delete_node_dir(d)
    r = _run(a, 4, "--mode", "recover", "--grid", "2x2")
    _recovered(r, 4, "444444", 3)
    # The same dCP checkpoint exported (no MPI): the global arrays of reshard_cases.py, element for element.
    out = tmp_path / "npy"
    assert export_checkpoint(a / "run" / "meta", "npy", out)["checkpoint_id"] == 3
    i, j = np.meshgrid(np.arange(48), np.arange(40), indexing="ij")
    assert np.array_equal(np.load(out / "u.npy"), i * 1000.0 + j + 0.5)
    assert np.array_equal(np.load(out / "z.npy"), (i * 1000.0 + j + 0.5) * (1 - 2j))
    assert np.array_equal(np.load(out / "v.npy"), np.arange(1000) * 1.5 + 0.25)
    assert np.array_equal(np.load(out / "step.npy"), [17])

    # A truncated block store (old rank 5's, shared by its checkpoints 1 and 2) with every node-local
    # directory lost: a clear RecoveryError on every rank naming the rank and the truncation.
    (store,) = (b / "run" / "global").glob("*/l4dcp/dcp-r5-g*.blocks")
    with open(store, "r+b") as fh:
        fh.truncate(store.stat().st_size // 2)
    for d in node_dirs(b):
        delete_node_dir(d)
    r = _run(b, 6, "--mode", "recover", "--grid", "3x2")
    lines = _lines(r.stdout, 6)
    for rank, (line,) in lines.items():
        assert line.startswith("error RecoveryError"), f"rank {rank}: {line}"
        assert "old rank 5" in line and "truncated" in line, line


def test_heat_continues_on_fewer_ranks_bit_identical(tmp_path):
    steps, size = 30, 40
    reference = heat.digest(heat.reference(size, steps))
    args = ("--steps", str(steps), "--size", str(size))
    write_config(tmp_path, ckpt_l1=3, ckpt_l4=10)
    r = run_heat(tmp_path, 6, *args, "--kill-at", "23", "--kill-rank", "5")
    assert "killing itself at step 23" in r.stdout and digest_of(r.stdout) is None, r.stdout + r.stderr
    r = run_heat(tmp_path, 4, *args).check()
    assert "from level 1 at step 21" in r.stdout, r.stdout
    assert digest_of(r.stdout) == reference


def test_same_rank_count_new_boxes_with_a_per_rank_counter(tmp_path):
    """Issue 30, E1: on as many ranks with a new decomposition, the arrays with a layout are resharded and
    the one without (a per-rank counter) is read from each rank's own file; with the same boxes nothing is
    resharded."""
    d = tmp_path / "e1"
    write_config(d)
    r = _run(d, 4, "--mode", "write", "--grid", "2x2", "--levels", "1", "--counter")
    assert r.returncode == 0 and r.stdout.count("wrote") == 4, r.stdout + r.stderr
    same = copy_run(d, tmp_path / "same")
    r = _run(d, 4, "--mode", "recover", "--grid", "4x1", "--split", "uneven", "--counter")
    _recovered(r, 4, "1111", 1)
    r = _run(same, 4, "--mode", "recover", "--grid", "2x2", "--counter")
    for rank, (line,) in _lines(r.stdout, 4).items():
        assert line.startswith("ok ") and line.endswith("same-count"), f"rank {rank}: {line}\n{r.stderr}"
