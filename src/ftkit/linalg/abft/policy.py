"""Periodic ABFT checking for iterative solvers: :class:`ABFTPolicy` (also importable from
:mod:`ftkit.linalg.abft`)."""

from __future__ import annotations

from typing import Any

from ...errors import ABFTArgumentError
from ...inject import InjectionPlan
from ..pblas.gemm import _is_int, pdgemm, pdsymm
from .product import ft_pdgemm, ft_pdsymm
from .report import MODES, ABFTReport

__all__ = ["ABFTPolicy"]


class ABFTPolicy:
    """Run the checked product every ``check_every``-th call and the plain one otherwise.

    An iterative solver calls ``policy.pdgemm(...)`` (or ``policy.pdsymm``) wherever it would call
    ``pdgemm``; calls ``check_every - 1, 2 check_every - 1, ...`` (0-based, so the 10th, 20th... with the
    default) go through :func:`ft_pdgemm` with the policy's ``bs``, ``tol`` and ``mode``. The reference's CG
    experience: checking every product perturbs the Krylov iteration's rounding; checking every 10th keeps
    the unchecked path's results bit-for-bit while still catching corrupted iterates periodically.

    Parameters
    ----------
    check_every
        Period (>= 1; 1 checks every call).
    bs, tol, mode, unchecked_is_error
        As :func:`ft_pdgemm` (``unchecked_is_error=True``: a checked call with blocks that could not be
        checked raises :class:`~ftkit.errors.ABFTError`).

    Raises
    ------
    ABFTArgumentError
        For a bad ``check_every`` or ``mode``.

    Attributes
    ----------
    calls
        Products run so far.
    reports
        ``(call number, ABFTReport)`` of every checked call.
    """

    def __init__(
        self,
        check_every: int = 10,
        *,
        bs: int | None = None,
        tol: float | str | None = None,
        mode: str = "correct",
        unchecked_is_error: bool = False,
    ) -> None:
        if not _is_int(check_every) or check_every < 1:
            raise ABFTArgumentError(f"check_every={check_every!r}; must be an integer >= 1")
        if mode not in MODES:
            raise ABFTArgumentError(f"mode={mode!r}; use 'correct' or 'detect'")
        self.check_every, self.bs, self.tol, self.mode = int(check_every), bs, tol, mode
        self.unchecked_is_error = bool(unchecked_is_error)
        self.calls = 0
        self.reports: list[tuple[int, ABFTReport]] = []

    def due(self) -> bool:
        """Whether the next call will be checked."""
        return (self.calls + 1) % self.check_every == 0

    @property
    def last_report(self) -> ABFTReport | None:
        """Report of the most recent checked call, if any."""
        return self.reports[-1][1] if self.reports else None

    def pdgemm(self, *args: Any, inject: InjectionPlan | None = None, **kwargs: Any) -> ABFTReport | None:
        """``pdgemm(*args)``, checked when :meth:`due`; return the checked call's report, else ``None``."""
        checked = self.due()
        self.calls += 1
        if not checked:
            pdgemm(*args, **kwargs)
            return None
        rep = ft_pdgemm(*args, bs=self.bs, tol=self.tol, mode=self.mode, inject=inject,
                        unchecked_is_error=self.unchecked_is_error, **kwargs)  # fmt: skip
        self.reports.append((self.calls, rep))
        return rep

    def pdsymm(self, *args: Any, inject: InjectionPlan | None = None) -> ABFTReport | None:
        """``pdsymm(*args)``, checked when :meth:`due` (see :meth:`pdgemm`)."""
        checked = self.due()
        self.calls += 1
        if not checked:
            pdsymm(*args)
            return None
        rep = ft_pdsymm(*args, bs=self.bs, tol=self.tol, mode=self.mode, inject=inject,
                        unchecked_is_error=self.unchecked_is_error)  # fmt: skip
        self.reports.append((self.calls, rep))
        return rep
