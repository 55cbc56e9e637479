r"""One PyG ``MessagePassing`` layer, run on a rank's shard.

:func:`attach` leaves the layer's class, parameters and code alone and adds, through PyG's and
torch's own extension points:

1. a forward pre-hook (:func:`_enter`) that swaps the shard's :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj`
   for a local ``edge_index`` (sources in ``[owned | halo]`` columns, targets the owned rows, in
   ``adj``'s edge order, so ``local.edge_weight``/``local.edge_attr`` line up; ``adj``'s values
   passed as PyG's ``adj_t`` path uses them, :mod:`.adjacency_values`), makes the shard current,
   moves the rule's narrowing ``Linear`` before the aggregation, gives the layer the degree
   normalisation with global degrees (:mod:`.layer_normalisation`) and runs the rule's adapter
   (:mod:`.layer_rules`); a forward hook that always runs (:func:`_leave`) undoes it.  The first
   call on a shard checks all ranks at once (:mod:`.first_use`);
2. PyG's propagate pre-hook, which completes every tensor the messages read at sources with
   halo rows (:mod:`.source_exchange`);
3. two overrides where no hook can do the job (:mod:`.overrides`): an instance-level
   ``propagate`` that runs an ``"spmm"``/``"attention"`` aggregation as the distributed SpMM,
   and an ``edge_updater`` that completes the sources of ``edge_update`` before PyG gathers
   them; installed again before every call, since PyG's ``explain``/``decomposed_layers``
   setters assign ``propagate``.

Every layer whose forward reaches the graph only through these is exact: a target's messages,
softmaxes and aggregations see exactly its in-edges, which its owner holds.

Under ``torch.compile`` the whole layer call runs eagerly, as one graph break at the same place
in every step (:class:`~.overrides.EagerCall`), so a model compiles once: the hooks hold per-call
Python state and the exchanges (collectives over per-shard plans, non-blocking on some
algorithms) and torch's CSR SpMM, which dynamo traces neither, and the layer's dense code between
them compiled to graphs too small to repay their wrappers.  The model's code between its layers
compiles.  The hooks, ``propagate`` and ``edge_updater`` are also ``torch.compiler.disable``d on
their own, for a layer whose call implementation the user replaced (``conv.compile()``).
"""
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ..algorithms.choice import CostRow
from ..algorithms.cost import CostModel
from ..algorithms.settings import exchange_group
from ..comm.exchanger import HaloExchanger
from ..comm.grid import ProcessGrid, process_grid
from ..comm.group import world_size
from ..comm.halo_options import EXACT, ExchangeSlots, HaloOptions
from ..plan.halo_adj import HaloAdj
from ..plan.relation_adj import RelationAdj
from ..sampling.sampled_adj import SampledAdj
from . import hetero, shard_context
from .adjacency_values import with_adjacency_values
from .call_halos import CallHalos, attach_recorder
from .first_use import CACHE_ATTRIBUTES, CheckedPlan, check_call
from .layer_adapters import adapt, forward_signature
from .layer_normalisation import CallNormalisation, end_call
from .linear_aggregation import (
    AdjacencyCache,
    AppliedLinear,
    CachedSpMM,
    linear_inputs,
    linear_weight,
    narrowing_input_linear,
    narrowing_linear,
)
from .overrides import install_overrides
from .relation_dict import RelationDictLayer, holds_relations
from .source_exchange import exchange_propagate_sources


@dataclass
class DistributedSettings:
    """How :func:`~pyg_sparsecomm.distribute` runs a model's layers (see its arguments)."""
    algorithm: str = "1d"
    group: dist.ProcessGroup | None = None
    replication: int = 1
    cost_model: CostModel = field(default_factory=CostModel)
    halo_options: HaloOptions = EXACT
    #: a 1.5D algorithm on the ``P x 1`` grid (``replication=1``), which ``DistributedGCNConv`` allows
    unit_grid: bool = False

    @property
    def replicated(self) -> bool:
        """Whether the layout is 1.5D: the SpMM runs on a :class:`~pyg_sparsecomm.comm.grid.ProcessGrid`."""
        return self.replication > 1 or self.unit_grid

    def grid(self) -> ProcessGrid | None:
        """The process grid of a 1.5D layout (``None``: 1D)."""
        return process_grid(self.replication) if self.replicated else None


class LayerState:
    """What one distributed layer keeps between calls: settings, PyG's own ``propagate`` /
    ``edge_updater``, whether each active call entered a shard, caches of the linear path."""

    def __init__(self, conv: MessagePassing, settings: DistributedSettings) -> None:
        self.settings = settings
        self.own_settings = False  # set by the layer's own constructor: distribute() keeps them
        self.entered: list[bool] = []
        self.applied_first: str | None = None  # post-aggregation Linear moved before the exchange
        self.swapped: list[tuple[torch.nn.Module, str]] = []  # modules replaced by AppliedLinear this call
        self.adjacency = AdjacencyCache()
        self.cached_spmm = CachedSpMM()  # the SpMM a cached=True layer built on its first call
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
        self.normalisation: CallNormalisation | None = None  # what this call's normalisation changed

    @property
    def active(self) -> bool:
        return bool(self.entered) and self.entered[-1]

    def forget(self) -> None:
        """Drops every tensor the layer kept across calls (a move to another device, a reset of its
        parameters): the next call builds them again."""
        self.adjacency = AdjacencyCache()
        self.cached_spmm = CachedSpMM()
        self.static_halo = shard_context.StaticHalo()
        self.exchange_slots.clear()

    def forget_spmm(self) -> None:
        """Drops the SpMM a ``cached=True`` layer keeps (it releases an ``"rdma"`` engine's lease)."""
        self.cached_spmm = CachedSpMM()

    def exchanger(self, context: shard_context.ShardContext) -> HaloExchanger:
        """The shard's exchanger under this layer's halo options and slots."""
        return context.exchanger.bind(options=self.settings.halo_options, slots=self.exchange_slots)


def distributed_layers(module: torch.nn.Module) -> Iterator[tuple[str, LayerState]]:
    """``(name, state)`` of every distributed layer in ``module`` (made by ``distribute()`` or
    built distributed, as ``DistributedGCNConv``), in ``named_modules()`` order."""
    for name, child in module.named_modules():
        state = getattr(child, "_sparsecomm", None)
        if isinstance(state, LayerState):
            yield name, state


def attach(conv: MessagePassing, settings: DistributedSettings, own: bool = False) -> None:
    """Makes ``conv`` run distributed when called with a ``HaloAdj`` (idempotent: a second call
    replaces the settings, unless the first was ``own``: a layer built distributed, like
    ``DistributedGCNConv``, keeps its constructor's settings inside a ``distribute()``d model).  The
    first empties what PyG's ``cached=True`` layers keep (``_cached_edge_index``, ...): a call before
    ``distribute()`` filled it from the graph of that call, not from the shard the layer runs on."""
    if hasattr(conv, "_sparsecomm"):
        if not conv._sparsecomm.own_settings:
            conv._sparsecomm.settings = settings
        return
    conv._sparsecomm = LayerState(conv, settings)
    conv._sparsecomm.own_settings = own
    for name in CACHE_ATTRIBUTES:  # a cached=True layer called before (on a whole graph): its shard's comes next
        if getattr(conv, name, None) is not None:
            setattr(conv, name, None)
    conv.register_forward_pre_hook(_enter, with_kwargs=True)
    conv.register_forward_hook(_leave, always_call=True)
    conv.register_propagate_forward_pre_hook(exchange_propagate_sources)
    install_overrides(conv)
    attach_recorder(conv)


def _is_graph_argument(value: Any) -> bool:
    if isinstance(value, Tensor):
        return value.layout != torch.strided or (value.dim() == 2 and value.size(0) == 2
                                                 and not value.is_floating_point())
    return type(value).__name__ == "SparseTensor"


@torch.compiler.disable
def _enter(conv: MessagePassing, args: tuple, kwargs: dict):
    """The forward pre-hook (``with_kwargs=True``): on a shard, the call's ``(args, kwargs)`` with the
    local ``edge_index`` for the ``HaloAdj``, ``adj``'s values, the rule's narrowing ``Linear``
    applied first and the rule's adapter run (see the module doc); ``None`` for a plain PyG call.
    A :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj` goes to :func:`.hetero.enter_relation`,
    except a relation within one node type under a layer of :data:`.hetero.SAME_TYPE_LAYERS`
    (``GCNConv``), which runs this path over the relation's block without its stored values.

    Args:
        conv (MessagePassing): the layer.
        args (tuple): its positional arguments.
        kwargs (dict): its keyword arguments.
    """
    install_overrides(conv)  # PyG's explain / decomposed_layers setters assign conv.propagate
    state: LayerState = conv._sparsecomm
    adj_at = [k for k, v in list(enumerate(args)) + list(kwargs.items()) if isinstance(v, HaloAdj)]
    if not adj_at:
        return _enter_without_adjacency(conv, state, args, kwargs)
    if len(adj_at) > 1:
        raise ValueError(f"{type(conv).__name__} got {len(adj_at)} HaloAdj arguments; distribute() runs layers "
                         f"over one adjacency")
    adj: HaloAdj = args[adj_at[0]] if isinstance(adj_at[0], int) else kwargs[adj_at[0]]
    relation = isinstance(adj, RelationAdj)
    if isinstance(adj, RelationAdj) and not hetero.enter_own_type(conv, state, args, kwargs, adj):
        return hetero.enter_relation(conv, state, args, kwargs, adj_at[0], adj)  # sources completed first
    _check_call(conv, state, args, kwargs, adj)
    settings = state.settings
    exchanger = HaloExchanger(adj.plan, exchange_group(adj, settings.grid(), settings.group))
    context = shard_context.ShardContext(adj, exchanger, adj.edge_index())
    _begin(state, conv, context)
    if isinstance(adj_at[0], int):
        args = args[:adj_at[0]] + (context.edge_index,) + args[adj_at[0] + 1:]
    else:
        kwargs = {**kwargs, adj_at[0]: context.edge_index}
    if not relation:  # a relation's stored weights apply when passed, as PyG's edge_index_dict call
        args, kwargs = with_adjacency_values(conv, args, kwargs, adj)
    args, kwargs = _move_linears_first(conv, state, args, kwargs)
    return adapt(conv, args, kwargs, context)


def _edge_index_is_none(conv: MessagePassing, args: tuple, kwargs: dict) -> bool:
    """Whether the call passes ``edge_index=None`` (a shard from ``shard()`` has ``local.adj`` only)."""
    try:
        bound = forward_signature(type(conv)).bind_partial(conv, *args, **kwargs).arguments
    except TypeError:
        return False  # PyG's own error for a wrong call
    return "edge_index" in bound and bound["edge_index"] is None


def _begin(state: LayerState, conv: MessagePassing, context: shard_context.ShardContext) -> None:
    shard_context.push(context)
    state.entered.append(True)
    state.exchange_slots.begin_call(conv.training)
    state.call_halos.begin()


def _enter_without_adjacency(conv: MessagePassing, state: LayerState, args: tuple, kwargs: dict):
    """A call without a ``HaloAdj``: inside a distributed layer (``AntiSymmetricConv``'s ``phi``) on
    its shard, else plain PyG (a plain graph under a multi-rank group raises)."""
    outer = shard_context.current()
    if outer is not None:
        _begin(state, conv, outer)
        if any(v is outer.edge_index for v in list(args) + list(kwargs.values())):
            args, kwargs = with_adjacency_values(conv, args, kwargs, outer.adj)
        return adapt(conv, args, kwargs, outer)
    group = state.settings.group
    if not isinstance(conv, RelationDictLayer) and any(holds_relations(v) for v in list(args) + list(kwargs.values())):
        raise NotImplementedError(f"distribute(): {type(conv).__name__} got a heterogeneous shard's adj_dict, which it "
                                  f"cannot read: heterogeneous layers that run on one are HGTConv and HANConv (PyG's "
                                  f"own classes); others run per relation in HeteroConv or to_hetero")
    if world_size(group) > 1 and any(_is_graph_argument(v) for v in list(args) + list(kwargs.values())):
        raise ValueError(f"{type(conv).__name__} got a plain edge_index or sparse adjacency under a world size "
                         f"of {world_size(group)}: partition the graph with SparsityAwarePartitioner("
                         f"num_parts=world_size), call local = shard(data) and pass local.adj")
    if world_size(group) > 1 and _edge_index_is_none(conv, args, kwargs):
        raise ValueError(f"{type(conv).__name__} got edge_index=None under a world size of {world_size(group)}: "
                         f"shard(data) keeps the shard's adjacency in local.adj (partition_and_shard also as "
                         f"local.edge_index): pass local.adj")
    state.entered.append(False)
    return None


def _check_call(conv: MessagePassing, state: LayerState, args: tuple, kwargs: dict, adj: HaloAdj) -> None:
    """The checks of a call on a shard, agreed by every rank (:func:`~.first_use.check_call`)."""
    if getattr(conv, "explain", False):
        raise ValueError(f"{type(conv).__name__} is in explain mode (set by PyG's Explainer), whose edge masks "
                         f"cover the whole graph's edges; a shard's layer cannot apply them: explain on one process "
                         f"with the whole graph, or set conv.explain = False")
    # checked on every rank at once (a new shard: one all-gather; else three flags agreed on the host)
    one_d = not state.settings.replicated  # 1.5D block rows: exchange_group checks them
    state.cached_key = check_call(conv, args, kwargs, adj, state.checked_plan, state.cached_key,
                                  state.settings.group, one_d)
    check_not_cached(conv, adj)
    check_full_graph(state.settings.halo_options, adj)


def _move_linears_first(conv: MessagePassing, state: LayerState, args: tuple, kwargs: dict) -> tuple:
    """Applies the rule's narrowing ``post_linear`` / ``input_linear`` before the aggregation."""
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
    return args, kwargs


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
    """The forward hook (``always_call=True``: also when the forward raised): puts back the
    ``Linear`` modules :func:`_move_linears_first` replaced and leaves the shard."""
    state: LayerState = conv._sparsecomm
    while state.swapped:
        container, key = state.swapped.pop()
        applied = container._modules[key]
        assert isinstance(applied, AppliedLinear)
        container._modules[key] = applied.linear
    state.applied_first = None
    end_call(conv)
    if state.entered and state.entered.pop():
        state.call_halos.clear()
        shard_context.pop()
