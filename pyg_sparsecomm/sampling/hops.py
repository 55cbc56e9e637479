"""Dropping a mini-batch's outermost hop: what the homogeneous and the relation adjacencies share.

A batch's rows are ordered by hop and its edges by the hop they were sampled at (their targets'
hop plus one), so the rows and edges a layer keeps are prefixes; the halo and send entries kept
are those some kept edge reads (each knows the first hop an edge read it at).
"""
import torch
from torch import Tensor

from ..plan.homogeneous import RankPlan


def trim_plan(plan: RankPlan, rows: int, halo_hop: Tensor, send_hop: Tensor, part_sampled_nodes: Tensor,
              hops: int) -> tuple[RankPlan, Tensor, Tensor]:
    """``plan`` of a batch's rows kept to its first ``rows`` (hops ``0 .. hops``) and to the halo and
    send entries some edge of hops ``1 .. hops`` reads; also the kept halo and send entries' masks."""
    halo_keep, send_keep = halo_hop <= hops, send_hop <= hops
    send_dst = torch.repeat_interleave(torch.arange(plan.world_size, device=plan.send_index.device),
                                       torch.tensor(plan.send_counts, device=plan.send_index.device))
    kept_owner, kept_dst = plan.halo_owner[halo_keep], send_dst[send_keep]
    part = part_sampled_nodes[:, :hops + 1].sum(1)
    trimmed = RankPlan(
        rank=plan.rank, world_size=plan.world_size, num_nodes=plan.num_nodes, n_id=plan.n_id[:rows],
        halo_n_id=plan.halo_n_id[halo_keep], halo_owner=kept_owner,
        halo_remote_index=plan.halo_remote_index[halo_keep], send_index=plan.send_index[send_keep],
        send_counts=torch.bincount(kept_dst, minlength=plan.world_size).tolist(),
        recv_counts=torch.bincount(kept_owner, minlength=plan.world_size).tolist(),
        part_sizes=part.tolist(), minibatch=True)
    return trimmed, halo_keep, send_keep


def trim_columns(col: Tensor, num_owned: int, rows: int, halo_keep: Tensor) -> Tensor:
    """Columns ``[owned | halo]`` of a plan with ``num_owned`` rows renumbered for the plan kept to
    ``rows`` rows and the halo entries ``halo_keep``."""
    col = col.clone()
    halo_pos = torch.cumsum(halo_keep.long(), 0) - 1
    is_halo = col >= num_owned
    col[is_halo] = rows + halo_pos[col[is_halo] - num_owned]
    return col


def check_hop_order(col: Tensor, num_owned: int, rows: int, rowptr: Tensor, inner_rows: int, nnz: int) -> None:
    """The kept edges (columns ``col`` before renumbering) read kept source rows (``< rows`` of the
    ``num_owned``) only and are the CSR's prefix of the first ``inner_rows`` targets."""
    if bool(((col < num_owned) & (col >= rows)).any()) or int(rowptr[inner_rows]) != nnz:
        raise RuntimeError("batch rows are not ordered by hop; rebuild the batch with the package's loader")
