"""The check that the shard a layer got was made for its layout: :func:`exchange_group`.

The checks of a layer's ``algorithm``, ``replication``, process ``group`` and halo options,
:func:`~pyg_sparsecomm.algorithms.base.check_settings` and
:func:`~pyg_sparsecomm.algorithms.base.check_options`, live beside the registry they read
(:data:`~pyg_sparsecomm.algorithms.base.ALGORITHMS`) in :mod:`~pyg_sparsecomm.algorithms.base`;
they are importable from here too.
"""
import torch.distributed as dist

from ..comm.grid import ProcessGrid
from ..comm.group import check_plan_matches_group
from ..plan.halo_adj import HaloAdj
from .base import ALGORITHMS, check_options, check_settings

__all__ = ["ALGORITHMS", "check_settings", "check_options", "exchange_group"]


def exchange_group(adj: HaloAdj, grid: ProcessGrid | None,
                   group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    """The group of the halo exchanges (1.5D: the grid's column group), after checking that the
    shard was made for this layout."""
    if grid is None:
        check_plan_matches_group(adj.plan.world_size, adj.plan.rank, group)
        return group
    if adj.plan.world_size != grid.num_block_rows or adj.plan.rank != grid.row:
        raise ValueError(
            f"replication={grid.replication} on {grid.world_size} ranks needs the block row {grid.row} of a "
            f"partition into P/c={grid.num_block_rows} parts (SparsityAwarePartitioner(num_parts="
            f"{grid.num_block_rows}) and shard(data, grid=ProcessGrid({grid.replication}))), but this shard "
            f"is part {adj.plan.rank} of {adj.plan.world_size}")
    check_plan_matches_group(adj.plan.world_size, adj.plan.rank, grid.col_group)
    return grid.col_group
