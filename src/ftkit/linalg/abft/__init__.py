"""ABFT: the PBLAS routines protected against silent errors by block checksums (FT-PBLAS 2.2).

``ft_pdgemm`` / ``ft_pdsymm`` (:mod:`.product`), ``ft_pdtrsm`` / ``ft_pdtrmm`` / ``ft_pdsyrk`` /
``ft_pdsyr2k`` (:mod:`.level3`), the report (:mod:`.report`) and periodic checking (:mod:`.policy`); the
checksum algebra they share is :mod:`ftkit.linalg.checksums`.

How :func:`ft_pdgemm` works (the checksum algebra and its bounds are in :mod:`ftkit.linalg.checksums`):

1. **Encode, locally, inside the panels.** The SUMMA engine (:func:`~ftkit.linalg.pblas._summa.run_summa`)
   runs with a panel exchange that wraps the normal one (:mod:`ftkit.linalg.abft._encoded_exchange`): when a
   process copies its piece of an A panel into its panel slot, the same pass (one numba kernel) writes the
   piece's checksum rows under it (plain, index-weighted and absolute sums of every row segment of C, plus
   squared sums for ``tol="statistical"``, the only threshold that needs them); likewise the checksum columns
   beside its B piece. They travel in the same messages as the data; no separate message, no extra
   synchronisation, no extra copy of the piece.
2. **Predict.** On arrival each process multiplies the checksum rows of the A panel with the checksum
   columns of the B panel (a GEMM ``1/bs^2`` the size of the data GEMM), which accumulates for every
   ``bs x bs`` block of its C the expected plain / weighted sums and the ``|A||B|`` magnitude that scales the
   rounding bound.
3. **Verify** each local block's sums against the prediction (``tol``: rigorous bound, statistical bound or a
   relative number). The report gives the largest residual / threshold ratio of the blocks that passed.
   Without errors the only synchronisation after the multiply is one non-blocking reduction of the report's
   totals, waited by sleeping (a blocking collective busy-polls on the ranks that finish first: with more
   ranks than cores that CPU is taken from the slowest one); events are exchanged, and the collective
   recomputation below runs, only when some process has flagged a block.
4. **Correct** (``mode="correct"``): a block with a single wrong element is fixed in O(1) from the weighted
   checksums; any other flagged block is recomputed by its owner from its rows of op(A) and columns of op(B),
   fetched from the processes of its process row and column only (nothing global), then checked again. A
   block flagged only by the statistical threshold whose recomputation passes the rigorous bound was a
   rounding alarm (structured data whose rounding errors do not cancel), not a fault. If a block can still
   not be made consistent (e.g. op(A) itself was corrupted in memory after encoding, so the fetched rows
   are wrong too) every process raises :class:`~ftkit.errors.ABFTError` carrying the report.

Limits. A second wrong element in a block that also holds a large one is caught by the weighted checksums
only if it exceeds their threshold (about ``bs`` times the plain one, since the weights reach ``bs``); below
that the O(1) correction accepts the block and the second error stays (then within ``bs`` times the bound).
Smaller ``bs`` tightens this. Combining these checksums with the failure-aware exchange is not supported:
the final verification is a collective on the original grid.

``mode="detect"`` stops after step 3 and leaves C exactly as computed (for Krylov solvers that decide
themselves). :class:`ABFTPolicy` runs the checked product every ``check_every`` calls and plain ``pdgemm``
otherwise (the reference's CG recipe: checking every 10th product keeps the iteration path undisturbed).
"""

from __future__ import annotations

from .level3 import ft_pdsyr2k, ft_pdsyrk, ft_pdtrmm, ft_pdtrsm
from .policy import ABFTPolicy
from .product import ft_pdgemm, ft_pdsymm
from .report import MODES, ABFTReport, BlockEvent

__all__ = ["ABFTReport", "BlockEvent", "ABFTPolicy", "ft_pdgemm", "ft_pdsymm", "ft_pdtrsm", "ft_pdtrmm",
           "ft_pdsyrk", "ft_pdsyr2k", "MODES"]
