"""Restart of the heat example from L1 and from L4, bit-identical to a failure-free run, on 4 and 8 ranks."""

from __future__ import annotations

import pytest

from ftkit.inject import delete_node_dir

from ._util import copy_run, digest_of, heat, node_dirs, run_heat, write_config

pytestmark = pytest.mark.mpi

STEPS, SIZE = 30, 40


@pytest.mark.parametrize("nranks", [4, 8])
def test_restart_from_l1_and_l4_is_bit_identical(tmp_path, nranks):
    reference = heat.digest(heat.reference(SIZE, STEPS))
    args = ("--steps", str(STEPS), "--size", str(SIZE))

    clean = tmp_path / "clean"
    write_config(clean, ckpt_l1=3, ckpt_l4=10)
    r = run_heat(clean, nranks, *args).check()
    assert digest_of(r.stdout) == reference, "failure-free MPI run differs from the serial reference"
    assert not (clean / "run" / "meta" / "manifest.json").exists(), "finalize must clean up a finished run"

    crashed = tmp_path / "crashed"
    write_config(crashed, ckpt_l1=3, ckpt_l4=10)
    r = run_heat(crashed, nranks, *args, "--kill-at", "23", "--kill-rank", str(nranks - 1))
    assert "killing itself at step 23" in r.stdout, r.stdout + r.stderr
    assert digest_of(r.stdout) is None, "the killed run must not finish"

    pfs_only = copy_run(crashed, tmp_path / "pfs_only")
    # L1: the newest checkpoint (step 21) is an L1 one.
    r = run_heat(crashed, nranks, *args).check()
    assert "recovered checkpoint" in r.stdout and "from level 1 at step 21" in r.stdout, r.stdout
    assert digest_of(r.stdout) == reference

    # L4: every node-local directory lost; the newest L4 checkpoint (step 20) is used.
    for d in node_dirs(pfs_only):
        delete_node_dir(d)
    r = run_heat(pfs_only, nranks, *args).check()
    assert "from level 4 at step 20" in r.stdout, r.stdout
    assert digest_of(r.stdout) == reference
