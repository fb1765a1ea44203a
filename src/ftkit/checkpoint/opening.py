"""The start of a run: :func:`open_session`, the one place a :class:`~.session.Session` is opened
(``Checkpointer()``).

In order, every step collective and ending alike on every rank: the launch is checked, spares are split
off (:mod:`.online.spares`; a spare waits in there and comes back only promoted, as the dead rank's session),
the node map is agreed and the topology planned, dedicated heads leave for their node's service (with
``head = 1``), the run directories are made, the run lock taken and the run state (fresh start or restart,
execution id, manifest) agreed, and the session built (:func:`.session.build_session`) with its exit policy.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from mpi4py import MPI

from .. import mpienv, uncaught
from ..config import Config
from ..storage import set_group_access
from ..storage.manifest import Manifest, ManifestStore
from ..topology import node_ids_from_hosts, plan_topology
from . import _mpi, events, pipeline
from .exitpolicy import ExitPolicy
from .head import enter_head_mode
from .levels._groups import group_comm
from .online import spares
from .online.appcomm import guard
from .runlock import RunLock
from .session import Session, build_session, release
from .startup import agree_run_state, prepare_dirs, take_run_lock

__all__ = ["open_session"]


def open_session(config: Config, world: Any, spare_ranks: int | None = None) -> Session:
    """Open the run's session over ``world`` (collective; see the module docstring).

    ``spare_ranks`` as in :func:`.online.spares.with_spares`. With ``head = 1`` a head never returns from
    here (it serves its node's post-processing and exits when the application finalizes), and the session
    holds the application ranks only; so does a spare that is never needed (exit code 0 at the job's end).

    Raises
    ------
    ConfigError
        If the configuration is invalid for this job (on every rank).
    RunLockedError
        If another live job uses the same ``meta_dir`` (on every rank; see :mod:`.runlock`).
    """
    mpienv.check_launch()  # a mis-launched job fails here, before any directory (local: no MPI traffic)
    set_group_access(bool(config.group_access))  # 0600/0700, or 0640/0750 with group_access = 1
    config = spares.with_spares(config, spare_ranks)
    # Without spares and heads, every communicator of the session is made in one round (each creation is
    # ~0.2 s across hosts however many are made together): uncaught's, ftkit's internal one, the exit
    # policy's and ckpt.comm, within the deadline (every later start-up collective follows it).
    early = (_mpi.internal_comms(world, 3, 1, config.failure_timeout, "Checkpointer start-up")
             if not config.spare_ranks and not config.head else None)
    uncaught.install(world, dup=early[0] if early else None)  # ftkit errors printed once (collective)
    app, online = spares.split_spares(config, world)
    if app is None:
        assert online is not None
        return spares.promoted(config, online)  # a promoted spare: set up as the dead rank it replaces
    uncaught.install(app)  # with spares: errors are compared among the application ranks
    config.validate_for(app.Get_size())
    icomm = early[1] if early else _mpi.internal_comm(app)
    lock: RunLock | None = None
    try:
        if not early:
            # Every later start-up collective follows one with a deadline: a missing rank is reported.
            _mpi.barrier(icomm, config.failure_timeout, "Checkpointer start-up")
        # On the internal communicator, not on world: a first blocking collective on world would build Open
        # MPI 5's HAN sub-communicators there (mpienv.INTERNAL_COMM_INFO), seconds across hosts. One
        # exchange of host names gives the node map (as FTI makes it) and the L1-sharing check.
        seen = _mpi.allgather(icomm, mpienv.l1_placement(config.ckpt_dir, config.glbl_dir), "start-up: nodes",
                              config.failure_timeout)
        mpienv.warn_l1_shared(seen, icomm.Get_rank(), config.ckpt_dir, config.glbl_dir, stacklevel=4)
        node_ids = node_ids_from_hosts([str(s[0]) for s in seen], config.node_size or None)
        topology = plan_topology(
            node_ids, icomm.Get_rank(), head=config.head, group_size=config.group_size,
            ckpt_dir=config.ckpt_dir,
            # L2/L3 intervals need groups: too few nodes for group_size is a TopologyError (ConfigError).
            need_groups=bool(config.ckpt_l2 or config.ckpt_l3))
        links = None
        if config.head:
            # Heads serve their node's post-processing inside this call and exit (FTI's heads): only
            # application ranks get past it, and ckpt.comm holds only them.
            links = enter_head_mode(app, topology, config)
            uncaught.install(links.app)  # errors are compared among the application ranks
            events.start(config, links.app.Get_rank())  # log lines show application ranks
            icomm.Free()
            icomm = _mpi.internal_comm(links.app)
            comm = links.app
        else:
            comm = early[3] if early else app.Dup()
        nranks = comm.Get_size()
        prepare_dirs(config, topology, icomm)
        lock = take_run_lock(config, icomm)
        state = agree_run_state(config, topology, icomm, nranks)
    except BaseException as exc:
        if lock is not None:
            lock.release()
        for made in (icomm, *(early[2:] if early else ())):
            with contextlib.suppress(MPI.Exception):
                made.Free()
        if isinstance(exc, MPI.Exception):
            raise _mpi.as_failure(exc, app, "Checkpointer start-up") from exc
        raise
    manifest = Manifest.loads(state.manifest_text) if state.manifest_text else Manifest(
        exec_id=state.exec_id, nranks=nranks, created=0.0)
    manifest.dirs = {k: str(getattr(config, k)) for k in ("ckpt_dir", "glbl_dir", "meta_dir")}
    store = ManifestStore(config.meta_dir, manifest, writer=comm.Get_rank() == 0)
    try:
        session = build_session(config, comm, icomm, topology, state.exec_id, store,
                                restarted=state.restarted, problem=state.problem, exit=ExitPolicy.off(),
                                lock=lock, links=links, online=online)
    except BaseException:
        release(icomm, lock, online, config.failure_timeout)
        if early:
            with contextlib.suppress(MPI.Exception):
                early[2].Free()
        raise
    try:
        session = dataclasses.replace(
            session, exit=ExitPolicy(icomm, config, state.exec_id, dup=early[2] if early else None))
        if state.fresh_manifest:
            pipeline.commit_manifest(session.ctx, "start-up: manifest commit")
        if session.topology.groups and not config.head:
            # The L2/L3 group communicator now (FTI makes its groups in FTI_Init), not in the first L2/L3
            # call: its barrier and split cost that call 2-120 ms depending on the load (issue 37). The
            # split has every rank: it ends the start-up as the barrier below would.
            group_comm(session.ctx.comm, session.topology, session.ctx.timeout)
        else:
            _mpi.barrier(icomm, config.failure_timeout, "Checkpointer start")
    except BaseException:
        session.close()
        raise
    return guard(session) if online is not None else session
