"""``algorithm="auto"``: the SpMM algorithm with the lowest predicted time, and the layout check."""

import torch
import torch.distributed as dist

from ..adj import HaloAdj
from ..comm.group import check_plan_matches_group, collective_device, is_distributed
from ..comm.halo_options import HaloOptions
from ..cost import CostModel, Prediction, RankVolumes
from ..grid import ProcessGrid
from .base import ALGORITHMS, auto_candidates

#: one row of an ``explain()`` table: (algorithm, predicted seconds, max bytes sent), slowest rank
CostRow = tuple[str, float, int]


def choose_algorithm(adj: HaloAdj, grid: ProcessGrid | None, row_bytes: int, learnable: bool,
                     cost_model: CostModel, group: dist.ProcessGroup | None = None,
                     options: HaloOptions | None = None) -> tuple[str, list[CostRow]]:
    """The candidate with the lowest predicted SpMM time (forward + backward), max over ranks.

    Every rank takes the same decision: the per-algorithm predictions are all-reduced with
    ``MAX`` (a collective over ``group``, or the default group under a grid).  With
    ``learnable`` edge weights, algorithms that would refuse them are never candidates, nor are,
    under halo ``options``, algorithms that would refuse those.
    """
    plan = adj.plan
    volumes = RankVolumes.from_counts(plan.send_counts, plan.recv_counts, plan.part_sizes, plan.rank,
                                      grid.col if grid else 0, grid.replication if grid else 1)
    names = auto_candidates(grid is not None)
    if learnable:
        names = [n for n in names if ALGORITHMS[n].differentiates_edge_weights]
    if options is not None and options.staleness:
        names = [n for n in names if ALGORITHMS[n].supports_staleness]
    if options is not None and options.compressed:
        names = [n for n in names if ALGORITHMS[n].supports_precision]
    predictions: list[Prediction] = []
    for n in names:
        prediction = ALGORITHMS[n].predict(volumes, cost_model, row_bytes)
        if prediction is None:
            raise RuntimeError(f"algorithm {n!r} is an auto candidate but predicts no cost")
        predictions.append(prediction)
    worst = torch.tensor([[p.seconds for p in predictions], [p.bytes_sent for p in predictions]],
                         dtype=torch.float64)
    reduce_group = None if grid is not None else group
    if is_distributed(reduce_group):
        device = collective_device(reduce_group) or worst.device
        reduced = worst.to(device)
        dist.all_reduce(reduced, op=dist.ReduceOp.MAX, group=reduce_group)
        worst = reduced.cpu()
    report = [(n, float(worst[0, k]), int(worst[1, k])) for k, n in enumerate(names)]
    return names[int(torch.argmin(worst[0]))], report


def explain_table(report: list[CostRow], chosen: str | None, header: str, cost_model: CostModel) -> str:
    """The text ``explain()`` prints for a choice made by :func:`choose_algorithm`."""
    lines = [f"cost model: {cost_model}", header,
             f"{'algorithm':<16}{'predicted ms':>14}{'max bytes sent':>16}"]
    for name, seconds, nbytes in report:
        mark = "  <- chosen" if name == chosen else ""
        lines.append(f"{name:<16}{seconds * 1e3:>14.3f}{nbytes:>16d}{mark}")
    return "\n".join(lines)


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
