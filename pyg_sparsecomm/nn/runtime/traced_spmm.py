r"""The distributed SpMM of a linear aggregation as ``torch.compile`` traces it (issue 57, item 6).

Eagerly, a layer's SpMM reuses a CSR adjacency it keeps across calls (compared element-wise with
the call's edge index, :class:`~.aggregation.AdjacencyCache`) and multiplies with torch's sparse
kernels: a cache read on the data and sparse layouts, both graph breaks.  Traced, the same product
is the exact halo exchange (one op, :mod:`pyg_sparsecomm.comm.traced_exchange`) and a gather and
``index_add`` over the call's edges, as PyG's own ``propagate`` traces: no cache, every step the same
graph.  Equal to the eager SpMM up to float summation order.
"""
import torch
from torch import Tensor


def traced_aggregation(halo_of, num_owned: int, edge_index: Tensor, weight: Tensor | None, aggr: str,
                       rows: Tensor) -> Tensor:
    r""":math:`\mathrm{out}_i = \sum_{(j, i)} w_{ji} [\mathrm{rows} \mid \mathrm{halo}]_j` over the
    local ``edge_index`` (sources in ``[owned | halo]`` columns), ``aggr`` ``"add"``/``"sum"`` or
    ``"mean"`` (divided by the target's in-degree).

    Args:
        halo_of (callable): ``rows -> halo rows`` (the shard's exact exchange).
        num_owned (int): this rank's target rows.
        edge_index (Tensor): the local ``[2, E]`` edge index.
        weight (Tensor or None): per-edge weights (``None``: ones).
        aggr (str): the aggregation.
        rows (Tensor): the owned rows.

    Shapes:
        - **input:** ``rows``: ``[num_owned, F]``
        - **output:** ``[num_owned, F]``
    """
    full = torch.cat([rows, halo_of(rows)], dim=0)
    src, dst = edge_index[0], edge_index[1]
    dtype = rows.dtype if weight is None or not weight.is_floating_point() else \
        torch.promote_types(weight.dtype, rows.dtype)
    messages = full.index_select(0, src).to(dtype)
    if weight is not None:
        messages = messages * weight.to(dtype).view(-1, 1)
    out = messages.new_zeros((num_owned, messages.size(1))).index_add(0, dst, messages)
    if aggr == "mean":
        count = torch.zeros(num_owned, dtype=dtype, device=rows.device).index_add(
            0, dst, torch.ones_like(dst, dtype=dtype))
        out = out / count.clamp(min=1).view(-1, 1)
    return out
