"""FT_PDPOTRF checkpointed, a rank SIGKILLed, the relaunch resumes: on a 2x2 grid, ``uplo="U"`` with ``mb !=
nb`` and offsets (the work matrix is a redistributed copy of A).

usage: ft_potrf_resume.py --dir D [--kill-rank R --kill-panel K] [--grid PxQ] [--ready F --pace S]

The matrix (order 90 at offset (2, 2) of a 96 x 96 A, ``mb = 6``, ``nb = 8``: 12 panels) is factored with a
level-1 checkpoint every 3 panels. With ``--kill-rank`` that rank SIGKILLs itself after panel ``K``; the
survivors leave when they notice. A relaunch with the same ``--dir`` resumes from the last checkpoint. Rank 0
prints ``resumed at panel k``, ``stored L <values>`` (the factored columns read back from the checkpoint,
over all ranks: ``0`` for a fresh start), ``factored <values>`` (what the factored block columns ``< k`` of
the 90 x 90 work matrix hold on and below their diagonal blocks) and ``bitwise True|False`` (the factor
against ``pdpotrf``'s). With ``--ready F`` every rank writes its pid into ``F.<rank>`` and, once all have,
rank 0 writes ``F`` (for a test that kills a rank from outside at a moment of its own choosing); ``--pace S``
makes every process sleep ``S`` seconds after each panel (so such a kill lands inside the factorization).
A survivor of a kill prints ``rank r left: <its ProcessFailure>`` and, once every other rank has left or is
gone, exits with code 3 (a raw MPI error would end it with a traceback instead).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit
from ftkit import linalg
from ftkit.errors import ProcessFailure
from ftkit.failure import exit_without_finalize, revoke
from ftkit.inject import kill_self
from ftkit.linalg.cholesky.ft_potrf import CKPT_L

N, OFF, MB, NB = 90, 2, 6, 8


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-panel", type=int, default=-1)
    p.add_argument("--grid", default="2x2", help="the process grid (a relaunch on another is refused)")
    p.add_argument("--ready", help="pid files F.<rank>, then F once every rank has written its own")
    p.add_argument("--pace", type=float, default=0.0, help="seconds every process sleeps after each panel")
    a = p.parse_args()
    root = Path(a.dir)
    ckpt = ftkit.Checkpointer(config=ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global",
                                                  meta_dir=root / "meta"), comm=MPI.COMM_WORLD)
    grid = linalg.ProcessGrid(ckpt.comm, *(int(x) for x in a.grid.split("x")))
    r = np.random.default_rng(5).standard_normal((N + 2 * OFF, N + 2 * OFF))
    a_glob = r @ r.T / N + np.eye(N + 2 * OFF)
    ref = linalg.DistributedMatrix.from_global(grid, a_glob, mb=MB, nb=NB)
    linalg.pdpotrf("U", N, ref, OFF, OFF)
    A = linalg.DistributedMatrix.from_global(grid, a_glob, mb=MB, nb=NB)
    seen: list[int] = []
    stored: list[int] = []

    def on_panel(k: int) -> None:
        if not seen and ckpt.restarted and k > 0:  # the factored columns as recovered (no checkpoint since)
            stored.append(ckpt.array(CKPT_L).size)
        seen.append(k)
        if k == a.kill_panel and grid.rank == a.kill_rank:
            print(f"rank {grid.rank} killing itself after panel {k}", flush=True)
            kill_self()
        time.sleep(a.pace)

    if a.ready:
        Path(f"{a.ready}.{grid.rank}").write_text(str(os.getpid()))
        grid.comm.Barrier()
        if grid.rank == 0:
            Path(a.ready + ".tmp").write_text("0")
            os.replace(a.ready + ".tmp", a.ready)  # whole when it appears
    try:
        linalg.ft_pdpotrf("U", N, A, OFF, OFF, ckpt=ckpt, ckpt_every=3, on_panel=on_panel)
    except ProcessFailure as exc:  # a peer died (no raw MPI error: the test counts these lines)
        print(f"rank {grid.rank} left: {type(exc).__name__}: {exc}", flush=True)
        revoke(ckpt.comm)  # the factorization revoked the grid's: every blocked survivor fails too
        _wait_for_the_others(root, grid.rank, grid.size, a.kill_rank, a.ready)
        exit_without_finalize(None, 3)
    start = seen[0] if seen else -1
    total = grid.comm.allreduce(sum(stored))
    same = grid.comm.allreduce(int(np.array_equal(A.local, ref.local)), op=MPI.MIN)
    if grid.rank == 0:
        print(f"resumed at panel {start}")
        print(f"stored L {total}")
        print(f"factored {sum((N - NB * j) * NB for j in range(max(start, 0)))}")  # panels are nb wide
        print(f"bitwise {bool(same)}", flush=True)
    grid.free()
    ckpt.finalize()


def _wait_for_the_others(root: Path, rank: int, size: int, victim: int, ready: str | None) -> None:
    """Say this rank has left (``left.<rank>``) and wait, at most 120 s, until every other rank has too or
    is gone (the victim; with ``--ready``, a rank whose pid no longer runs): a survivor that exits at once
    makes the launcher end the job 10 s later, and a slower survivor would be ended before it could tell."""
    (root / f"left.{rank}").write_text("")

    def over(r: int) -> bool:
        if r == victim or (root / f"left.{r}").exists():
            return True
        try:
            os.kill(int(Path(f"{ready}.{r}").read_text()), 0) if ready else None
        except (ProcessLookupError, ValueError, FileNotFoundError):
            return True
        return False

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(over(r) for r in range(size) if r != rank):
        time.sleep(0.05)


if __name__ == "__main__":
    main()
