"""What a :class:`~ftkit.checkpoint.Checkpointer` agrees on when it starts: directories, run lock, run state.

Every step is collective over the checkpointer's internal communicator, with the ``failure_timeout``
deadline, and ends the same way on every rank: an error on one rank (rank 0 reading a damaged manifest, a
directory that cannot be created, a run locked by another job) is sent to the others and raised on every
rank as an ftkit error, never left to hang the others in a collective.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .._paths import check_plain_name
from ..config import Config
from ..errors import CheckpointError, ConfigError, RunLockedError
from ..topology import Topology
from . import _mpi
from .runlock import RunLock, acquire_run_lock
from .runstate import RunState, find_checkpoint_dirs, inspect_run, leftover_problem, write_run_marker

__all__ = ["prepare_dirs", "take_run_lock", "agree_run_state"]


def prepare_dirs(config: Config, topology: Topology, comm: Any) -> None:
    """Create the run directories and this node's local directory on every rank (collective).

    Raises
    ------
    ConfigError
        On every rank, naming the ranks and directories that could not be created.
    """
    error = None
    try:
        config.ensure_dirs()
        topology.local_dir.mkdir(parents=True, exist_ok=True)
    except ConfigError as exc:
        error = str(exc)
    except OSError as exc:
        error = (f"{config.source}: ckpt_dir = {config.ckpt_dir}: cannot create the node-local "
                 f"directory {topology.local_dir} ({exc.strerror or exc})")
    errors = _mpi.allgather(comm, error, "directory set-up", config.failure_timeout)
    bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
    if bad:
        raise ConfigError("; ".join(bad[:2]))


def take_run_lock(config: Config, comm: Any) -> RunLock | None:
    """Take the run lock of ``meta_dir`` on rank 0 (collective); return it on rank 0, None elsewhere.

    Raises
    ------
    RunLockedError
        On every rank, naming the job that holds the lock (see :mod:`.runlock`).
    CheckpointError
        On every rank, if the lock file cannot be created (permissions, full disk).
    """
    lock, error = None, None
    if comm.Get_rank() == 0:
        try:
            lock = acquire_run_lock(Path(config.meta_dir), time.time())
        except RunLockedError as exc:
            error = ["locked", str(exc)]
        except OSError as exc:
            error = ["error", f"cannot create the run lock in meta_dir {config.meta_dir}: "
                              f"{exc.strerror or exc}"]
        except Exception as exc:  # noqa: BLE001 - reported on every rank instead of hanging the others
            error = ["error", f"taking the run lock in meta_dir {config.meta_dir} failed on rank 0: "
                              f"{type(exc).__name__}: {exc}"]
    error = _mpi.bcast(comm, error, 0, "start-up: run lock", config.failure_timeout)
    if error:
        if lock is not None:
            lock.release()
        raise (RunLockedError if error[0] == "locked" else CheckpointError)(error[1])
    return lock


def _inspect_on_root(config: Config, nranks: int, local_dir: Path) -> list[Any]:
    """Rank 0's view of the run state, as a JSON-able list; ``["error", message]`` if reading failed."""
    try:
        if config.exec_id:
            check_plain_name(config.exec_id, f"{config.source}: exec_id")
        s = inspect_run(config, nranks, [local_dir])
        if s.from_scratch and not s.problem:
            write_run_marker(Path(config.meta_dir), s.exec_id)   # before any checkpoint file of the run
        return ["ok", s.exec_id, s.manifest_text, s.restarted, s.problem, s.fresh_manifest, s.from_scratch]
    except ConfigError as exc:
        return ["config", str(exc)]
    except Exception as exc:  # noqa: BLE001 - any failure on rank 0 must reach every rank, not hang them
        return ["error", f"reading the run metadata in {config.meta_dir} failed on rank 0: "
                         f"{type(exc).__name__}: {exc}"]


def agree_run_state(config: Config, topology: Topology, comm: Any, nranks: int) -> RunState:
    """Decide fresh start or restart (rank 0 reads the manifest) and agree on it (collective).

    Each node's local directory is visible to its own ranks only (on a real cluster), so every rank looks
    for leftover checkpoint files of this run in its node's directory. On a fresh start rank 0 records the
    run in ``meta_dir/ftkit.run`` (see :mod:`.runstate`).

    Raises
    ------
    ConfigError
        On every rank, if the configured ``exec_id`` is not a plain name.
    CheckpointError
        On every rank, if rank 0 failed unexpectedly while reading the metadata.
    """
    timeout = config.failure_timeout
    mine = _inspect_on_root(config, nranks, topology.local_dir) if comm.Get_rank() == 0 else None
    answer = _mpi.bcast(comm, mine, 0, "start-up: run state", timeout)
    if answer[0] == "config":
        raise ConfigError(str(answer[1]))
    if answer[0] != "ok":
        raise CheckpointError(f"Checkpointer start-up: {answer[1]}")
    state = RunState(str(answer[1]), str(answer[2]), bool(answer[3]), str(answer[4]), bool(answer[5]),
                     bool(answer[6]))
    if state.from_scratch and not state.problem:
        # This run's files on another node (rank 0 sees only its own node's directory); other runs' files
        # in shared directories are not looked for.
        leftovers = find_checkpoint_dirs(config, state.exec_id, [topology.local_dir])
        found = [p for p in _mpi.allgather(comm, str(leftovers[0]) if leftovers else "", "start-up",
                                           timeout) if p]
        if found:
            state = RunState("unknown", "", True, leftover_problem(config, Path(found[0])))
    return state
