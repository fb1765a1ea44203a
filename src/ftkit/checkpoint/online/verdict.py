"""What a relaunch can recover after the job could not go on online: the truth for the error message.

When online recovery is impossible every survivor raises the same
:class:`~ftkit.errors.OnlineRecoveryError`; its message says what a plain relaunch will find. That depends on
the dead ranks' node-local files: when only their processes died the files are intact and any complete
checkpoint serves; when their nodes were lost too, only a checkpoint whose redundancy covers the dead set
does (each level's rule in the level table, :mod:`ftkit.storage.levels`: L4 always; L3 if no group lost
more members than its code repairs; L2 if no dead rank's partner died as well). :func:`relaunch_verdict`
says which, from the manifest and the topology (no I/O, no communication: the same on every application
rank); :func:`shared_verdict` gives the same text to the idle spares, which know neither.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from ...errors import FtkitError, OnlineRecoveryError, ProcessFailure
from ...failure.replace import SPARE, Rebuilt
from ...failure.ulfm import agree_flag
from ...storage.levels import survives_loss
from .. import _mpi

if TYPE_CHECKING:
    from ...storage.manifest import CheckpointEntry
    from ...topology import Topology
    from ..session import Session

__all__ = ["UNKNOWN", "covers_node_loss", "relaunch_verdict", "shared_verdict", "cannot_go_on"]

#: The verdict when it cannot be known (no survivor knew the run's state, or a failure while sharing it).
UNKNOWN = ("Whether a relaunch recovers depends on the checkpoints on disk: a relaunch recovers from the "
           "newest complete one still readable, else it starts from the beginning")


def covers_node_loss(topology: Topology, level: int, dead: Iterable[int], l3_code: str) -> bool:
    """Whether a checkpoint complete at ``level`` survives the loss of the ``dead`` ranks' local files (the
    level's rule in the level table: :func:`ftkit.storage.levels.survives_loss`)."""
    return survives_loss(level, topology, frozenset(dead), l3_code)


def _step(entry: CheckpointEntry) -> str:
    step = entry.extra.get("next_step")
    return f" (the loop resumes at step {step})" if step is not None else ""


def relaunch_verdict(session: Session | Any, dead: Iterable[int]) -> str:
    """The sentence the error message ends with: what a relaunch recovers, given the dead ranks (from the
    ``session``'s manifest and topology; :data:`UNKNOWN` without them)."""
    store = getattr(session, "store", None)
    topology = getattr(session, "topology", None)
    if store is None or topology is None:
        return UNKNOWN
    dead = sorted(set(dead))
    entries = [e for e in store.manifest.newest_first() if e.complete_levels]
    if not entries:
        return "No checkpoint was complete yet: a relaunch starts from the beginning"
    for entry in entries:
        for level in entry.complete_levels:
            code = str(entry.extra.get("l3_code", session.config.l3_code))
            if covers_node_loss(topology, level, dead, code):
                return (f"Checkpoint {entry.id} at level {level}{_step(entry)} is on disk and survives even "
                        "the loss of the dead ranks' nodes: relaunch the job (with more spare_ranks to "
                        "survive this online) and it recovers from it")
    newest = entries[0]
    return (f"No checkpoint survives the loss of the dead ranks' node-local files (no complete L4 "
            f"checkpoint, and the partner copies or parity of ranks {dead} died with them): a relaunch "
            f"recovers from checkpoint {newest.id}{_step(newest)} only if those files are intact (their "
            "processes died, not their nodes); otherwise no checkpoint can be recovered and the run must "
            "start from the beginning")


def shared_verdict(session: Session | None, rebuilt: Rebuilt, timeout: float) -> str:
    """:func:`relaunch_verdict` of the first application rank, on every live process of ``rebuilt.world``
    (collective over it; :data:`UNKNOWN` everywhere if a further failure strikes; ``session`` is None on a
    spare)."""
    roster = list(rebuilt.roster)
    root = next((pos for pos, role in enumerate(roster) if role != SPARE), None)
    if root is None:
        return UNKNOWN
    world = rebuilt.world
    mine = relaunch_verdict(session, rebuilt.dead) if world.Get_rank() == root else None
    text, ok = UNKNOWN, 1
    try:
        text = str(_mpi.bcast(world, mine, root, "online recovery: what a relaunch recovers", timeout))
    except (ProcessFailure, FtkitError):
        ok = 0
    try:
        ok = agree_flag(world, ok)
    except ProcessFailure:
        ok = 0
    return text if ok else UNKNOWN


def cannot_go_on(rebuilt: Rebuilt, why: str, relaunch: str = UNKNOWN) -> NoReturn:
    """Raise the one error every process raises when the job cannot recover online.

    This is the seam where "continue with fewer ranks" (elastic restart) plugs in: it gets the agreed
    outcome of the repair (``rebuilt.survivors``, ``rebuilt.missing``) on every live process. ``relaunch``
    says what a relaunch recovers (:func:`relaunch_verdict`; the same text on every process).

    Raises
    ------
    OnlineRecoveryError
        Always, with the same message on every process.
    """
    raise OnlineRecoveryError(
        f"online recovery impossible: {why} (dead application ranks {list(rebuilt.dead)}, "
        f"{len(rebuilt.spares)} idle spare(s)). {relaunch}", list(rebuilt.dead))
