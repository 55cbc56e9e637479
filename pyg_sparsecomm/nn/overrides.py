r"""The overrides of a distributed layer: ``propagate`` where the aggregation is an SpMM, and
``edge_updater``.

A hook cannot replace what PyG's ``propagate`` computes (nor run before the SpMM path: the
graph a layer's normalisation substitutes, :mod:`.layer_normalisation`, is put in here), so a layer
whose rule aggregates by
``"spmm"`` or ``"attention"`` (:mod:`.layer_rules`) gets an instance-level ``propagate``
(:class:`InstanceMethod`, as PyG itself shadows ``propagate`` per instance for explanations) that
runs, on a shard, :math:`\mathrm{out} = A x` as one distributed SpMM by the ``algorithm`` of
``distribute`` (:mod:`.linear_aggregation`), or one CSR SpMM per head of :math:`\alpha`.  Everything
else goes to PyG's own ``propagate``, whose pre-hook exchanges the source tensors
(:mod:`.source_exchange`).  PyG's ``explain``/``decomposed_layers`` setters assign
``conv.propagate``; the layer's forward pre-hook installs the override again before every call
(:func:`install_overrides`).

``edge_updater`` is overridden because no hook can do its job: PyG's generated ``edge_updater``
runs its pre-hooks after gathering ``*_j``, so the override completes the sources first
(:func:`~.source_exchange.exchange_edge_update_sources`).  Both overrides run eagerly
(``torch.compiler.disable``): PyG's generated code skips its hooks while ``torch.compile`` traces
it, and the exchanges are collectives.

Under ``torch.compile`` the whole call of a distributed layer runs eagerly, as one graph break
(:class:`EagerCall`, ``conv._compiled_call_impl``): its hooks, checks, exchanges and SpMM are
Python state and collectives dynamo cannot trace, and what it could trace between them (a
``Linear``, a bias add) compiled to graphs of one op each whose AOTAutograd wrappers cost more
than they saved (``benchmarks/RESULTS.md``, ``compile_vs_eager``).  The model's code around its
layers (activations, dropout, norms, residuals) still compiles.
"""
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ..algorithms import SparseAware1D, SpMMAlgorithm, make_algorithm
from ..algorithms.choice import choose_algorithm
from ..compat import compiled_call, module_call, pyg_edge_updater, pyg_propagate, set_compiled_call
from ..plan.halo_adj import spmm
from . import shard_context
from .adjacency_values import torch_sparse_weights
from .layer_normalisation import propagated_graph
from .linear_aggregation import (
    aggregation_weights,
    edge_weighted_arg,
    from_node_rows,
    linear_weight,
    linear_weight_arg,
    node_rows,
)
from .shared_adjacency import shared_aggregation
from .source_exchange import check_call, exchange_edge_update_sources, running, with_halo

if TYPE_CHECKING:
    from .distributed_layer import LayerState


class InstanceMethod:
    """``conv.propagate`` / ``conv.edge_updater`` of a distributed layer: a picklable bound call."""

    def __init__(self, conv: MessagePassing, function) -> None:
        self.conv, self.function = conv, function

    @torch.compiler.disable
    def __call__(self, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
        return self.function(self.conv, edge_index, size, **kwargs)


class EagerCall:
    """``conv._compiled_call_impl`` of a distributed layer: what ``torch.nn.Module.__call__`` runs
    in place of ``conv._call_impl`` when it is set (``Module.compile()`` sets it the same way), here
    the same call with dynamo disabled, so that ``torch.compile`` of a model breaks its graph once
    per distributed layer call and runs the layer eagerly (see the module doc).  Eager calls pay one
    switch of the frame evaluation hook (microseconds)."""

    def __init__(self, conv: MessagePassing) -> None:
        self.conv = conv

    @torch.compiler.disable(reason="a distributed layer runs eagerly: its hooks hold per-call Python state and "
                                   "collectives (halo exchanges, first-use checks)")
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return module_call(self.conv)(*args, **kwargs)


def install_overrides(conv: MessagePassing) -> None:
    """Sets ``conv.propagate`` and ``conv.edge_updater`` to the distributed versions unless they
    are (PyG's setters replace ``propagate``; idempotent), and :class:`EagerCall` unless a call
    implementation is set (the user's ``conv.compile()``).  ``Module.__getstate__`` drops it from
    copies (``copy.deepcopy``, pickling), whose first call sets it again: a copy compiled before
    any call traces into its layers as without it (the same results, more and smaller graphs)."""
    for name, function in (("propagate", propagate), ("edge_updater", edge_updater)):
        current = conv.__dict__.get(name)
        if not (isinstance(current, InstanceMethod) and current.conv is conv):
            setattr(conv, name, InstanceMethod(conv, function))
    if compiled_call(conv) is None:
        set_compiled_call(conv, EagerCall(conv))


def propagate(conv: MessagePassing, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
    """The distributed SpMM of an ``"spmm"``/``"attention"`` rule on a shard, else PyG's ``propagate``
    (its pre-hook completes the source tensors on a shard).  On a shard the graph is first replaced
    by the call's normalised one where the layer's normalisation arranged it (the ``"propagate"`` and
    ``"placeholder"`` deliveries of :mod:`.layer_normalisation`: a hook would run too late, after
    the SpMM path has taken the graph).

    Args:
        conv (MessagePassing): the layer.
        edge_index (Tensor): the local edge index (on a shard) or the caller's graph.
        size (tuple, optional): as PyG's. (default: ``None``)
        **kwargs: the ``propagate`` arguments.
    """
    state: LayerState = conv._sparsecomm
    context = running(conv)
    if context is not None:
        edge_index, kwargs = propagated_graph(conv, edge_index, kwargs)  # the call's normalised graph, if any
        weight_arg = linear_weight_arg(conv)
        if weight_arg is not None and isinstance(kwargs.get("x"), (Tensor, tuple, list)):
            check_call(conv, edge_index, size, context)
            return _linear_propagate(conv, state, context, edge_index, kwargs, weight_arg)
        alpha_arg = edge_weighted_arg(conv)
        if alpha_arg is not None and isinstance(kwargs.get(alpha_arg), Tensor):
            return _edge_weighted_propagate(conv, state, context, edge_index, size, kwargs, alpha_arg)
        if state.applied_first:  # its Linear was replaced by its bias: only the SpMM path applies it first
            raise RuntimeError(f"{type(conv).__name__} propagated without 'x'; distribute() expected the linear "
                               f"aggregation of its {state.applied_first}")
    return pyg_propagate(conv)(edge_index, size=size, **kwargs)


def edge_updater(conv: MessagePassing, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
    """PyG's ``edge_updater``; on a shard over ``size = (owned + halo, owned)`` with the source
    tensors of ``edge_update`` completed first (:func:`~.source_exchange.exchange_edge_update_sources`).

    Args:
        conv (MessagePassing): the layer.
        edge_index (Tensor): the local edge index (on a shard) or the caller's graph.
        size (tuple, optional): as PyG's. (default: ``None``)
        **kwargs: the ``edge_updater`` arguments.
    """
    context = running(conv)
    if context is not None:
        edge_index, size, kwargs = exchange_edge_update_sources(conv, edge_index, size, kwargs, context)
    return pyg_edge_updater(conv)(edge_index, size=size, **kwargs)


def _linear_propagate(conv: MessagePassing, state: "LayerState", context: shard_context.ShardContext,
                      edge_index: Tensor, kwargs: dict[str, Any], weight_arg: str) -> Tensor:
    """``out = A x`` by the distributed SpMM algorithm, ``A[i, j]`` the message weights."""
    x = kwargs["x"]
    src = x[0] if isinstance(x, (tuple, list)) else x
    if src.size(conv.node_dim) != context.num_owned:
        raise ValueError(f"{type(conv).__name__}: x has {src.size(conv.node_dim)} rows in dimension "
                         f"{conv.node_dim}, but this rank owns {context.num_owned} rows")
    rows, moved = node_rows(src, conv.node_dim)
    depends_on: tuple[Tensor, ...] = ()
    if state.applied_first:  # (A x) W^T = A (x W^T): exchange the narrower rows
        if src.dim() != 2:
            raise ValueError(f"{type(conv).__name__}: expected 2-D node features, got shape {list(src.shape)}")
        lin_weight = linear_weight(conv._modules[state.applied_first], "linear")
        rows, depends_on = F.linear(rows, lin_weight), (lin_weight,)
        moved = tuple(rows.shape)
    weight = kwargs.get(weight_arg) if weight_arg else torch_sparse_weights(conv, edge_index, context.adj)
    state.exchanged_width = (rows.size(1), rows.element_size())
    spmm = _spmm(conv, state, context, edge_index, weight, rows)
    rows = rows.contiguous()
    if type(spmm) is SparseAware1D and not rows.requires_grad:  # e.g. the input features: fetched once
        out = spmm.multiply(rows, state.static_halo.fetch("x", src, rows, context, depends_on))
    else:
        out = spmm(rows)
    return from_node_rows(out, moved, conv.node_dim)


def _spmm(conv: MessagePassing, state: "LayerState", context: shard_context.ShardContext, edge_index: Tensor,
          weight: Tensor | None, rows: Tensor) -> SpMMAlgorithm:
    """The SpMM algorithm of this call (``algorithm="auto"`` chooses at the first); a ``cached=True``
    layer keeps it while its cached adjacency stays (:class:`~.linear_aggregation.CachedSpMM`)."""
    cached = bool(getattr(conv, "cached", False))
    if cached and state.chosen_algorithm is not None:
        kept = state.cached_spmm.get(edge_index, weight, context.adj, rows.dtype, state.chosen_algorithm)
        if kept is not None:
            return kept
    adj = (shared_aggregation(context.adj, edge_index, weight, conv.aggr, rows.dtype)  # a cached normalisation
           or state.adjacency.aggregation(edge_index, weight, conv.aggr, context.adj, rows.dtype))
    settings = state.settings
    grid = settings.grid()
    exchanger = state.exchanger(context)
    if state.chosen_algorithm is None:
        learnable = adj.value is not None and adj.value.requires_grad
        # priced on the shard's block row, as CommStats and predict_layouts price it
        state.chosen_algorithm, state.cost_report, state.exact_cost_report, state.sync_cost_report = \
            choose_algorithm(context.adj, exchanger, grid, rows.size(1), rows.element_size(), learnable,
                             settings.cost_model)
    spmm = make_algorithm(state.chosen_algorithm, adj, exchanger, grid)
    if cached:
        state.cached_spmm.keep(spmm, edge_index, weight, context.adj, rows.dtype, state.chosen_algorithm)
    return spmm


def _edge_weighted_propagate(conv: MessagePassing, state: "LayerState", context: shard_context.ShardContext,
                             edge_index: Tensor, size: Any, kwargs: dict[str, Any], alpha_arg: str) -> Tensor:
    r"""``out[:, h] = A_h x[:, h]`` with ``A_h[i, j] = alpha[e, h]`` over ``[owned | halo]`` rows of
    ``x`` (exchanged as for any ``x_j``): one CSR SpMM per head."""
    check_call(conv, edge_index, size, context)
    x = with_halo(conv, kwargs, ["x"], context, "propagate")["x"][0]
    alpha = kwargs[alpha_arg]
    heads = x.size(-2)
    if x.dim() != 3 or conv.node_dim not in (0, -3) or alpha.shape != (edge_index.size(1), heads):
        raise ValueError(f"{type(conv).__name__}: expected x of shape [N, heads, C] and {alpha_arg} of shape "
                         f"[E, heads], got {list(x.shape)} and {list(alpha.shape)}")
    value = aggregation_weights(edge_index, alpha, conv.aggr, context.num_owned, x.dtype)
    assert value is not None  # alpha is given
    outs = [spmm(state.adjacency.adjacency(edge_index, value[:, h], context.adj), x[:, h].contiguous())
            for h in range(heads)]
    return torch.stack(outs, dim=1)
