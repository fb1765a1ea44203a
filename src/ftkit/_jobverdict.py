"""How a job ended, from what its launcher saw of its ranks: the one line ``ftkit launch`` and ``ftkit
job-status`` print, and the job's exit code.

:class:`ftkit._jobwatch.RankWatch` gathers the facts while the job runs (the ranks' notes,
:mod:`ftkit.jobstatus`; their exit statuses; when each was last seen running and first known ended);
:func:`endings` sorts the ranks by how they ended, :func:`verdict` says whether the job failed and how, and
:func:`failure_code` gives the exit code of a failed job whose launcher exited 0 (mpirun does under ULFM
when ranks were killed). :func:`judge_notes` judges a job from its notes alone, after it has ended.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ._jobproc import how_ended
from .errors import LaunchError
from .jobstatus import STATUS_ENV, Note, crash_summary, read_notes

__all__ = ["JOB_FAILED_EXIT", "Endings", "endings", "verdict", "failure_code", "judge_notes", "ranks_text",
           "named_dead"]

#: Exit code of a job whose launcher exited 0 although a rank failed, when no rank's own code says more.
JOB_FAILED_EXIT = 1
#: What a rank that vanished after the others had ended (or with them) gets after how it ended.
NOTHING_WENT_ON = ", and no rank went on without it"


@dataclass
class Endings:
    """How the ranks of a job ended (:func:`endings`), by pid except ``hooked``."""

    ranks: dict[int, int] = field(default_factory=dict)             # pid -> world rank
    hooked: list[tuple[int, str]] = field(default_factory=list)     # (rank, the exit hook's note)
    lost: dict[int, tuple[int, str]] = field(default_factory=dict)  # vanished, no exit note: (rank, how)
    other: dict[int, tuple[int, str]] = field(default_factory=dict)  # failed otherwise: (rank, how)
    normal: dict[int, float | None] = field(default_factory=dict)   # ended normally: when last in its program
    dead: dict[int, set[int]] = field(default_factory=dict)         # the ranks each process declared dead
    early: set[int] = field(default_factory=set)                    # ranks gone before MPI_Init had completed
    unproven: set[int] = field(default_factory=set)  # lost, and no rank ended normally is known to outlive it


def endings(notes: list[Note], ranks: dict[int, int], status: dict[int, int], killed: dict[int, str],
            ended_at: dict[int, float], running_at: dict[int, float]) -> Endings:
    """How each rank ended, from its notes and what the launcher saw (all by pid: ``ranks``, the rank
    processes seen; ``status``, their waitpid statuses; ``killed``, why the launcher killed some;
    ``ended_at`` and ``running_at``, when each was first known ended and last seen running, epoch seconds).

    A rank that exited 0 without an ``exit`` note (``os._exit(0)``: its code from the runtime or its
    zombie) ended normally: its own code says so. A rank that vanished without one (a signal, ``os._exit``
    with another code, a C ``exit()``) is ``lost``, and ``unproven`` unless a rank that ended normally went
    on after it was gone: it declared that rank dead (a ``dead`` note), or it was still in its program (its
    ``exit`` note, or seen running when it left without one) after that rank's process was known ended.
    Times come from this host's clock and the notes' files (a shared directory's clock may differ for ranks
    on other hosts: there only the ``dead`` notes tell).
    """
    by_pid: dict[int, dict[str, Note]] = defaultdict(dict)
    for n in notes:
        by_pid[n.pid][n.kind] = n
    rank_of = dict(ranks)
    rank_of.update({pid: kinds["start"].rank for pid, kinds in by_pid.items() if "start" in kinds})
    # A rank gone within a poll of its start was never seen: its begin note stands for it (not the begin
    # note of a process that a rank known here started: it carries that rank's number).
    known = set(rank_of.values())
    rank_of.update({pid: kinds["begin"].rank for pid, kinds in by_pid.items()
                    if "begin" in kinds and kinds["begin"].rank not in known})
    ends = Endings(ranks=rank_of, dead={pid: named_dead(kinds["dead"].text) for pid, kinds in by_pid.items()
                                        if "dead" in kinds})
    for pid, rank in sorted(rank_of.items(), key=lambda item: item[1]):
        kinds = by_pid.get(pid, {})
        noted = "start" in kinds or "begin" in kinds
        if "fault" in kinds:  # a crash (SIGSEGV...): its traceback says where
            ends.other[pid] = (rank, f"crashed ({crash_summary(kinds['fault'].text)})")
        elif "hook" in kinds:
            ends.hooked.append((rank, kinds["hook"].text))
        elif "exit" in kinds:
            ends.normal[pid] = kinds["exit"].time
        elif "replaced" in kinds:
            ends.lost[pid] = (rank, f"ended as a failed process for a spare to replace "
                                    f"({kinds['replaced'].text})")
        elif pid in killed and killed[pid].startswith("stopped"):
            ends.other[pid] = (rank, killed[pid])  # the job could not end by itself
        elif noted and status.get(pid) == 0:
            ends.normal[pid] = running_at.get(pid)
        elif noted:
            ends.lost[pid] = (rank, killed.get(pid) or how_ended(status.get(pid)))
            if "begin" in kinds and "up" not in kinds:
                ends.early.add(rank)  # gone before its MPI_Init had completed
        elif pid in status and status[pid] >= 0 and status[pid] != 0:
            ends.other[pid] = (rank, how_ended(status[pid]))
    for pid, (rank, _) in ends.lost.items():
        outlived = any(rank in ends.dead.get(other, ()) for other in ends.normal) or (
            pid in ended_at and any(t is not None and t > ended_at[pid] for t in ends.normal.values()))
        if not outlived:
            ends.unproven.add(pid)
    return ends


def verdict(ends: Endings, returncode: int, *, start_failure: str = "", gone_first: set[int] | None = None,
            up: bool = False) -> tuple[bool, str]:
    """``(failed, line)``: whether any rank failed (or the launcher returned ``returncode`` non-zero) and how.

    A rank failed if ftkit's exit hook ended it, if it crashed (a ``fault`` note), if the launcher killed it
    as stopped and alone, or if it was seen ending by a signal or a non-zero exit; a rank that vanished
    without an ``exit`` note failed unless the job went on without it (online recovery, a shrink, a
    failure-aware multiply): every other rank ended normally and one of them outlived it (:func:`endings`;
    not so for a rank killed once the others had ended, or with them). ``start_failure``: why the launcher
    ended ranks waiting in ``MPI_Init``; ``gone_first``: the ranks first seen gone then; ``up``: some rank
    completed ``MPI_Init``.
    """
    hooked, lost, other = ends.hooked, dict(ends.lost), ends.other
    went_on = bool(lost) and not hooked and not other and not ends.unproven
    failed = returncode != 0 or bool(hooked) or bool(other) or (bool(lost) and not went_on)
    if returncode == 0 and lost and not hooked and not other and ends.normal:  # why these fail the job
        lost.update({pid: (lost[pid][0], lost[pid][1] + NOTHING_WENT_ON) for pid in ends.unproven})
    parts = _grouped(list(lost.values()) + list(other.values()))
    if start_failure:
        parts, failed = [start_failure], True
    elif failed and (gone_first or ends.early):
        # A rank ended during start-up, and MPI_Init failed on others (Open MPI: "Unreachable", or a crash in
        # its failure handling): first the ranks seen gone first, while no rank had completed it.
        first = gone_first or ends.early
        parts.insert(0, f"{ranks_text(sorted(first))} ended before MPI_Init had completed"
                        f"{'' if up else ' on any rank'}")
    if hooked:
        reason = max((text for _, text in hooked), key=_dead_named)  # the one that knows the most dead
        parts.append(f"{ranks_text([r for r, _ in hooked])} ended by ftkit's exit hook ({reason})")
    if not parts:
        return failed, ""
    if not failed:
        return False, (f"ftkit launch: {'; '.join(parts)}; the other ranks went on without them and "
                       "ended normally")
    return True, f"ftkit launch: the job failed: {'; '.join(parts)}"


def failure_code(ends: Endings, status: dict[int, int], killed: dict[int, str],
                 ended_at: dict[int, float]) -> int:
    """The exit code of a failed job whose launcher exited 0: ``128 + n`` for the first rank to end of those
    that failed or vanished (not killed by the launcher) if signal ``n`` ended it, else the first such
    non-zero exit code; :data:`JOB_FAILED_EXIT` when none is known, or when ftkit's exit hook ended a rank
    (it left because of a failure, and is not that failure)."""
    if ends.hooked:
        return JOB_FAILED_EXIT
    failing = sorted((ended_at.get(pid, float("inf")), rank, pid)
                     for pid, (rank, _) in {**ends.lost, **ends.other}.items() if pid not in killed)
    for *_, pid in failing:
        code = status.get(pid, -1)
        if code > 0:
            return 128 + (code & 0x7F) if code & 0x7F else code >> 8
    return JOB_FAILED_EXIT


def judge_notes(status_dir: str | os.PathLike[str]) -> tuple[bool, str]:
    """Judge a job that has ended from the notes its ranks left in ``status_dir`` alone.

    For jobs started without ``ftkit launch`` (plain ``mpirun --with-ft ulfm``, ``srun``), whose launcher
    exits 0 under ULFM although ranks were killed: export ``$FTKIT_JOB_STATUS`` naming an empty directory
    to the ranks, then judge it once the launcher has returned (``ftkit job-status DIR``). The rules are
    :func:`verdict`'s, without what only a live watch sees (the exit statuses of processes that never
    imported ftkit, when a rank's process ended): a rank that vanished counts as gone on without only when a
    rank that ended normally declared it dead (ftkit's online recovery, shrink and exit hook do).

    Parameters
    ----------
    status_dir
        The directory exported to the ranks as ``$FTKIT_JOB_STATUS``.

    Returns
    -------
    tuple[bool, str]
        Whether any rank failed, and one line saying which ranks and how (empty when none failed).

    Raises
    ------
    LaunchError
        If ``status_dir`` is not a directory, or no rank left a ``start`` note there (the variable did not
        reach the ranks).
    """
    if not Path(status_dir).is_dir():
        raise LaunchError(f"{status_dir} is not a directory: make it (empty) before the job starts and "
                          f"export it to the ranks as ${STATUS_ENV}")
    notes = read_notes(status_dir)
    if not any(n.kind == "start" for n in notes):
        raise LaunchError(f"no rank left a note in {status_dir}: export it to the ranks as ${STATUS_ENV} "
                          f"(mpirun -x {STATUS_ENV}; srun exports the environment) and import ftkit in them")
    ends = endings(notes, {}, {}, {}, {}, {})
    failed, line = verdict(ends, 0, up=any(n.kind == "up" for n in notes))
    return failed, line.replace("ftkit launch:", "ftkit job-status:", 1)


def named_dead(text: str) -> set[int]:
    """The world ranks a ``dead`` note names ("2,3")."""
    return {int(r) for r in text.split(",") if r.strip().isdigit()}


def _dead_named(text: str) -> int:
    """How many dead ranks a hook note names ("after the failure of world rank(s) [2, 3]")."""
    named = text.split("after the failure of world rank(s) [", 1)
    return len(named[1].split("]", 1)[0].split(",")) if len(named) == 2 else 0


def ranks_text(ranks: list[int]) -> str:
    """``rank 3`` or ``ranks 1,2``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in sorted(ranks))


def _grouped(items: list[tuple[int, str]]) -> list[str]:
    groups: dict[str, list[int]] = defaultdict(list)
    for rank, how in items:
        groups[how].append(rank)
    return [f"{ranks_text(ranks)} {how}" for how, ranks in groups.items()]
