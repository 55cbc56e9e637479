r"""PyG's degree normalisations (``gcn_norm``, ``get_laplacian``) with *global* degrees.

Inside a distributed layer the edge index is local: targets are owned rows, sources
``[owned | halo]`` columns (see :class:`~pyg_sparsecomm.nn.runtime.port.Shard`).  PyG computes
:math:`\hat d^{-1/2}_j` of every source from a scatter over the rank's own edges, which
neither covers halo sources nor, for ``get_laplacian``'s source-side (out-)degree, owned
sources whose out-edges live on other ranks.  The versions here compute the same
quantities exactly:

* in-degrees (``gcn_norm``): local to the target's owner; halo values fetched with one
  one-column exact :meth:`~pyg_sparsecomm.comm.exchanger.HaloExchanger.exchange`;
* out-degrees (``get_laplacian``): per-column partial sums folded into the owners
  (:meth:`~pyg_sparsecomm.comm.exchanger.HaloExchanger.reduce`), then fetched for the halo.

PyG's modules are left alone: :mod:`.normalisation` gives these versions to each
distributed layer through its rule, so a plain PyG layer in the same process is untouched.
"""
import torch
from torch import Tensor
from torch_geometric.utils import add_remaining_self_loops, add_self_loops, remove_self_loops, scatter

from .port import Shard


def _inv_sqrt(deg: Tensor) -> Tensor:
    out = deg.pow(-0.5)
    return out.masked_fill(out == float("inf"), 0.0)


def _with_halo(owned: Tensor, context: Shard) -> Tensor:
    """``[owned | halo]`` values of a per-node quantity known on the owners."""
    return torch.cat([owned, context.halo(owned.view(-1, 1)).view(-1)])


def _check_num_nodes(name: str, num_nodes: int | None, context: Shard) -> int:
    if num_nodes is not None and num_nodes != context.num_owned:
        raise ValueError(f"{name} was called with num_nodes={num_nodes} inside a distributed layer whose "
                         f"shard owns {context.num_owned} rows: the layer passes a node count other than "
                         f"x.size(0), which distribute() cannot map to the partition")
    return context.num_owned


def gcn_norm(context: Shard, edge_index: Tensor, edge_weight: Tensor | None = None,
             num_nodes: int | None = None, improved: bool = False, add_self_loops: bool = True,
             flow: str = "source_to_target", dtype: torch.dtype | None = None):
    r""":math:`w'_{ji} = \hat d_j^{-1/2} w_{ji} \hat d_i^{-1/2}` over a local edge index, with
    :math:`\hat d` the global weighted in-degree (PyG's ``gcn_norm``, ``source_to_target``)."""
    edge_index, edge_weight, deg_inv_sqrt = _owned_degrees(context, edge_index, edge_weight, improved, add_self_loops,
                                                           flow, dtype)  # (the flow checked before the node count)
    _check_num_nodes("gcn_norm", num_nodes, context)
    ext = _with_halo(deg_inv_sqrt, context)
    return edge_index, ext[edge_index[0]] * edge_weight * deg_inv_sqrt[edge_index[1]]


def _owned_degrees(context: Shard, edge_index: Tensor, edge_weight: Tensor | None, improved: bool,
                   add_self_loops: bool, flow: str, dtype: torch.dtype | None) -> tuple[Tensor, Tensor, Tensor]:
    r"""``(edge_index, weight, d)``: the local graph with PyG's self-loops, its weights (ones if none)
    and :math:`\hat d^{-1/2}` of the owned rows, the weighted in-degree (every in-edge of a row is its owner's)."""
    if flow != "source_to_target":
        raise ValueError("gcn_norm with flow='target_to_source' cannot run distributed")
    n = context.num_owned
    if add_self_loops:
        edge_index, edge_weight = _with_self_loops(context.adj.given_as, edge_index, edge_weight,
                                                   2.0 if improved else 1.0, n)
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    return edge_index, edge_weight, _inv_sqrt(scatter(edge_weight, edge_index[1], dim=0, dim_size=n, reduce="sum"))


def gcn_norm_folded(context: Shard, edge_index: Tensor, edge_weight: Tensor, improved: bool = False,
                    add_self_loops: bool = True, flow: str = "source_to_target") -> tuple[Tensor, Tensor, Tensor]:
    r""":func:`gcn_norm` of a weighted graph without its degree exchange:
    ``(edge_index, w', s)`` with :math:`w'_{ji} = \hat d_i^{-1/2} w_{ji}\, \hat d_j^{-1/2}` for owned
    sources and :math:`w'_{ji} = \hat d_i^{-1/2} w_{ji}` for halo sources, and :math:`s = \hat d^{-1/2}`
    of the owned rows, which scales the rows their owner sends: the aggregation
    :math:`\sum_j w'_{ji} [x_{\mathrm{owned}} \mid \mathrm{halo}(s \odot x)]_j` is :func:`gcn_norm`'s
    :math:`\sum_j \hat d_j^{-1/2} w_{ji} \hat d_i^{-1/2} x_j`, every degree computed by its owner.

    Args:
        context (Shard): the call's shard.
        edge_index (Tensor): the local graph (sources in ``[owned | halo]`` columns).
        edge_weight (Tensor): its weights.
        improved (bool, optional): self-loops of weight 2. (default: ``False``)
        add_self_loops (bool, optional): add them as :func:`gcn_norm` does. (default: ``True``)
        flow (str, optional): ``"source_to_target"`` only, as :func:`gcn_norm`. (default: ``"source_to_target"``)

    Shapes:
        - **input:** ``edge_index``: ``[2, E]``, ``edge_weight``: ``[E]``
        - **output:** ``[2, E']``, ``[E']``, ``[num_owned]``
    """
    edge_index, edge_weight, deg_inv_sqrt = _owned_degrees(context, edge_index, edge_weight, improved, add_self_loops,
                                                           flow, None)
    local = torch.cat([deg_inv_sqrt, deg_inv_sqrt.new_ones(context.num_cols - context.num_owned)])  # halo sources: 1
    return edge_index, local[edge_index[0]] * edge_weight * deg_inv_sqrt[edge_index[1]], deg_inv_sqrt


def _with_self_loops(form: str, edge_index: Tensor, edge_weight: Tensor | None, fill: float, n: int):
    """Self-loops as PyG's ``gcn_norm`` adds them to the form the script gave the graph in
    (:func:`~pyg_sparsecomm.graph.inputs.graph_form`; duplicate entries sum, as a coalesced sparse
    tensor's do)."""
    if form == "torch.sparse":  # add_self_loops: a loop on every node, on top of an existing one
        return add_self_loops(edge_index, edge_weight, fill, n)
    if form == "SparseTensor":  # fill_diag: the diagonal becomes fill
        edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
        return add_self_loops(edge_index, edge_weight, fill, n)
    return add_remaining_self_loops(edge_index, edge_weight, fill, n)


def get_laplacian(context: Shard, edge_index: Tensor, edge_weight: Tensor | None = None,
                  normalization: str | None = None, dtype: torch.dtype | None = None,
                  num_nodes: int | None = None):
    r"""PyG's ``get_laplacian`` over a local edge index; :math:`d_j = \sum_i w_{ji}` is the global
    (source-side) degree, summed over the ranks that own the targets."""
    if normalization is not None and normalization not in ("sym", "rw"):
        raise ValueError(f"get_laplacian: invalid normalization {normalization!r}")
    n = _check_num_nodes("get_laplacian", num_nodes, context)
    # ChebConv's lambda_max adapter and ChebConv itself ask for the same Laplacian in one call
    # (the entry keeps its inputs alive, so their ids cannot be reused within the call)
    key = ("get_laplacian", id(edge_index), id(edge_weight), normalization, dtype)
    if key not in context.memo:
        context.memo[key] = (edge_index, edge_weight,
                             _laplacian(context, edge_index, edge_weight, normalization, dtype, n))
    return context.memo[key][2]  # type: ignore[index]  # memo values are per-key tuples


def _laplacian(context: Shard, edge_index: Tensor, edge_weight: Tensor | None,
               normalization: str | None, dtype: torch.dtype | None, n: int):
    edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    row, col = edge_index[0], edge_index[1]
    partial = scatter(edge_weight, row, 0, dim_size=context.num_cols, reduce="sum")
    deg = context.fold(partial.view(-1, 1)).view(-1)
    if normalization is None:  # L = D - A
        edge_index, _ = add_self_loops(edge_index, num_nodes=n)
        return edge_index, torch.cat([-edge_weight, deg], dim=0)
    if normalization == "sym":  # L = I - D^{-1/2} A D^{-1/2}
        ext = _with_halo(_inv_sqrt(deg), context)
        edge_weight = ext[row] * edge_weight * ext[col]
    else:  # L = I - D^{-1} A
        inv = 1.0 / deg
        edge_weight = _with_halo(inv.masked_fill(inv == float("inf"), 0.0), context)[row] * edge_weight
    return add_self_loops(edge_index, -edge_weight, fill_value=1.0, num_nodes=n)


def scaled_laplacian(context: Shard, edge_index: Tensor, edge_weight: Tensor | None,
                     normalization: str | None, lambda_max: Tensor | float, dtype: torch.dtype | None,
                     batch: Tensor | None = None):
    r"""``ChebConv.__norm__`` over a local edge index: :math:`\frac{2 L}{\lambda_{\max}} - I` with
    :math:`L` from :func:`get_laplacian` (global degrees) and ``lambda_max`` as given (the
    ``ChebConv`` adapter passes the maximum over all ranks); the steps after the Laplacian are PyG's."""
    edge_index, edge_weight = get_laplacian(context, edge_index, edge_weight, normalization, dtype)
    if not isinstance(lambda_max, Tensor):
        lambda_max = torch.tensor(lambda_max, dtype=dtype, device=edge_index.device)
    if batch is not None and lambda_max.numel() > 1:
        lambda_max = lambda_max[batch[edge_index[0]]]
    edge_weight = (2.0 * edge_weight) / lambda_max
    edge_weight.masked_fill_(edge_weight == float("inf"), 0)
    loop_mask = edge_index[0] == edge_index[1]
    edge_weight[loop_mask] -= 1
    return edge_index, edge_weight
