"""ProcessGrid construction errors and shapes, in-process on a one-rank communicator."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from ftkit.errors import GridError
from ftkit.linalg import ProcessGrid


@pytest.mark.parametrize("shape", [(2, 1), (1, 2), (0, 1), (1, 0), (-1, -1)])
def test_bad_shapes_raise_grid_error(shape):
    with pytest.raises(GridError) as exc:
        ProcessGrid(MPI.COMM_SELF, *shape)
    assert isinstance(exc.value, ValueError)


def test_bad_order():
    with pytest.raises(GridError, match="order"):
        ProcessGrid(MPI.COMM_SELF, 1, 1, order="X")


def test_one_by_one_grid():
    g = ProcessGrid.square(MPI.COMM_SELF)
    assert g.shape == (1, 1) and (g.myrow, g.mycol) == (0, 0)
    assert g.rank_of(0, 0) == 0 and g.coords(0) == (0, 0)
    assert g.row_comm.size == 1 and g.col_comm.size == 1
    with pytest.raises(GridError):
        g.rank_of(1, 0)
    g2 = ProcessGrid(MPI.COMM_SELF, 1, 1)
    assert g2.context != g.context
