"""GCN normalisation of a rank's block row with *global* degrees."""
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from ..adj import HaloAdj
from ..comm.halo import halo_exchange


def distributed_gcn_norm(adj: HaloAdj, edge_weight: Optional[Tensor] = None, improved: bool = False,
                         add_self_loops: bool = True, dtype: torch.dtype = torch.float32,
                         group: Optional[dist.ProcessGroup] = None) -> HaloAdj:
    r"""Returns :math:`\hat D^{-1/2} \hat A \hat D^{-1/2}` restricted to this rank's rows.

    Reproduces ``torch_geometric.nn.conv.gcn_conv.gcn_norm`` (flow
    ``source_to_target``) exactly:

    * self-loops (``add_remaining_self_loops``): an existing self-loop keeps its
      weight, other nodes get ``2`` if ``improved`` else ``1``; with no edge
      weights at all every node gets one loop of weight ``1`` (as PyG does);
    * :math:`\hat d_i = \sum_{j \to i} w_{ji}` is the weighted in-degree, local to
      the owner of ``i``; the source factor :math:`\hat d_j^{-1/2}` of a halo
      column is fetched from its owner with one halo exchange of one column.
    """
    if edge_weight is not None and (edge_weight.dim() != 1 or edge_weight.numel() != adj.nnz):
        raise ValueError(f"edge_weight has shape {list(edge_weight.shape)} but the local adjacency has "
                         f"{adj.nnz} edges (pass weights in local.adj's edge order, e.g. local.edge_weight)")
    row, col = adj.coo()
    n = adj.num_owned
    weight = edge_weight if edge_weight is not None else adj.value
    if weight is not None:
        weight = weight.to(dtype)
    if add_self_loops:
        is_loop = row == col  # owned columns share the row numbering
        loop_index = torch.arange(n, device=row.device)
        if weight is not None:
            loop_weight = torch.full((n,), 2.0 if improved else 1.0, dtype=dtype, device=row.device)
            loop_weight[row[is_loop]] = weight[is_loop]
            weight = torch.cat([weight[~is_loop], loop_weight])
        row = torch.cat([row[~is_loop], loop_index])
        col = torch.cat([col[~is_loop], loop_index])
    if weight is None:
        weight = torch.ones(row.numel(), dtype=dtype, device=row.device)

    deg = torch.zeros(n, dtype=dtype, device=row.device).scatter_add_(0, row, weight)
    deg_inv_sqrt = deg.pow(-0.5)
    deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0.0)
    halo_inv_sqrt = halo_exchange(deg_inv_sqrt.view(-1, 1), adj.plan, group).view(-1)
    col_inv_sqrt = torch.cat([deg_inv_sqrt, halo_inv_sqrt])
    value = col_inv_sqrt[col] * weight * deg_inv_sqrt[row]
    return HaloAdj.from_coo(row, col, value, adj.plan)
