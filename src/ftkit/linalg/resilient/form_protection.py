"""Protected operands for the routines that run as a :class:`~ftkit.linalg.resilient.engine.ProductForm`
(every multiplying routine but PDGEMM, whose :func:`~ftkit.linalg.protect_operands` takes its arguments
directly): :func:`protect_form` saves a form's fixed operands once, :func:`check_protected` checks that a call
may use them. The machinery (saving, deadline, agreement) is :func:`~.protected.protect_pieces`'.
"""

from __future__ import annotations

import os

from ...storage.inputs import InputStore
from .._grid_failure import handles_failures
from .engine import build_operands
from .form import ProductForm
from .protected import Built, ProtectedOperands, operands_key, protect_pieces

__all__ = ["protect_form", "check_protected", "form_key"]


def form_key(form: ProductForm, algorithm: str = "summa") -> tuple[object, ...]:
    """What a form's saved operand pieces depend on besides its matrices (local; see :func:`operands_key`)."""
    f = form
    return (f.routine, f.flags, *operands_key(f.ta, f.tb, f.m, f.n, f.k, f.ia, f.ja, f.ib, f.jb, f.C, f.ic,
                                              f.jc, algorithm))  # fmt: skip


@handles_failures
def protect_form(form: ProductForm, *, store: InputStore | str | os.PathLike[str],
                 timeout: float | None = None) -> ProtectedOperands:
    """Build ``form``'s operands once and save its ``fixed`` sides: the protector of every routine other than
    PDGEMM (collective on C's grid; guarantees and errors as :func:`~ftkit.linalg.protect_operands`).

    The handle, passed as ``store=`` to the routine with the same matrices and arguments, makes a call skip
    the ``prepare`` step of its fixed sides, their redistribution and their saving."""
    f = form

    def build() -> Built:
        ops, built = build_operands(f, "summa")
        return ops, built if f.fixed != "ab" else None

    B = f.B if f.fixed == "ab" and f.B is not f.A else None
    return protect_pieces(f.C.grid, f.routine, build if f.m and f.n and f.k else None, f.fixed, f.A, B,
                          form_key(f), store=store, timeout=timeout)  # fmt: skip


def check_protected(form: ProductForm, store: object, position: int) -> None:
    """Check that ``store=``, if protected operands, belongs to ``form`` (``position``: its PBLAS number).

    Raises
    ------
    PBLASArgumentError
        If the handle was released, or was made for another routine, other matrices or other arguments.
    """
    if isinstance(store, ProtectedOperands):
        B = form.B if form.fixed == "ab" and form.B is not form.A else None
        store.check(form.A, B, form_key(form), form.routine, position)
