"""``algorithm="auto"``: the SpMM algorithm with the lowest predicted time (layout checks: :mod:`.settings`)."""

from dataclasses import replace

import torch
import torch.distributed as dist

from ..comm.collectives import all_reduce_value
from ..comm.exchanger import HaloExchanger
from ..comm.grid import ProcessGrid
from ..comm.halo_options import HaloOptions
from ..comm.quantize import payload_row_bytes
from ..plan.halo_adj import HaloAdj
from .base import ALGORITHMS, auto_candidates
from .cost import CostModel, Prediction, RankVolumes

#: one row of an ``explain()`` table: (algorithm, predicted seconds, max bytes sent), slowest rank
CostRow = tuple[str, float, int]


def choose_algorithm(adj: HaloAdj, exchanger: HaloExchanger, grid: ProcessGrid | None, width: int,
                     element_size: int, learnable: bool,
                     cost_model: CostModel) -> tuple[str, list[CostRow], list[CostRow], list[CostRow]]:
    """The candidate with the lowest predicted SpMM time (forward + backward), max over ranks.

    Every rank takes the same decision: the per-algorithm predictions are all-reduced with
    ``MAX`` (a collective over the exchanger's group, or the default group under a grid).  With
    ``learnable`` edge weights, algorithms that would refuse them are never candidates, nor
    are those that do not honour the exchanger's options.  An SpMM of ``width`` columns of
    ``element_size`` bytes is priced as it runs
    (:meth:`~pyg_sparsecomm.algorithms.SpMMAlgorithm.predict_as_run`: compressed bytes; with
    ``staleness=1`` the exposed time).  Returns the chosen name, that report, the same with exact
    (uncompressed) rows, and the same bytes exchanged synchronously (equal to the first without
    staleness), so :func:`explain_table` can show both trades.

    Args:
        adj (HaloAdj): the layer's block row (its plan and stored entries are priced).
        exchanger (HaloExchanger): the layer's exchanger (process group and halo options).
        grid (ProcessGrid): the 1.5D grid (``None``: a 1D layout).
        width (int): columns of the SpMM.
        element_size (int): bytes per element of the exchanged rows.
        learnable (bool): whether the adjacency's values need gradients.
        cost_model (CostModel): α, β and γ.
    """
    plan, options = adj.plan, exchanger.options
    volumes = RankVolumes.from_counts(plan.send_counts, plan.recv_counts, plan.part_sizes, plan.rank,
                                      grid.col if grid else 0, grid.replication if grid else 1,
                                      nnz=local_spmm_nnz(adj, grid))
    names = auto_candidates(grid is not None, options)
    if learnable:
        names = [n for n in names if ALGORITHMS[n].differentiates_edge_weights]
    pricings = (options, replace(options, precision=None, grad_precision=None), options.compression_only)
    worst = torch.tensor([[getattr(p, field) for p in _predictions(names, volumes, cost_model, width, element_size,
                                                                   pricing)]
                          for pricing in pricings for field in ("seconds", "bytes_sent")], dtype=torch.float64)
    reduce_group = None if grid is not None else exchanger.group
    worst = all_reduce_value(worst, dist.ReduceOp.MAX, reduce_group, "choose_algorithm")
    report, exact, synchronous = ([(n, float(worst[2 * i, k]), int(worst[2 * i + 1, k])) for k, n in enumerate(names)]
                                  for i in range(3))
    return names[int(torch.argmin(worst[0]))], report, exact, synchronous


def local_spmm_nnz(adj: HaloAdj, grid: ProcessGrid | None) -> int:
    """Stored entries this rank's local SpMM multiplies: all of ``adj`` in 1D; on a grid, those
    whose column is owned by one of the stage blocks (what the 1.5D algorithms keep)."""
    if grid is None:
        return adj.nnz
    plan, n = adj.plan, adj.num_owned
    in_stage = torch.zeros(plan.world_size, dtype=torch.bool)
    in_stage[grid.stage_blocks()] = True
    col = adj.col.cpu()
    halo_owner = plan.halo_owner.cpu()[col[col >= n] - n]
    own = int((col < n).sum()) if bool(in_stage[plan.rank]) else 0
    return own + int(in_stage[halo_owner].sum())


def _predictions(names: list[str], volumes: RankVolumes, cost_model: CostModel, width: int, element_size: int,
                 options: HaloOptions) -> list[Prediction]:
    """Every candidate's prediction as run under ``options`` (ValueError for one without a cost model)."""
    return [ALGORITHMS[n].predict_as_run(volumes, cost_model, width, element_size, options) for n in names]


def explain_table(report: list[CostRow], chosen: str | None, header: str, cost_model: CostModel,
                  exact_report: list[CostRow] | None = None, sync_report: list[CostRow] | None = None) -> str:
    """The text ``explain()`` prints for a choice made by :func:`choose_algorithm`; with an
    ``exact_report`` that differs (compressed halos), also the bytes exact halos would send; with
    a ``sync_report`` (``staleness=1``), the synchronous time beside the exposed one."""
    compressed = exact_report is not None and exact_report != report
    lines = [f"cost model: {cost_model}"]
    if sync_report is not None:
        lines.append(f"staleness=1: exposed ms = max(0, sync - window) of the pipelined exchanges on each rank, "
                     f"window = this layer's local SpMMs of a step, 2 γ nnz f\n"
                     f"({cost_model.describe_gamma()}); an upper bound: the rest of the step hides them too")
    lines.append(header)
    times = f"{'sync ms':>10}{'exposed ms':>12}" if sync_report is not None else f"{'predicted ms':>14}"
    lines.append(f"{'algorithm':<16}{times}{'max bytes sent':>16}"
                 + (f"{'exact bytes':>14}{'exact ms':>10}" if compressed else ""))
    for k, (name, seconds, nbytes) in enumerate(report):
        mark = "  <- chosen" if name == chosen else ""
        times = f"{sync_report[k][1] * 1e3:>10.3f}{seconds * 1e3:>12.3f}" if sync_report is not None \
            else f"{seconds * 1e3:>14.3f}"
        extra = f"{exact_report[k][2]:>14d}{exact_report[k][1] * 1e3:>10.3f}" if compressed else ""  # type: ignore[index]
        lines.append(f"{name:<16}{times}{nbytes:>16d}{extra}{mark}")
    return "\n".join(lines)


def compression_note(width: int, element_size: int, options: HaloOptions) -> str:
    """What a halo row of ``width`` columns costs on the wire under ``options`` (``""`` when
    exact), e.g. ``halo rows int8: 68 B per row (exact 256 B, 0.27x)``; with ``staleness``, a
    second line saying what it trades."""
    stale = ("staleness=1: the same bytes per step, but each step uses the previous step's halo rows and "
             "gradients, and waits only for what the previous step's exchange has not delivered yet")
    if not options.compressed:
        return stale if options.staleness else ""
    exact = payload_row_bytes(width, None, element_size)
    parts = []
    for what, precision in (("halo rows", options.precision), ("halo gradients", options.grad_precision)):
        nbytes = payload_row_bytes(width, precision, element_size)
        ratio = f", {nbytes / exact:.2f}x" if exact else ""
        parts.append(f"{what} {precision or 'exact'}: {nbytes} B per row (exact {exact} B{ratio})")
    line = f"width {width}: " + "; ".join(parts)
    return f"{line}\n{stale}" if options.staleness else line

