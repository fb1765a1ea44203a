"""Online recovery: a rank dies, a spare takes its place, the job goes on without a relaunch (issue 17).

With ``spare_ranks = S`` the last S processes of the job are spares held inside ``Checkpointer()``
(:mod:`.spares`). The application writes its main loop as ``for step in ckpt.steps(n): ...`` and
communicates on ``ckpt.comm``, an :class:`~.appcomm.AppComm`. Within that loop a process failure never
escapes to the application:

1. **Detection and repair** (:mod:`.repair`). The first failure-class ``MPI.Exception`` an ``AppComm`` call
   raises, or a :class:`~ftkit.errors.ProcessFailure` from ``snapshot()``/``checkpoint()``, makes this rank
   revoke every communicator of its session (the others' pending calls fail at once, idle spares wake up)
   and call :func:`ftkit.failure.replace.rebuild` with every live process: the dead ranks are agreed on, a
   spare takes each dead rank's number, the new application communicator has the old size and rank order.
2. **Fence** (:mod:`.fence`). The rest of the iteration is fenced: every ``AppComm`` call and
   ``snapshot()`` returns at once without communicating, with results that no rank takes for convergence
   (NaN; the data is restored next). Collectives in the loop are agreed, so a result one rank acts on,
   every rank got.
3. **Restore** (:mod:`.restore`). The next ``steps()`` iteration (on a promoted spare: its first one)
   adopts the new communicator (:func:`.adopt.adopt_session`: a new session, with the run's state from a
   rank that has it, internal communicators, post-processing), restores every protected array from the
   newest checkpoint complete for the new set of ranks (survivors read their L1 files; a replacement's
   file comes from its partner copy, an L3 decode by its group, else L4; those recovery steps also rebuild
   the lost copies and parity, so the redundancy of the restored checkpoint covers the new layout again),
   and yields the restored step (:mod:`.loop`).

A failure during the restore starts it again with the spares left. When it cannot recover online (spares
exhausted, all ranks that knew the run's state lost), every survivor raises the same
:class:`~ftkit.errors.OnlineRecoveryError` (:mod:`.verdict`: what a relaunch recovers); the checkpoints stay
on disk and a relaunch recovers from them (with ``steps(on_shrink=)`` the survivors continue with fewer ranks
instead: :mod:`.shrink`). An uncaught exception ends its process as a failure, never a hang
(:mod:`.exithook`).

A replacement takes over the dead rank's *logical* node (``ckpt.topology`` is planned from the job's
original node map): its node-local files live under that node's directory on the spare's own disk. Files
there that belong to the dead rank are not reachable from the spare's node on a real cluster, so a
replacement never reads them (:func:`.adopt.forget_unreachable`: on emulated nodes, where they would be,
they are removed first).

The package takes and returns :class:`~ftkit.checkpoint.session.Session` objects and never imports the
Checkpointer: the loop reaches it through :class:`.host.Host`. The records one session hands to the next
(:class:`~ftkit.checkpoint.handover.OnlineState` and the reports) live below the session, in
:mod:`ftkit.checkpoint.handover`.
"""
