"""ProcessGrid (issue #4, item 1): layout, groups in real gloo jobs, clear errors for bad grids."""
import pytest
import torch
import torch.distributed as dist

from pyg_sparsecomm.comm.grid import ProcessGrid
from pyg_sparsecomm.testing import launch


def test_layout_without_processes():
    g = ProcessGrid(2, world_size=8, rank=5)
    assert (g.row, g.col, g.num_block_rows, g.stages) == (2, 1, 4, 2)
    assert g.row_ranks(2) == [4, 5] and g.col_ranks(1) == [1, 3, 5, 7]
    assert g.stage_blocks() == [2, 3]
    # every block column is multiplied exactly once per grid row
    for row in range(4):
        blocks = sorted(b for j in range(2) for b in ProcessGrid(2, 8, row * 2 + j).stage_blocks())
        assert blocks == [0, 1, 2, 3]
    assert ProcessGrid(4, world_size=16, rank=0).stages == 1
    assert "c=2" in repr(g)


@pytest.mark.parametrize("P,c,match", [(6, 4, "does not divide"), (8, 4, "P/c² must be an integer"),
                                       (6, 2, "P/c² must be an integer"), (4, 0, "positive integer")])
def test_bad_grids(P, c, match):
    with pytest.raises(ValueError, match=match):
        ProcessGrid(c, world_size=P, rank=0)


def _groups(rank, world_size, c):
    grid = ProcessGrid(c)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=grid.row_group)
    u = torch.tensor([float(rank)])
    dist.all_reduce(u, group=grid.col_group)
    return grid.row, grid.col, float(t), float(u)


@pytest.mark.parametrize("P,c", [(4, 2), (8, 2)])
def test_groups_in_a_real_job(P, c):
    for rank, (row, col, row_sum, col_sum) in enumerate(launch(_groups, P, c)):
        grid = ProcessGrid(c, world_size=P, rank=rank)
        assert (row, col) == (grid.row, grid.col)
        assert row_sum == sum(grid.row_ranks(row)) and col_sum == sum(grid.col_ranks(col))
