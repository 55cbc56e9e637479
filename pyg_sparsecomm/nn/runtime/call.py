r"""One call of a distributed PyG ``MessagePassing`` layer on a shard: :class:`LayerCall`, and the
hooks that run it.

:func:`~pyg_sparsecomm.nn.runtime.layer.attach` leaves the layer's class, parameters and code alone
and installs these interception points, the fewest PyG and torch allow (ARCHITECTURE.md says why
each is needed): a **forward pre-hook** (:func:`enter`: the call's :class:`LayerCall` runs the
stages of its :class:`~.plan.CallPath`, decided at attach: *check* (:mod:`.checks`), *local graph*
(the :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` becomes a local ``edge_index``, sources in
``[owned | halo]`` columns, its values passed as PyG's ``adj_t`` path uses them,
:mod:`.adjacency_values`), *move linears* (the rule's narrowing ``Linear`` applied before the
aggregation), *normalise* (global degrees and the rule's adapter, :mod:`.normalisation`,
:mod:`.adapters`)); a **forward hook** (:func:`leave`, ``always_call=True``: the *restore* stage,
also when the forward raises); instance-level **propagate** and **edge_updater**
(:class:`InstanceMethod`, as PyG itself shadows ``propagate`` per instance: the path's propagate
stage, an ``"spmm"`` aggregation as one distributed SpMM, ``"attention"`` as one CSR SpMM per head,
else sources completed with halo rows (:mod:`.sources`) for PyG's ``propagate``; ``edge_update``'s
sources completed first); ``conv._compiled_call_impl`` (:class:`EagerCall`: under
``torch.compile`` a steady-state call traces without a graph break, :mod:`.steady_call`); and for a
rule with a ``fused_source`` (``GATConv``) a forward hook on that child
(:class:`~.call_halos.RecordFirstOutput`), whose output is exchanged with the edge update's sources.

``propagate``/``edge_updater`` are installed again after PyG's ``explain``/``decomposed_layers``
setters or a copy.  A layer whose forward reaches the graph only through these is exact (a target's
in-edges are its owner's).  All halo traffic of a call goes through the layer's :class:`~.port.HaloPort`.
"""
import math
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...compat import compiled_call, module_call, pyg_edge_updater, pyg_propagate, set_compiled_call
from ...plan.halo_adj import HaloAdj
from ...plan.relation_adj import RelationAdj
from . import hetero
from .adapters import adapt
from .adjacency_values import torch_sparse_weights, with_adjacency_values
from .aggregation import (
    AppliedLinear,
    from_node_rows,
    linear_inputs,
    linear_weight,
    narrowing_input_linear,
)
from .call_halos import CallHalos
from .checks import check_stage
from .normalisation import end_call, propagated_graph
from .overrides import edge_updater, propagate
from .plain_call import check_plain_call
from .plan import CallPath
from .port import Shard
from .shared_adjacency import shared_aggregation
from .sources import attention_propagate, propagate_sources, with_halo
from .state import LayerState
from .steady_call import note_edge_update, note_propagate, record, traced_call, traced_method
from .traced_spmm import traced_aggregation

_local = threading.local()


def _stack() -> list["LayerCall"]:
    """The running layer calls on shards of this thread, innermost last."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def current() -> "LayerCall | None":
    """The innermost running layer call on a shard (``None`` outside one)."""
    stack = _stack()
    return stack[-1] if stack else None


class LayerCall:
    """All the state of one call of a distributed layer on a shard, and its stages (see the module doc).

    Args:
        conv (MessagePassing): the layer.
        state (LayerState): what it keeps between calls.
        adj (HaloAdj): the adjacency it was called with.
    """

    def __init__(self, conv: MessagePassing, state: LayerState, adj: HaloAdj, path: CallPath | None = None) -> None:
        self.conv, self.state, self.plan, self.adj = conv, state, state.plan, adj
        self.path: CallPath = path or state.plan.path  # type: ignore[assignment]  # its stages (plan.CallPath)
        self.outer: LayerCall | None = None  # the call whose forward this one runs in (the nested path)
        self.shard: Shard | None = None  # set by the local-graph stage
        self.halos: CallHalos | None = None  # halos fetched in this call (see call_halos)
        self.swapped: list[tuple[torch.nn.Module, str]] = []  # Linear modules replaced by AppliedLinear
        self.applied_first: str | None = None  # post-aggregation Linear moved before the exchange
        self.key: tuple | None = None  # what its checks covered (see checks.AgreementWatch)
        # what a traced steady-state call repeats (steady_call; the path under torch.compile only)
        self.call_args: tuple | None = None
        self.forward_args: tuple | None = None
        self.during: dict[str, Any] | None = None
        self.steady_path: Any = None
        self.looped: Tensor | None = None  # the graph its edge_updater got

    def enter(self, args: tuple, kwargs: dict, at: int | str | None) -> tuple[tuple, dict]:
        """The stages of its path before ``forward``, in order: ``(args, kwargs)`` of the call on the shard.

        Args:
            args (tuple): the call's positional arguments.
            kwargs (dict): its keyword arguments.
            at (int or str): where they hold the adjacency (``None``: none, the nested path).
        """
        nested = self.outer is not None  # (a nested call leaves no steady-state record: steady_call)
        if not nested:
            self.call_args = (args, kwargs)
        for stage in self.path.stages:  # the path's declared stages, nothing else (see plan.CallPath)
            args, kwargs = STAGES[stage](self, args, kwargs, at)
        if not nested:
            self.forward_args = (args, kwargs)
        return args, kwargs

    def begin(self, shard: Shard) -> None:
        """Runs the layer on ``shard`` until :meth:`leave`."""
        self.shard = shard
        stack = getattr(_local, "stack", None)
        (_stack() if stack is None else stack).append(self)
        state = self.state
        state.calls.append(self)
        if state.settings.halo_options.staleness:  # the stale exchanges' call sites count from the start
            state.exchange_slots.begin_call(self.conv.training)

    def outer_shard(self, args: tuple, kwargs: dict, at: None = None) -> tuple[tuple, dict]:
        """The nested path's first stage: the outer call's shard (its exchanger, local graph and memo),
        and the adjacency's values where the forward passes the outer call's local graph."""
        outer = self.outer
        assert outer is not None and outer.shard is not None
        self.begin(self.state.port.shard(outer.adj, self.state.settings, outer.shard))
        if any(v is outer.shard.edge_index for v in list(args) + list(kwargs.values())):
            args, kwargs = with_adjacency_values(self.conv, self.plan, args, kwargs, outer.adj)
        return args, kwargs

    def local_graph(self, args: tuple, kwargs: dict, at: int | str) -> tuple[tuple, dict]:
        """The local ``edge_index`` in place of the adjacency at ``at``, and its values."""
        adj, plan, state = self.adj, self.plan, self.state
        shard = self.shard = state.port.shard(adj, state.settings)  # (begin, inline: a hot path)
        stack = getattr(_local, "stack", None)
        (_stack() if stack is None else stack).append(self)
        state.calls.append(self)
        if state.settings.halo_options.staleness:
            state.exchange_slots.begin_call(self.conv.training)
        if isinstance(at, int):
            args = args[:at] + (shard.edge_index,) + args[at + 1:]
        else:
            kwargs = {**kwargs, at: shard.edge_index}
        # a relation's stored weights apply when passed, as PyG's edge_index_dict call
        if not isinstance(adj, RelationAdj) and adj.value is not None and (
                plan.takes_edge_weight or not plan.drops_adj_values or adj.given_as == "torch.sparse"):
            args, kwargs = with_adjacency_values(self.conv, plan, args, kwargs, adj)
        return args, kwargs

    def move_linears(self, args: tuple, kwargs: dict, at: int | str | None = None) -> tuple[tuple, dict]:
        """Applies the rule's narrowing ``post_linear`` / ``input_linear`` before the aggregation."""
        conv, plan = self.conv, self.plan
        if plan.rule.post_linear is not None:
            moved = self.state.narrowing.post_linear(conv, plan)
            if moved is not None:  # (_apply_first, inline: a hot path)
                self.applied_first, conv._modules[moved[0]] = moved
                self.swapped.append((conv, moved[0]))
        first = narrowing_input_linear(conv, plan) if plan.rule.input_linear is not None else None
        if first is not None:  # GINConv: nn's first Linear applied to x, so the aggregation runs narrower
            weight = linear_weight(*first)
            self._apply_first(*first)
            bound = plan.signature.bind(conv, *args, **kwargs)
            bound.arguments["x"] = linear_inputs(bound.arguments["x"], weight)
            args, kwargs = bound.args[1:], bound.kwargs
        return args, kwargs

    def _apply_first(self, container: torch.nn.Module, key: str) -> None:
        """Replaces the Linear ``container[key]`` by :class:`AppliedLinear` (its bias) for this call."""
        linear = container._modules[key]
        assert linear is not None
        container._modules[key] = self.state.narrowing.applied(linear)
        self.swapped.append((container, key))

    def call_halos(self) -> CallHalos:
        """The halos of this call (made at the first exchange)."""
        if self.halos is None:
            self.halos = CallHalos(self.state.fuse)
        return self.halos

    def propagate(self, edge_index: Any, size: Any, kwargs: dict[str, Any]) -> Any:
        """The propagate stage (see the module doc); first the call's normalised graph, where its
        normalisation arranged one (a hook would run too late, after the SpMM path took the graph).

        Args:
            edge_index (Tensor): the graph ``propagate`` got (the local one, or normalised).
            size (tuple or None): the size it got (``None``: none given).
            kwargs (dict): its other arguments.
        """
        conv, plan, shard = self.conv, self.plan, self.shard
        assert shard is not None
        normalisation = shard.normalisation
        if normalisation is not None and normalisation.normalise is not None:
            edge_index, kwargs = propagated_graph(normalisation, edge_index, kwargs)
        how = "sources" if getattr(conv, "explain", False) else self.path.propagate  # (decided at attach)
        if self.state.recording:  # an eager call under torch.compile (see steady_call)
            note_propagate(self, edge_index, kwargs)
        if how == "spmm" and isinstance(kwargs.get("x"), (Tensor, tuple, list)):
            shard.check_propagation(conv, edge_index, size)
            return self._spmm_propagate(edge_index, kwargs, plan.spmm_weight)  # type: ignore[arg-type]
        port = self.state.port
        if how == "attention" and isinstance(kwargs.get(plan.attention_weight), Tensor):  # type: ignore[arg-type]
            return attention_propagate(conv, shard, self.halos or self.call_halos(), port, self.state.adjacency,
                                       edge_index, size, kwargs, plan.attention_weight)  # type: ignore[arg-type]
        if self.applied_first:  # its Linear was replaced by its bias: only the SpMM path applies it first
            raise RuntimeError(f"{type(conv).__name__} propagated without 'x'; distribute() expected the linear "
                               f"aggregation of its {self.applied_first}")
        edge_index, size, kwargs = propagate_sources(conv, (edge_index, size, kwargs), shard, self.call_halos(), port,
                                                     plan.message_sources)
        return pyg_propagate(conv)(edge_index, size=size, **kwargs)

    def _spmm_propagate(self, edge_index: Tensor, kwargs: dict[str, Any], weight_arg: str) -> Tensor:
        """``out = A x`` by the distributed SpMM algorithm, ``A[i, j]`` the message weights."""
        conv, shard, state = self.conv, self.shard, self.state
        assert shard is not None
        x = kwargs["x"]
        src = x[0] if isinstance(x, (tuple, list)) else x
        node_dim = conv.node_dim
        if src.size(node_dim) != shard.num_owned:
            raise ValueError(f"{type(conv).__name__}: x has {src.size(node_dim)} rows in dimension "
                             f"{node_dim}, but this rank owns {shard.num_owned} rows")
        first = src.movedim(node_dim, 0)  # (node_rows, inline: the same tensor ops, so the same autograd graph)
        rows, moved = first.reshape(first.size(0), math.prod(first.shape[1:])), tuple(first.shape)
        depends_on: tuple[Tensor, ...] = ()
        if self.applied_first:  # (A x) W^T = A (x W^T): exchange the narrower rows
            if src.dim() != 2:
                raise ValueError(f"{type(conv).__name__}: expected 2-D node features, got shape {list(src.shape)}")
            applied = conv._modules[self.applied_first]
            lin_weight = applied.linear.weight if isinstance(applied, AppliedLinear) else \
                linear_weight(applied, "linear")
            assert isinstance(lin_weight, Tensor)
            rows, depends_on = F.linear(rows, lin_weight), (lin_weight,)
            moved = tuple(rows.shape)
        adj = shard.adj
        weight = kwargs.get(weight_arg) if weight_arg else (
            torch_sparse_weights(conv, self.plan, edge_index, adj)
            if adj.value is not None and adj.given_as == "torch.sparse" else None)
        state.exchanged_width = (rows.size(1), rows.element_size())
        if torch.compiler.is_compiling() and state.port.traces_spmm(shard, state.settings):
            out = traced_aggregation(shard.halo, shard.num_owned, edge_index, weight, conv.aggr, rows.contiguous())
            return from_node_rows(out, moved, node_dim)
        dtype = rows.dtype

        def aggregation() -> HaloAdj:
            shared = None if weight is None else shared_aggregation(adj, edge_index, weight, conv.aggr, dtype)
            return shared or state.adjacency.aggregation(edge_index, weight, conv.aggr, adj, dtype)
        cached = (edge_index, weight) if getattr(conv, "cached", False) else None
        spmm = state.port.spmm(aggregation, shard, rows, state.settings, cached, (edge_index, weight, conv.aggr))
        out = state.port.multiply(spmm, rows.contiguous(), src, shard, depends_on, weight)
        return out.reshape((out.size(0),) + moved[1:]).movedim(0, node_dim)  # (from_node_rows, inline)

    def edge_update(self, edge_index: Any, size: Any, kwargs: dict[str, Any]) -> tuple:
        """``edge_updater``'s sources completed with halo rows, over ``size = (owned + halo, owned)``."""
        shard = self.shard
        assert shard is not None
        if self.state.recording:
            note_edge_update(self, edge_index)
        size = shard.check_propagation(self.conv, edge_index, size)
        return edge_index, size, with_halo(self.conv, kwargs, self.plan.edge_update_sources, shard,
                                           self.halos or self.call_halos(),
                                           self.state.port, "edge_updater")

    def leave(self) -> None:
        """The restore stage: the moved ``Linear`` modules, what the normalisation changed."""
        while self.swapped:
            container, key = self.swapped.pop()
            applied = container._modules[key]
            assert isinstance(applied, AppliedLinear)
            container._modules[key] = applied.linear
        if self.shard is not None and self.shard.normalisation is not None:
            end_call(self.shard.normalisation)
        if self.key is not None:
            self.state.port.watch.end(self.key)
        halos = self.halos  # (unused_fusion, inline)
        if halos is not None and halos.fused is not None and not halos.fused_used:
            self.state.fuse = False  # the same code on every rank: every rank stops fusing together
        if self.state.recording:
            record(self, LayerCall)
        stack = getattr(_local, "stack", None)
        if stack is not None and self in stack:
            stack.remove(self)


class InstanceMethod:
    """``conv.propagate`` / ``conv.edge_updater`` of a distributed layer: a picklable bound call."""

    def __init__(self, conv: MessagePassing, function, traced: bool = False) -> None:
        self.conv, self.function, self.traced = conv, function, traced  # traced: the propagate override

    def __call__(self, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
        state = self.conv._sparsecomm
        if torch.compiler.is_compiling() or state.tracing is not None:  # (dynamo fell back)
            return traced_method(self, edge_index, size, kwargs)
        call = state.calls[-1] if state.calls else None
        if call is None:  # plain PyG
            return self.function(self.conv, edge_index, size, **kwargs)
        if self.traced:  # propagate on a shard: the call's propagate stage
            return call.propagate(edge_index, size, kwargs)
        edge_index, size, kwargs = call.edge_update(edge_index, size, kwargs)  # edge_updater: sources first
        return pyg_edge_updater(self.conv)(edge_index, size=size, **kwargs)


class EagerCall:
    """``conv._compiled_call_impl`` of a distributed layer (``Module.__call__`` runs it in place of
    ``conv._call_impl``): traced, :func:`~.steady_call.traced_call`; eagerly, the layer's call."""

    def __init__(self, conv: MessagePassing) -> None:
        self.conv = conv
        self.call = module_call(conv)  # bound once

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return traced_call(self.conv, args, kwargs)
        return self.call(*args, **kwargs)


def install_overrides(conv: MessagePassing) -> None:
    """Sets ``conv.propagate`` and ``conv.edge_updater`` to the distributed versions unless they
    are (idempotent), and :class:`EagerCall` unless a call implementation is set (the user's
    ``conv.compile()``).  ``Module.__getstate__`` drops it from copies, whose first call sets it
    again: a copy compiled before any call traces into its layers as without it."""
    for name, function in (("propagate", propagate), ("edge_updater", edge_updater)):
        current_method = conv.__dict__.get(name)
        if not (isinstance(current_method, InstanceMethod) and current_method.conv is conv):
            setattr(conv, name, InstanceMethod(conv, function, traced=function is propagate))
    if compiled_call(conv) is None:
        set_compiled_call(conv, EagerCall(conv))


@torch.compiler.disable
def enter(conv: MessagePassing, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """The forward pre-hook: on a shard, the call's ``(args, kwargs)`` after the stages of its
    :class:`LayerCall`; ``None`` for a plain PyG call.  A
    :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj` goes to :func:`.hetero.enter_relation`,
    except a relation within one node type under a layer of :data:`.hetero.SAME_TYPE_LAYERS`.

    Args:
        conv (MessagePassing): the layer.
        args (tuple): its positional arguments.
        kwargs (dict): its keyword arguments.
    """
    state: LayerState = conv._sparsecomm
    override = conv.__dict__.get("propagate")
    if not state.installed or override.__class__ is not InstanceMethod or override.conv is not conv:
        install_overrides(conv)  # PyG's explain / decomposed_layers setters assign conv.propagate; a copy
        state.installed = True
    at = None
    for k, v in (*enumerate(args), *kwargs.items()):  # where the call passes its HaloAdj
        if isinstance(v, HaloAdj):
            if at is not None:
                count = sum(isinstance(a, HaloAdj) for a in (*args, *kwargs.values()))
                raise ValueError(f"{type(conv).__name__} got {count} HaloAdj arguments; distribute() runs layers "
                                 f"over one adjacency")
            at = k
    if at is None:
        return _enter_without_adjacency(conv, state, args, kwargs)
    adj: HaloAdj = args[at] if isinstance(at, int) else kwargs[at]
    if isinstance(adj, RelationAdj):
        if not hetero.enter_own_type(conv, state, args, kwargs, adj):  # the "relation" path: sources, then PyG
            return hetero.enter_relation(conv, state, args, kwargs, at, adj)
        return LayerCall(conv, state, adj, state.plan.paths["own-type relation"]).enter(args, kwargs, at)
    return LayerCall(conv, state, adj).enter(args, kwargs, at)


def _enter_without_adjacency(conv: MessagePassing, state: LayerState, args: tuple, kwargs: dict):
    """A call without a ``HaloAdj``: inside a distributed layer (``AntiSymmetricConv``'s ``phi``) on
    its shard, else plain PyG (a plain graph under a multi-rank group raises)."""
    outer = current()
    if outer is None:
        check_plain_call(conv, state, args, kwargs)
        state.calls.append(None)
        return None
    call = LayerCall(conv, state, outer.adj, state.plan.paths["nested"])
    call.outer = outer
    return call.enter(args, kwargs, None)


@torch.compiler.disable
def leave(conv: MessagePassing, args: tuple, output: Any) -> None:
    """The forward hook (``always_call=True``: also when the forward raised): the call's restore
    stage, and the layer leaves the shard."""
    calls = conv._sparsecomm.calls
    call = calls.pop() if calls else None
    if call is not None:
        call.leave()


#: the pre-hook's stages by name (a :class:`~.plan.CallPath` lists those of a path, in order)
STAGES: dict[str, Callable[..., tuple[tuple, dict]]] = {
    "check": check_stage, "outer shard": LayerCall.outer_shard, "local graph": LayerCall.local_graph,
    "move linears": LayerCall.move_linears, "normalise": adapt}
