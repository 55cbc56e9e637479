r"""One PyG ``MessagePassing`` layer, run on a rank's shard.

:func:`attach` leaves the layer's class, parameters and code alone and adds, through
PyG's and torch's own extension points:

1. a forward pre-hook that swaps the shard's :class:`~pyg_sparsecomm.adj.HaloAdj` for a
   local ``edge_index`` (sources in ``[owned | halo]`` columns, targets the owned rows, in
   ``adj``'s edge order, so ``local.edge_weight``/``local.edge_attr`` line up; ``adj``'s values
   passed as PyG's ``adj_t`` path uses them, :mod:`.adjacency_values`) and makes the shard
   current for the degree normalisations (:mod:`.degree_norm`); a forward hook that always
   runs removes it again.  The first call on a shard checks all ranks at once (:mod:`.first_use`);
2. an instance-level ``propagate`` (as PyG itself installs for explanations) that, for
   each tensor the message reads at sources (``x_j``, ``alpha_j``, ...), appends the halo
   rows fetched in one all-to-allv and propagates over ``size = (owned + halo, owned)``.
   The layer's own transform has run by then, so the exchange carries the transformed
   width (GAT: ``heads + heads * out`` once, in its ``edge_updater``, see :mod:`.call_halos`;
   a source tensor already exchanged in the call reuses its halo).  Where the
   message is linear (:mod:`.linear_aggregation`) the propagation is one distributed
   SpMM instead, through the package's algorithms; where it is :math:`\alpha_{ji} x_j`
   per head (GAT), one local CSR SpMM per head over the exchanged rows;
3. the same for ``edge_updater``.

Every layer whose forward reaches the graph only through these is exact: a target's
messages, softmaxes and aggregations see exactly its in-edges, which its owner holds.

Under ``torch.compile`` the hooks and the instance-level ``propagate``/``edge_updater`` run
eagerly (``torch.compiler.disable``): they hold the exchanges (collectives over per-shard plans,
non-blocking on some algorithms) and torch's CSR SpMM, and dynamo traces neither sparse
tensors nor asynchronous collectives.  The layer's own dense code (its ``Linear``, attention
coefficients, bias, activations between layers) compiles; each of these calls is one graph
break, at the same place in every step, so a model compiles once.
"""
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ..adj import HaloAdj, spmm
from ..algorithms import SparseAware1D, make_algorithm
from ..algorithms.choice import CostRow, choose_algorithm, exchange_group
from ..comm.group import world_size
from ..comm.halo_options import EXACT, ExchangeSlots, HaloOptions
from ..comm.wire import halo_exchange_many
from ..cost import CostModel
from ..grid import process_grid
from ..loader.sampled_adj import SampledAdj
from . import shard_context
from .adjacency_values import with_adjacency_values
from .call_halos import CallHalos, attach_recorder
from .first_use import CheckedPlan, check_call
from .layer_adapters import adapt, forward_signature
from .linear_aggregation import (
    AdjacencyCache,
    AppliedLinear,
    aggregation_weights,
    edge_weighted_arg,
    from_node_rows,
    linear_inputs,
    linear_weight,
    linear_weight_arg,
    narrowing_input_linear,
    narrowing_linear,
    node_rows,
)


@dataclass
class DistributedSettings:
    """How :func:`~pyg_sparsecomm.distribute` runs a model's layers (see its arguments)."""
    algorithm: str = "1d"
    group: dist.ProcessGroup | None = None
    replication: int = 1
    cost_model: CostModel = field(default_factory=CostModel)
    halo_options: HaloOptions = EXACT


class LayerState:
    """What one distributed layer keeps between calls: settings, PyG's own ``propagate`` /
    ``edge_updater``, whether each active call entered a shard, caches of the linear path."""

    def __init__(self, conv: MessagePassing, settings: DistributedSettings) -> None:
        self.settings = settings
        self.entered: list[bool] = []
        self.applied_first: str | None = None  # post-aggregation Linear moved before the exchange
        self.swapped: list[tuple[torch.nn.Module, str]] = []  # modules replaced by AppliedLinear this call
        self.adjacency = AdjacencyCache()
        self.static_halo = shard_context.StaticHalo()
        self.call_halos = CallHalos()  # halos already fetched in this call (see call_halos)
        self.exchange_slots = ExchangeSlots()  # state of stateful (stale) exchanges across calls
        self.chosen_algorithm: str | None = None if settings.algorithm == "auto" else settings.algorithm
        self.cost_report: list[CostRow] = []
        self.exact_cost_report: list[CostRow] = []  # the same priced with exact halos
        self.sync_cost_report: list[CostRow] = []  # the same bytes exchanged synchronously
        #: (columns, element size) of the last exchanged rows, for summary()'s compressed-bytes line
        self.exchanged_width: tuple[int, int] | None = None
        self.checked_plan = CheckedPlan()  # the plan the first-use check passed on (see first_use)
        self.cached_key: tuple | None = None  # the shard a cached=True layer filled its cache on

    @property
    def active(self) -> bool:
        return bool(self.entered) and self.entered[-1]


def attach(conv: MessagePassing, settings: DistributedSettings) -> None:
    """Makes ``conv`` run distributed when called with a ``HaloAdj`` (idempotent)."""
    if hasattr(conv, "_sparsecomm"):
        conv._sparsecomm.settings = settings
        return
    conv._sparsecomm = LayerState(conv, settings)
    conv.register_forward_pre_hook(_enter, with_kwargs=True)
    conv.register_forward_hook(_leave, always_call=True)
    conv.propagate = _InstanceMethod(conv, _propagate)
    conv.edge_updater = _InstanceMethod(conv, _edge_updater)
    attach_recorder(conv)


class _InstanceMethod:
    """``conv.propagate`` / ``conv.edge_updater`` of a distributed layer: a picklable bound call
    (PyG shadows ``propagate`` per instance the same way for explanations)."""

    def __init__(self, conv: MessagePassing, function) -> None:
        self.conv, self.function = conv, function

    @torch.compiler.disable
    def __call__(self, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
        return self.function(self.conv, edge_index, size, **kwargs)


def _pyg(conv: MessagePassing, name: str):
    """PyG's own (class-level, possibly template-generated) ``propagate``/``edge_updater``."""
    return getattr(type(conv), name).__get__(conv)


def _is_graph_argument(value: Any) -> bool:
    if isinstance(value, Tensor):
        return value.layout != torch.strided or (value.dim() == 2 and value.size(0) == 2
                                                 and not value.is_floating_point())
    return type(value).__name__ == "SparseTensor"


@torch.compiler.disable
def _enter(conv: MessagePassing, args: tuple, kwargs: dict):
    state: LayerState = conv._sparsecomm
    settings = state.settings
    adj_at = [k for k, v in list(enumerate(args)) + list(kwargs.items()) if isinstance(v, HaloAdj)]
    outer = shard_context.current()
    if not adj_at:
        if outer is not None:  # a layer called by a distributed layer (e.g. AntiSymmetricConv's phi)
            state.entered.append(True)
            state.exchange_slots.begin_call(conv.training)
            state.call_halos.begin()
            shard_context.push(outer)
            if any(v is outer.edge_index for v in list(args) + list(kwargs.values())):
                return with_adjacency_values(conv, args, kwargs, outer.adj.value)
            return None
        if world_size(settings.group) > 1 and any(_is_graph_argument(v) for v in list(args) + list(kwargs.values())):
            raise ValueError(f"{type(conv).__name__} got a plain edge_index or sparse adjacency under a world size "
                             f"of {world_size(settings.group)}: partition the graph with SparsityAwarePartitioner("
                             f"num_parts=world_size), call local = shard(data) and pass local.adj")
        state.entered.append(False)
        return None
    if len(adj_at) > 1:
        raise ValueError(f"{type(conv).__name__} got {len(adj_at)} HaloAdj arguments; distribute() runs layers "
                         f"over one adjacency")
    adj: HaloAdj = args[adj_at[0]] if isinstance(adj_at[0], int) else kwargs[adj_at[0]]
    # checked on every rank at once (a new shard: one all-gather; else two flags agreed on the host)
    one_d = settings.replication == 1  # 1.5D block rows: exchange_group checks them
    state.cached_key = check_call(conv, args, kwargs, adj, state.checked_plan, state.cached_key, settings.group, one_d)
    check_not_cached(conv, adj)
    check_full_graph(settings.halo_options, adj)
    grid = process_grid(settings.replication) if settings.replication > 1 else None
    group = exchange_group(adj, grid, settings.group)
    context = shard_context.ShardContext(adj, group, adj.edge_index())
    shard_context.push(context)
    state.entered.append(True)
    state.exchange_slots.begin_call(conv.training)
    state.call_halos.begin()
    if isinstance(adj_at[0], int):
        args = args[:adj_at[0]] + (context.edge_index,) + args[adj_at[0] + 1:]
    else:
        kwargs = {**kwargs, adj_at[0]: context.edge_index}
    args, kwargs = with_adjacency_values(conv, args, kwargs, adj.value)
    state.applied_first = narrowing_linear(conv)
    if state.applied_first:
        _apply_first(state, conv, state.applied_first)
    first = narrowing_input_linear(conv)
    if first is not None:  # GINConv: nn's first Linear applied to x, so the aggregation runs narrower
        weight = linear_weight(*first)
        _apply_first(state, *first)
        bound = forward_signature(type(conv)).bind(conv, *args, **kwargs)
        bound.arguments["x"] = linear_inputs(bound.arguments["x"], weight)
        args, kwargs = bound.args[1:], bound.kwargs
    return adapt(conv, args, kwargs, context)


def _apply_first(state: LayerState, container: torch.nn.Module, key: str) -> None:
    """Replaces the Linear ``container[key]`` by :class:`AppliedLinear` (its bias) for this call."""
    linear = container._modules[key]
    assert linear is not None
    container._modules[key] = AppliedLinear(linear)
    state.swapped.append((container, key))


def check_not_cached(conv: MessagePassing, adj: HaloAdj) -> None:
    """``cached=True`` layers keep the first graph's normalised adjacency: wrong for mini-batches."""
    if isinstance(adj, SampledAdj) and getattr(conv, "cached", False):
        raise ValueError(f"{type(conv).__name__}(cached=True) keeps the normalised adjacency of the first graph it "
                         f"sees, but every mini-batch is another graph: build the layer with cached=False")


def check_full_graph(options: HaloOptions, adj: HaloAdj) -> None:
    """``staleness=1`` stands the previous step's halo in for this one's: only on the same graph."""
    if options.staleness and adj.is_minibatch:
        raise ValueError("staleness needs full-graph training on the same shard: every mini-batch is "
                         "another graph with another halo, so the previous step's halo rows cannot stand in; use "
                         "staleness=0 with mini-batch loaders")


@torch.compiler.disable
def _leave(conv: MessagePassing, args: tuple, output: Any) -> None:
    state: LayerState = conv._sparsecomm
    while state.swapped:
        container, key = state.swapped.pop()
        applied = container._modules[key]
        assert isinstance(applied, AppliedLinear)
        container._modules[key] = applied.linear
    state.applied_first = None
    if state.entered and state.entered.pop():
        state.call_halos.clear()
        shard_context.pop()


def _source_names(arg_names: list[str]) -> list[str]:
    return sorted({a[:-2] for a in arg_names if a.endswith("_j")})


def _with_halo(conv: MessagePassing, kwargs: dict[str, Any], names: list[str],
               context: shard_context.ShardContext, key: str) -> dict[str, Any]:
    """``kwargs`` where every tensor read at sources is ``(cat[owned, halo], targets)``; the halo
    rows of all of them arrive in one all-to-allv (one per dtype), with the recorded output of the
    layer's source module (``GATConv``'s ``x_src``, see :mod:`.call_halos`); tensors whose halo this
    call already fetched reuse it."""
    sources: list[tuple[str, Tensor, Tensor, Any, tuple[int, ...]]] = []
    for name in names:
        value = kwargs.get(name)
        src, dst = value if isinstance(value, (tuple, list)) else (value, value)
        if not isinstance(src, Tensor):
            continue
        if src.size(conv.node_dim) != context.num_owned:
            raise ValueError(f"{type(conv).__name__}: the message reads '{name}_j' from a tensor with "
                             f"{src.size(conv.node_dim)} rows in dimension {conv.node_dim}, but this rank owns "
                             f"{context.num_owned} rows: pass the shard's rows (local.x)")
        rows, moved = node_rows(src, conv.node_dim)
        sources.append((name, src, rows, dst, moved))
    if not sources:
        return kwargs
    halos = _fetch_halos(conv, sources, context, key)
    out = dict(kwargs)
    for (name, _, rows, dst, moved), halo in zip(sources, halos, strict=True):
        ext_shape = (rows.size(0) + halo.size(0),) + moved[1:]
        out[name] = (from_node_rows(torch.cat([rows, halo], 0), ext_shape, conv.node_dim), dst)
    return out


def _fetch_halos(conv: MessagePassing, sources: list[tuple[str, Tensor, Tensor, Any, tuple[int, ...]]],
                 context: shard_context.ShardContext, key: str) -> list[Tensor]:
    """The ``[halo_size, width]`` halo rows of each source: kept from earlier in this call, cached
    across calls (:class:`~.shard_context.StaticHalo`, sources needing no gradient), or fetched now in
    one exchange together with the layer's recorded source-module output."""
    state: LayerState = conv._sparsecomm
    call = state.call_halos
    halos: dict[str, Tensor] = {}
    for name, src, rows, _, _ in sources:
        kept = call.lookup(src, conv.node_dim)
        if kept is not None:
            halos[name] = kept
        elif not rows.requires_grad:
            halos[name] = state.static_halo.fetch(name, _source(src), rows, context)
    moving = [(name, src, rows) for name, src, rows, _, _ in sources if name not in halos]
    recorded = call.take_recorded() if moving else None
    if (recorded is not None and recorded.size(0) == context.num_owned and recorded.is_floating_point()
            and not any(src is recorded for _, src, _ in moving)):
        moving.append(("", recorded, recorded))  # fused: exchanged now, kept for propagate
    if moving:
        tensors = [rows for _, _, rows in moving]
        state.exchanged_width = (sum(math.prod(r.shape[1:]) for r in tensors), tensors[0].element_size())
        fetched = halo_exchange_many(tensors, context.plan, context.group, state.settings.halo_options,
                                     state.exchange_slots, key)
        for (name, src, _), halo in zip(moving, fetched, strict=True):
            if name:
                call.add(src, conv.node_dim, halo)
                halos[name] = halo
            else:
                call.add_fused(src, halo)
    for name, src, _, _, _ in sources:
        if call.lookup(src, conv.node_dim) is None:
            call.add(src, conv.node_dim, halos[name])
    return [halos[name] for name, _, _, _, _ in sources]


def _source(value: Any) -> Tensor:
    return value[0] if isinstance(value, (tuple, list)) else value


def _check_call(conv: MessagePassing, edge_index: Any, size: Any, context: shard_context.ShardContext) -> tuple:
    if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
        raise ValueError(f"{type(conv).__name__} turned the local edge_index into a {type(edge_index).__name__} "
                         f"before propagating; distribute() supports layers that propagate over edge_index")
    if size is not None and size[1] not in (None, context.num_owned):
        raise ValueError(f"{type(conv).__name__} propagates with size={tuple(size)}, but this rank owns "
                         f"{context.num_owned} target rows")
    return (context.num_cols, context.num_owned)


def _running(conv: MessagePassing) -> shard_context.ShardContext | None:
    """The shard ``conv`` is running on, or ``None`` when this call is plain PyG."""
    return shard_context.current() if conv._sparsecomm.active else None


def _propagate(conv: MessagePassing, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
    state: LayerState = conv._sparsecomm
    context = _running(conv)
    if context is None:
        return _pyg(conv, "propagate")(edge_index, size=size, **kwargs)
    weight_arg = linear_weight_arg(conv)
    if weight_arg is not None and isinstance(kwargs.get("x"), (Tensor, tuple, list)):
        _check_call(conv, edge_index, size, context)
        return _linear_propagate(conv, state, context, edge_index, kwargs, weight_arg)
    alpha_arg = edge_weighted_arg(conv)
    if alpha_arg is not None and isinstance(kwargs.get(alpha_arg), Tensor):
        return _edge_weighted_propagate(conv, state, context, edge_index, size, kwargs, alpha_arg)
    if state.applied_first:  # its Linear was replaced by its bias: only the SpMM path applies it first
        raise RuntimeError(f"{type(conv).__name__} propagated without 'x'; distribute() expected the linear "
                           f"aggregation of its {state.applied_first}")
    return _exchange_then(conv, "propagate", conv._user_args, edge_index, size, kwargs, context)


def _edge_updater(conv: MessagePassing, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
    context = _running(conv)
    if context is None:
        return _pyg(conv, "edge_updater")(edge_index, size=size, **kwargs)
    return _exchange_then(conv, "edge_updater", conv._edge_user_args, edge_index, size, kwargs, context)


def _exchange_then(conv: MessagePassing, method: str, arg_names: list[str], edge_index: Any, size: Any,
                   kwargs: dict[str, Any], context: shard_context.ShardContext) -> Any:
    """PyG's ``method`` over ``size = (owned + halo, owned)``, its source tensors completed with halo rows."""
    size = _check_call(conv, edge_index, size, context)
    kwargs = _with_halo(conv, kwargs, _source_names(arg_names), context, method)
    return _pyg(conv, method)(edge_index, size=size, **kwargs)


def _linear_propagate(conv: MessagePassing, state: LayerState, context: shard_context.ShardContext,
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
    weight = kwargs.get(weight_arg) if weight_arg else None
    adj = state.adjacency.aggregation(edge_index, weight, conv.aggr, context.adj, rows.dtype)
    settings = state.settings
    grid = process_grid(settings.replication) if settings.replication > 1 else None
    if state.chosen_algorithm is None:
        learnable = adj.value is not None and adj.value.requires_grad
        state.chosen_algorithm, state.cost_report, state.exact_cost_report, state.sync_cost_report = \
            choose_algorithm(adj, grid, rows.size(1), rows.element_size(), learnable, settings.cost_model,
                             settings.group, settings.halo_options)
    state.exchanged_width = (rows.size(1), rows.element_size())
    spmm = make_algorithm(state.chosen_algorithm, adj, context.group if grid is None else None, grid,
                          settings.halo_options, state.exchange_slots)
    rows = rows.contiguous()
    if type(spmm) is SparseAware1D and not rows.requires_grad:  # e.g. the input features: fetched once
        out = spmm.multiply(rows, state.static_halo.fetch("x", src, rows, context, depends_on))
    else:
        out = spmm(rows)
    return from_node_rows(out, moved, conv.node_dim)



def _edge_weighted_propagate(conv: MessagePassing, state: LayerState, context: shard_context.ShardContext,
                             edge_index: Tensor, size: Any, kwargs: dict[str, Any], alpha_arg: str) -> Tensor:
    r"""``out[:, h] = A_h x[:, h]`` with ``A_h[i, j] = alpha[e, h]`` over ``[owned | halo]`` rows of
    ``x`` (exchanged as for any ``x_j``): one CSR SpMM per head."""
    _check_call(conv, edge_index, size, context)
    x = _with_halo(conv, kwargs, ["x"], context, "propagate")["x"][0]
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
