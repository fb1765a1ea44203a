"""What the online-recovery package needs of the object that holds the session: :class:`Host`.

The Checkpointer is that object, but this package never imports it: the loop (:mod:`.loop`), the restore
(:mod:`.restore`) and the shrink (:mod:`.shrink`) reach it only through these four members, and it alone
changes its own fields.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...storage.manifest import CheckpointEntry
from ..handover import OnShrink
from ..recovery import RecoveryInfo
from ..session import Session

__all__ = ["Host"]


class Host(Protocol):
    """The holder of a session (the Checkpointer), as online recovery sees it."""

    @property
    def session(self) -> Session:
        """The session it holds now."""

    def adopted(self, session: Session) -> None:
        """Hold ``session`` from now on (it replaces the one held: online recovery, promotion, shrink)."""

    def restored(self, recover: Any) -> tuple[RecoveryInfo, CheckpointEntry]:
        """Fill every protected array and object with ``recover`` (:func:`.recovery.recover_newest`, or the
        name the caller's module holds for it) over the session held; then it counts as recovered."""

    def reprotect(self, on_shrink: OnShrink, comm: Any) -> list[str]:
        """Forget every protected array, call ``on_shrink(comm)`` to protect them anew, and return the
        names protected without a global layout (``["<none>"]`` when nothing was protected)."""
