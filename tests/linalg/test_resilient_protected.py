"""Protected operands for resilient_pdsymm, resilient_pdtrsm, resilient_pdtrmm, resilient_pdsyrk and
resilient_pdsyr2k (issue 33): protect_operands' contract for every multiplying routine.

A call with the handle gives the call given a store bit for bit (2x3 and 3x2 grids, offsets, sizes that do not
divide the blocks); it computes with the operands saved at protection (not rebuilt per call); a handle is
refused for other matrices, flags, routines or once released, and protecting the changed operand again gives
the unprotected result. A rank killed mid-call with protected operands: ``test_resilient_pblas3.py``.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import PBLASArgumentError, StorageError

from ..conftest import run_python

PROGRAM = Path(__file__).parent / "programs" / "resilient_protected.py"
N, NB = 21, 4


@pytest.mark.mpi
@pytest.mark.parametrize("grid", ["2x3", "3x2"])
def test_protected_calls_equal_the_unprotected_ones_bit_for_bit(tmp_path, grid):
    p, q = (int(x) for x in grid.split("x"))
    r = run_python(p * q, PROGRAM, str(p), str(q), "--dir", str(tmp_path), timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and not r.timed_out, out
    same = re.findall(r"SAME (\S+) (\S+) rank=(\d+)", r.stdout)
    assert len(same) == 12 * p * q and "DIFF" not in r.stdout, out
    # what the handle saved: the triangle's side for TRSM / TRMM (B is their output), both sides otherwise
    files = set(re.findall(r"FILES (\S+) (\d+) rank=\d+", r.stdout))
    saved = {("pdsymm", "2"), ("pdtrsm", "1"), ("pdtrmm", "1"), ("pdsyrk", "2"), ("pdsyr2k", "2")}
    assert files == saved, out


@pytest.fixture
def mats():
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, 1, 1)
    A = linalg.DistributedMatrix.random(grid, N, N, mb=NB, nb=NB, seed=1)
    A.local[...] = A.local / N + 2.0 * np.eye(N)
    B = linalg.DistributedMatrix.random(grid, N, N, mb=NB, nb=NB, seed=2)
    C = linalg.DistributedMatrix.random(grid, N, N, mb=NB, nb=NB, seed=3)
    return A, B, C


def _call(routine, flags, A, B, C, store):
    """Run ``routine`` on copies of B (TRSM/TRMM) or C; return the written array."""
    out = (B if routine in ("pdtrsm", "pdtrmm") else C).copy()
    fn = getattr(linalg, f"resilient_{routine}")
    if routine in ("pdtrsm", "pdtrmm"):
        fn(*flags, N, N - 2, 1.5, A, 0, 0, out, 0, 0, store=store)
    elif routine == "pdsymm":
        fn(*flags, N, N - 2, 1.5, A, 0, 0, B, 0, 0, 0.5, out, 0, 0, store=store)
    elif routine == "pdsyrk":
        fn(*flags, N, N - 2, 1.5, A, 0, 0, 0.5, out, 0, 0, store=store)
    else:
        fn(*flags, N, N - 2, 1.5, A, 0, 0, B, 0, 0, 0.5, out, 0, 0, store=store)
    return out.local.copy()


def _protect(routine, flags, A, B, C, store):
    fn = getattr(linalg, f"protect_{routine}")
    if routine in ("pdtrsm", "pdtrmm"):
        return fn(*flags, N, N - 2, A, 0, 0, B, 0, 0, store=store)
    if routine == "pdsyrk":
        return fn(*flags, N, N - 2, A, 0, 0, C, 0, 0, store=store)
    return fn(*flags, N, N - 2, A, 0, 0, B, 0, 0, C, 0, 0, store=store)


ROUTINES = [("pdsymm", "LU"), ("pdtrsm", "LLNN"), ("pdtrsm", "RUTU"), ("pdtrmm", "LUTN"), ("pdtrmm", "RLNU"),
            ("pdsyrk", "LT"), ("pdsyr2k", "UN")]


# PDSYRK is left out: its protected operands are op(A) and op(A).T, views of A where no redistribution is
# needed (as protect_operands' are), so changing A in place shows through them, as the contract says.
@pytest.mark.parametrize("routine,flags", [r for r in ROUTINES if r[0] != "pdsyrk"])
def test_calls_compute_with_the_operands_saved_at_protection(tmp_path, mats, routine, flags):
    A, B, C = mats
    before = _call(routine, flags, A, B, C, tmp_path)
    with _protect(routine, flags, A, B, C, tmp_path) as ops:
        # breach the contract on purpose: change A in place. The protected call still uses the operands built
        # and saved at protection (TRSM's inverse, TRMM's triangle, the symmetric or concatenated operands):
        # none of them is rebuilt per call.
        A.local[...] *= 2.0
        assert np.array_equal(_call(routine, flags, A, B, C, ops), before)
        assert not np.array_equal(_call(routine, flags, A, B, C, tmp_path), before)


@pytest.mark.parametrize("routine,flags", ROUTINES)
def test_a_changed_operand_is_refused_and_protecting_it_again_gives_the_unprotected_result(
        tmp_path, mats, routine, flags):
    A, B, C = mats
    ops = _protect(routine, flags, A, B, C, tmp_path)
    changed = A.copy()
    changed.local[0, 0] += 1.0
    with pytest.raises(PBLASArgumentError, match=f"other matrices.*protect_{routine}"):
        _call(routine, flags, changed, B, C, ops)
    again = _protect(routine, flags, changed, B, C, tmp_path)
    assert np.array_equal(_call(routine, flags, changed, B, C, again),
                          _call(routine, flags, changed, B, C, tmp_path))
    again.release()
    with pytest.raises(PBLASArgumentError, match="released"):
        _call(routine, flags, changed, B, C, again)
    ops.release()


def test_a_handle_is_refused_for_other_flags_other_routines_and_the_additions(tmp_path, mats):
    A, B, C = mats
    with _protect("pdtrsm", "LLNN", A, B, C, tmp_path) as ops:
        with pytest.raises(PBLASArgumentError, match="other arguments"):
            _call("pdtrsm", "LUNN", A, B, C, ops)  # another triangle: another inverse
        with pytest.raises(PBLASArgumentError, match="PDTRMM.*protected for PDTRSM"):
            _call("pdtrmm", "LLNN", A, B, C, ops)
        with pytest.raises(PBLASArgumentError, match="multiplying routines"):
            linalg.resilient_pdgeadd("N", N, N, 1.0, A, 0, 0, 1.0, C.copy(), 0, 0, store=ops)
    with _protect("pdsyr2k", "UN", A, B, C, tmp_path) as ops:
        with pytest.raises(PBLASArgumentError, match="other matrices"):
            linalg.resilient_pdsyr2k("U", "N", N, N - 2, 1.0, A, 0, 0, B.copy(), 0, 0, 1.0, C.copy(), 0, 0,
                                     store=ops)


@pytest.mark.mpi
def test_ranks_leaving_right_after_a_call_are_not_taken_for_failures(tmp_path):
    """Every rank exits (without MPI_Finalize: to MPI, a failure) the moment its last call returns: a rank
    the last agreement's decision reached later must still return the product, not raise (the call holds
    everyone until every live rank has the decision). Repeated calls and 6 ranks widen the window; in the
    second job rank 2 is SIGKILLed in the last call, whose survivors end it through the settle phase."""
    prog = Path(__file__).parent / "programs" / "resilient_exit_after_call.py"
    for run, victim in enumerate((None, 2)):
        store = tmp_path / f"store{run}"
        store.mkdir()
        extra = ("--kill-rank", str(victim)) if victim is not None else ()
        r = run_python(6, prog, "--dir", str(store), "--calls", "4", *extra, timeout=300)
        out = r.stdout + r.stderr
        assert not r.timed_out, out
        assert "PROCESSFAILURE" not in r.stdout and "WRONG" not in r.stdout, out
        done = sorted(int(x) for x in re.findall(r"DONE rank=(\d+) call=3", r.stdout))
        assert done == [i for i in range(6) if i != victim], out


@pytest.mark.parametrize("routine,flags", [("pdtrmm", "LUTN"), ("pdtrsm", "RUTU"), ("pdsyrk", "LT")])
def test_calls_on_a_handle_rewrite_one_kept_file_per_input_and_release_removes_it(tmp_path, mats, routine,
                                                                                  flags):
    """The inputs a call on a handle saves itself (TRMM's and TRSM's B, SYRK's C: beta != 0) are kept under
    the handle for the next call to rewrite in place (the same file: its pages are reused, nothing allocated
    or freed per call), the results stay the unprotected call's bit for bit, and release removes them."""
    A, B, C = mats
    want = _call(routine, flags, A, B, C, tmp_path)
    with _protect(routine, flags, A, B, C, tmp_path) as ops:
        handle_dir = tmp_path / ops.prefix
        seen = []
        for _ in range(3):
            assert np.array_equal(_call(routine, flags, A, B, C, ops), want)
            seen.append({p.name: p.stat().st_ino for p in handle_dir.glob("spare-*")})
            assert not [p for p in tmp_path.iterdir() if not p.name.startswith("operands-")]  # no call's dir
        # B (TRMM "L"; TRSM "R" multiplies B from the left: side "a"), and C: the calls update a submatrix
        kept = {"pdtrmm": ["spare-b.0.ftk", "spare-c.0.ftk"], "pdtrsm": ["spare-a.0.ftk", "spare-c.0.ftk"],
                "pdsyrk": ["spare-c.0.ftk"]}[routine]
        assert sorted(seen[0]) == kept and seen[1] == seen[0] == seen[2], seen
    assert not list(tmp_path.rglob("*.ftk")), list(tmp_path.rglob("*"))


def test_a_kept_file_replaced_by_a_link_is_a_storage_error_and_nothing_is_written_through_it(tmp_path, mats):
    """A kept input replaced by a symbolic link leading out of the store (planted, or a store shared with
    someone else) fails the call with the StorageError every rank raises for a failed save (not an error of
    one rank, which would leave the others waiting), and the link's target is not written."""
    A, B, C = mats
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the store's")
    store = tmp_path / "store"
    store.mkdir()
    with _protect("pdtrmm", "LUTN", A, B, C, store) as ops:
        _call("pdtrmm", "LUTN", A, B, C, ops)
        spares = sorted((store / ops.prefix).glob("spare-*"))
        assert spares
        for p in spares:
            p.unlink()
            p.symlink_to(outside)
        said = rf"could not save its inputs .*\[Errno {errno.ELOOP}\].*links out of it"
        with pytest.raises(StorageError, match=said):
            _call("pdtrmm", "LUTN", A, B, C, ops)
        for p in spares:  # release() removes no link leading out of the store either: done here
            p.unlink()
    assert outside.read_bytes() == b"not the store's"
