"""``algorithm="auto"``: the SpMM algorithm with the lowest predicted time, and the layout check."""

import torch
import torch.distributed as dist

from ..adj import HaloAdj
from ..comm.group import check_plan_matches_group, collective_device, is_distributed
from ..comm.halo_options import HaloOptions
from ..comm.quantize import payload_row_bytes
from ..cost import CostModel, Prediction, RankVolumes, RowBytes
from ..grid import ProcessGrid
from .base import ALGORITHMS, auto_candidates

#: one row of an ``explain()`` table: (algorithm, predicted seconds, max bytes sent), slowest rank
CostRow = tuple[str, float, int]


def choose_algorithm(adj: HaloAdj, grid: ProcessGrid | None, row_bytes: int | RowBytes, learnable: bool,
                     cost_model: CostModel, group: dist.ProcessGroup | None = None,
                     options: HaloOptions | None = None) -> tuple[str, list[CostRow], list[CostRow]]:
    """The candidate with the lowest predicted SpMM time (forward + backward), max over ranks.

    Every rank takes the same decision: the per-algorithm predictions are all-reduced with
    ``MAX`` (a collective over ``group``, or the default group under a grid).  With
    ``learnable`` edge weights, algorithms that would refuse them are never candidates, nor
    are those that do not honour ``options``.  Returns the chosen name, the report priced with
    ``row_bytes`` and the same report priced with exact rows (equal when ``row_bytes`` is an
    ``int``), so :func:`explain_table` can show the trade.
    """
    plan = adj.plan
    volumes = RankVolumes.from_counts(plan.send_counts, plan.recv_counts, plan.part_sizes, plan.rank,
                                      grid.col if grid else 0, grid.replication if grid else 1)
    names = auto_candidates(grid is not None, options)
    if learnable:
        names = [n for n in names if ALGORITHMS[n].differentiates_edge_weights]
    priced = [_predictions(names, volumes, cost_model, row_bytes),
              _predictions(names, volumes, cost_model, RowBytes.of(row_bytes).exact)]
    worst = torch.tensor([[getattr(p, field) for p in predictions] for predictions in priced
                          for field in ("seconds", "bytes_sent")], dtype=torch.float64)
    reduce_group = None if grid is not None else group
    if is_distributed(reduce_group):
        device = collective_device(reduce_group) or worst.device
        reduced = worst.to(device)
        dist.all_reduce(reduced, op=dist.ReduceOp.MAX, group=reduce_group)
        worst = reduced.cpu()
    report = [(n, float(worst[0, k]), int(worst[1, k])) for k, n in enumerate(names)]
    exact = [(n, float(worst[2, k]), int(worst[3, k])) for k, n in enumerate(names)]
    return names[int(torch.argmin(worst[0]))], report, exact


def _predictions(names: list[str], volumes: RankVolumes, cost_model: CostModel,
                 row_bytes: int | RowBytes) -> list[Prediction]:
    predictions: list[Prediction] = []
    for n in names:
        prediction = ALGORITHMS[n].predict(volumes, cost_model, row_bytes)
        if prediction is None:
            raise RuntimeError(f"algorithm {n!r} is an auto candidate but predicts no cost")
        predictions.append(prediction)
    return predictions


def explain_table(report: list[CostRow], chosen: str | None, header: str, cost_model: CostModel,
                  exact_report: list[CostRow] | None = None) -> str:
    """The text ``explain()`` prints for a choice made by :func:`choose_algorithm`; with an
    ``exact_report`` that differs (compressed halos), also the bytes exact halos would send."""
    compressed = exact_report is not None and exact_report != report
    lines = [f"cost model: {cost_model}", header,
             f"{'algorithm':<16}{'predicted ms':>14}{'max bytes sent':>16}"
             + (f"{'exact bytes':>14}{'exact ms':>10}" if compressed else "")]
    for k, (name, seconds, nbytes) in enumerate(report):
        mark = "  <- chosen" if name == chosen else ""
        extra = f"{exact_report[k][2]:>14d}{exact_report[k][1] * 1e3:>10.3f}" if compressed else ""  # type: ignore[index]
        lines.append(f"{name:<16}{seconds * 1e3:>14.3f}{nbytes:>16d}{extra}{mark}")
    return "\n".join(lines)


def compression_note(width: int, element_size: int, options: HaloOptions) -> str:
    """One line: what a halo row of ``width`` columns costs on the wire under ``options`` (``""``
    when exact), e.g. ``halo rows int8: 68 B per row (exact 256 B, 0.27x)``."""
    if not options.compressed:
        return ""
    exact = payload_row_bytes(width, None, element_size)
    parts = []
    for what, precision in (("halo rows", options.precision), ("halo gradients", options.grad_precision)):
        nbytes = payload_row_bytes(width, precision, element_size)
        ratio = f", {nbytes / exact:.2f}x" if exact else ""
        parts.append(f"{what} {precision or 'exact'}: {nbytes} B per row (exact {exact} B{ratio})")
    return f"width {width}: " + "; ".join(parts)


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
