"""What the online-recovery programs (online_heat.py, online_shrink.py) share: their common arguments, the
start of the checkpointer, and the final report.

Imported by those scripts from their own directory (Python puts a script's directory first on the path).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import heat  # noqa: E402

import ftkit  # noqa: E402
from ftkit.failure import exit_without_finalize  # noqa: E402


def parser() -> argparse.ArgumentParser:
    """The arguments of both programs: ``--config``, ``--steps``, ``--size`` (plate side), ``--pause`` (s
    per step), ``--dir`` (where the files for the driver go)."""
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="ftkit.ini")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--dir", required=True)
    return p


def particles_step(p: Any, rng: Any, state: dict, step: int) -> Any:
    """One step of the application-state workload (``--appstate``): the resizable array ``p`` gains 0-4
    random values and every third step loses its first; the dict keeps a sum, the sizes and a big int."""
    import numpy as np

    p = np.concatenate([p[1:] if step % 3 == 0 else p, rng.random(int(rng.integers(0, 5)))])
    state["sum"] += float(p.sum())
    state["sizes"].append(len(p))
    state["big"] *= 3
    return p


def particles_start(rank: int) -> tuple[Any, Any, dict]:
    """The workload's initial array, generator (seeded by rank) and dict."""
    import numpy as np

    return np.zeros(0), np.random.default_rng(100 + rank), {"sum": 0.0, "sizes": [], "big": 1}


def particles_match(rank: int, steps: int, p: Any, rng: Any, state: dict) -> bool:
    """Whether the final ``p``, ``state`` and the next draws of ``rng`` are the failure-free run's."""
    import numpy as np

    ref_p, ref_rng, ref_state = particles_start(rank)
    for step in range(steps):
        ref_p = particles_step(ref_p, ref_rng, ref_state, step)
    return (p.tobytes() == ref_p.tobytes() and state == ref_state
            and np.array_equal(rng.random(1000), ref_rng.random(1000)))


def start(config: str, out: Path) -> ftkit.Checkpointer:
    """The checkpointer; a spare of a job that could not be recovered online writes the error to
    ``<out>/online-error.spare<pid>`` and exits with code 3."""
    try:
        return ftkit.Checkpointer(config)
    except ftkit.OnlineRecoveryError as exc:
        (out / f"online-error.spare{os.getpid()}").write_text(str(exc))
        exit_without_finalize(None, 3)
        raise  # not reached


def report(comm: Any, reports: list[Any], field: Any, n: int, steps: int) -> None:
    """On rank 0: ``recovery dead=[..] ckpt=<id> level=<L>`` per online recovery, ``digest`` of the final
    ``field`` and ``reference`` (a serial recomputation); then, after a recovery, leave without
    MPI_Finalize (it may wait for the dead, ompi#11404)."""
    if comm.rank == 0:
        for r in reports:
            print(f"recovery dead={list(r.dead)} ckpt={r.checkpoint_id} level={r.level}", flush=True)
        print(f"digest {heat.digest(field)}", flush=True)
        print(f"reference {heat.digest(heat.reference(n, steps))}", flush=True)
    if reports:
        exit_without_finalize(comm, 0)
