r"""The distributed SpMM of a linear aggregation as ``torch.compile`` traces it (issue 57, item 6).

Eagerly, a layer's SpMM reuses a CSR adjacency it keeps across calls (compared element-wise with
the call's edge index, :class:`~.aggregation.AdjacencyCache`) and multiplies with torch's sparse
kernels: a cache read on the data and sparse layouts, both graph breaks.  Traced, the same product
is the exact halo exchange (one op, :mod:`pyg_sparsecomm.comm.traced_exchange`) and a gather and
``index_add`` over the call's edges, as PyG's own ``propagate`` traces: no cache, every step the same
graph.  Equal to the eager SpMM up to float summation order.  A steady-state call (:mod:`.steady_call`)
multiplies with the CSR adjacency its eager call built instead, as one more op (:func:`local_spmm`,
differentiable in the rows): the eager kernels, forward and backward.
"""
from typing import Any

import torch
from torch import Tensor

from ...comm.op_handles import OpHandles
from ...plan.halo_adj import HaloAdj, csr_mm, spmm, spmm_dtypes


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


_ADJACENCIES = OpHandles("pyg_sparsecomm::local_spmm", "the layer's record")


@torch.compiler.disable(reason="registering an aggregation adjacency happens at an eager call")
def register_adjacency(adj: HaloAdj) -> str:
    """A handle of the aggregation adjacency ``adj`` (values without gradient) for :func:`local_spmm`,
    valid while it lives.

    Args:
        adj (HaloAdj): the block row an eager call multiplied with (kept by weak reference).
    """
    return _ADJACENCIES.register(adj, "adj")


def _adjacency(handle: str) -> HaloAdj:
    return _ADJACENCIES.get(handle, "adjacency")


@torch.library.custom_op("pyg_sparsecomm::local_spmm", mutates_args=())
def _local_spmm_op(x: Tensor, handle: str) -> Tensor:
    with torch.no_grad():  # the op's autograd is registered below
        return spmm(_adjacency(handle), x)


@_local_spmm_op.register_fake
def _(x: Tensor, handle: str) -> Tensor:
    adj = _adjacency(handle)
    result = spmm_dtypes(None if adj.value is None else adj.value.dtype, x.dtype)[1]
    return x.new_empty((adj.num_rows, x.size(1)), dtype=result)


@torch.library.custom_op("pyg_sparsecomm::local_spmm_t", mutates_args=())
def _local_spmm_t_op(grad: Tensor, handle: str, x_dtype: torch.dtype) -> Tensor:
    adj = _adjacency(handle)
    compute = spmm_dtypes(None if adj.value is None else adj.value.dtype, grad.dtype)[0]
    return csr_mm(adj.csr_t(compute), grad.contiguous(), x_dtype)


@_local_spmm_t_op.register_fake
def _(grad: Tensor, handle: str, x_dtype: torch.dtype) -> Tensor:
    return grad.new_empty((_adjacency(handle).num_cols, grad.size(1)), dtype=x_dtype)


def _setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.handle, ctx.x_dtype = inputs[1], inputs[0].dtype


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
    return _local_spmm_t_op(grad, ctx.handle, ctx.x_dtype), None


_local_spmm_op.register_autograd(_backward, setup_context=_setup)


def local_spmm(x: Tensor, handle: str) -> Tensor:
    """``adj @ x`` by the adjacency ``handle`` (:func:`register_adjacency`), as one op of a traced graph:
    the eager call's CSR product (:func:`~pyg_sparsecomm.plan.halo_adj.spmm`), backward the product with
    its kept transpose.

    Args:
        x (Tensor): the rows of the adjacency's columns, ``[owned | halo]``.
        handle (str): the adjacency's handle.

    Shapes:
        - **input:** ``[num_cols, F]``
        - **output:** ``[num_rows, F]``
    """
    return _local_spmm_op(x, handle)
