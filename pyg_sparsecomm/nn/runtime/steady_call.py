r"""A distributed layer's steady-state call as ``torch.compile`` traces it, without a graph break
(issue 57, item 6).

Eagerly, every call of a distributed layer runs its stages (:mod:`.call`): checks agreed by the
ranks, the local graph, the normalisation with global degrees, the SpMM over a kept CSR.  Their
per-call Python state and collectives are graph breaks.  A **steady-state** call repeats what the
layer's last eager call did with inputs of the same shapes, so that call leaves a
:class:`SteadyRecord` of what it passed to the layer's ``forward`` (the local graph, a normalised
one with its weights), and a traced call matching it (the same ``HaloAdj``, ``x`` of the same shape,
dtype and device, no other tensor argument; dynamo's guards keep it so) runs the layer's own
``forward`` on those arguments, its ``propagate`` the traced SpMM (:mod:`.traced_spmm`): the local
gather and ``index_add`` around one op, ``pyg_sparsecomm::halo_exchange``, which at run time runs the
call's check stage (:func:`~.checks.check_stage`, on zero-storage stand-ins of the call's arguments:
the checks read shapes only) around the exact exchange, as an eager call does
(:meth:`SteadyRecord.around_exchange`): the agreement header, a peer's flag, every rank's
``ValueError``.

Only calls the record reproduces exactly are recorded, made by an eager call that dynamo traced
(the first step of a compiled model; plain eager calls record nothing): full-graph shards with exact
halos, no tensor argument but ``x`` (a ``HaloAdj`` without values), not ``cached=True``, no hooks on the
layer but its own (the traced call calls ``forward``), a normalisation passed as the forward's
arguments, and either one linear aggregation by the ``"1d"`` SpMM (``GCNConv``, ``SAGEConv``) or one
edge update and one attention aggregation over the same graph (``GATConv``: the traced forward gets the
self-looped graph its eager call built, ``add_self_loops=False``; its sources exchanged in two ops, the
eager call fuses them in one).  Any other call, and a traced call matching no record, runs eagerly as
one graph break (:class:`~.call.EagerCall`).  A narrowing ``Linear`` the eager call applied before the
aggregation (``SAGEConv``'s ``lin_l``) the traced call applies there too.
"""
import math
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...comm import traced_exchange
from ...compat import module_call, module_hooks, pyg_edge_updater, pyg_propagate
from ...plan.halo_adj import HaloAdj
from .aggregation import AppliedLinear, linear_weight
from .checks import check_stage
from .outer_frames import retrace_above
from .traced_spmm import local_spmm, register_adjacency

#: the attribute marking a module hook a traced steady-state call may skip (it calls ``forward``)
SKIPPED_WHEN_TRACED = "skipped_when_traced"


def only_own_hooks(conv: MessagePassing) -> bool:
    """Whether every hook around ``conv.forward`` is one a traced call may skip (:data:`SKIPPED_WHEN_TRACED`:
    the layer's own, ``sync_gradients``' recomputation note, a no-op when traced); run eagerly."""
    hooks, others = module_hooks(conv)
    return not others and all(getattr(hook, SKIPPED_WHEN_TRACED, False) for hook in hooks.values())


def _hook_ids(conv: MessagePassing) -> tuple:
    """The ids of the hooks around ``conv.forward`` (a new hook: a new id) and the count of the others."""
    hooks, others = module_hooks(conv)
    return tuple(hooks), others


#: the attributes of a layer its forward reads around the graph (a change: no longer steady)
NORMALISATION_ATTRIBUTES = ("normalize", "improved", "add_self_loops", "cached", "flow", "aggr", "node_dim")


def _stand_in(t: Tensor) -> Tensor:
    """A zero-storage tensor of ``t``'s shape, dtype and device (what the checks read)."""
    return t.new_empty(()).expand(t.shape)


class SteadyRecord:
    """What a layer's last eager call passed to its ``forward``, for a traced steady-state call.

    Args:
        conv (MessagePassing): the layer.
        adj (HaloAdj): the adjacency of the call.
        call_args (tuple): the call's ``(args, kwargs)``.
        forward_args (tuple): what its forward pre-hook passed to ``forward``, ``(args, kwargs)``.
        x (Tensor): the call's ``x`` (in both).
        during (dict): the attributes of :data:`NORMALISATION_ATTRIBUTES` during the traced call.
        make_call (callable): ``(conv, state, adj) -> LayerCall`` (its check stage runs at run time).
        path (str): ``"spmm"`` (one linear aggregation) or ``"attention"`` (an edge update, then
            an aggregation weighted by it, over the graph with the layer's self-loops).
        aggregation (HaloAdj, optional): the adjacency the eager call's SpMM multiplied with (``"spmm"``).
            (default: ``None``)
        applied_first (str, optional): the narrowing ``Linear`` the eager call applied before the SpMM
            (``SAGEConv``'s ``lin_l``); the traced call does the same. (default: ``None``)
    """

    def __init__(self, conv: MessagePassing, adj: HaloAdj, call_args: tuple, forward_args: tuple, x: Tensor,
                 during: dict[str, Any], make_call: Callable[..., Any], path: str,
                 aggregation: HaloAdj | None = None, applied_first: str | None = None) -> None:
        self.conv_ref, self.adj, self.during, self.make_call = weakref.ref(conv), adj, during, make_call
        self.path, self.aggregation = path, aggregation
        self.hooks = _hook_ids(conv)  # the record is made only when every hook is skippable
        self.applied_first = applied_first
        self.applied = None if applied_first is None else AppliedLinear(conv._modules[applied_first])
        self.aggregation_handle = "" if aggregation is None else register_adjacency(aggregation)
        self.x_shape, self.x_dtype, self.x_device = tuple(x.shape), x.dtype, x.device
        self.x_at = _position(forward_args, x)
        args, kwargs = forward_args
        self.forward_args = (tuple(None if a is x else a for a in args),
                             {k: (None if v is x else v) for k, v in kwargs.items()})
        self.check_args = _replaced(call_args, x, _stand_in(x))
        self.after = {k: getattr(conv, k) for k in during}
        state = conv._sparsecomm
        exchanger = state.port._link.exact if state.port._link is not None else None
        self.exchanger_handle = getattr(exchanger, "handle", "")
        self.num_owned, self.num_cols = adj.num_owned, adj.num_cols
        self.handle = traced_exchange.register_call(self)
        self.static = _StaticRows(self)  # rows needing no gradient: the layer's static halo, as eagerly
        self.static_handle = traced_exchange.register_call(self.static)

    def __getstate__(self) -> dict:
        raise TypeError("a SteadyRecord is not pickled (LayerState drops it)")

    def same(self, other: "SteadyRecord") -> bool:
        """Whether ``other`` records the same call (a kept record keeps its handle, which traced graphs hold)."""
        mine = (self.path, self.x_shape, self.x_dtype, self.x_device, self.x_at, self.during)
        return (self.adj is other.adj and self.aggregation is other.aggregation
                and self.applied_first == other.applied_first
                and mine == (other.path, other.x_shape, other.x_dtype, other.x_device, other.x_at, other.during)
                and self.exchanger_handle == other.exchanger_handle
                and _same_tensors(self.forward_args, other.forward_args))

    def input_of(self, conv: MessagePassing, args: tuple, kwargs: dict) -> Tensor | None:
        """The ``x`` of a call of ``conv`` with ``(args, kwargs)`` when it is the recorded one but for
        ``x``'s values, else ``None``."""
        x = _single_tensor(args, kwargs, self.adj)
        if x is None or tuple(x.shape) != self.x_shape or x.dtype != self.x_dtype or x.device != self.x_device:
            return None
        for name, value in self.after.items():
            if getattr(conv, name) != value:
                return None
        if self.applied is not None and conv._modules[self.applied_first] is not self.applied.linear:
            return None
        return None if conv.explain or _hook_ids(conv) != self.hooks else x

    def forward(self, conv: MessagePassing, x: Tensor) -> Any:
        """The layer's ``forward`` on the recorded arguments with ``x``, its ``propagate`` :meth:`propagate`."""
        args, kwargs = self.forward_args
        at = self.x_at
        if isinstance(at, int):
            args = args[:at] + (x,) + args[at + 1:]
        else:
            kwargs = {**kwargs, at: x}
        state = conv._sparsecomm
        state.tracing = self
        for name, value in self.during.items():
            if value != self.after[name]:
                setattr(conv, name, value)
        if self.applied is not None:  # its weight applied before the SpMM (propagate), its bias after
            conv._modules[self.applied_first] = self.applied
        try:
            return conv.forward(*args, **kwargs)
        finally:
            state.tracing = None
            if self.applied is not None:
                conv._modules[self.applied_first] = self.applied.linear
            for name, value in self.after.items():
                if value != self.during[name]:
                    setattr(conv, name, value)

    def propagate(self, conv: MessagePassing, edge_index: Tensor, kwargs: dict[str, Any]) -> Tensor:
        """The traced call's ``propagate``: a linear aggregation as the eager call's CSR product of
        ``[owned | halo]`` rows (:func:`~.traced_spmm.local_spmm`; the recorded graph is the one it
        multiplied with), an attention one PyG's over ``[owned | halo]`` sources."""
        plan = conv._sparsecomm.plan
        if self.path == "attention":
            kwargs = self._with_halo(conv, kwargs, plan.message_sources, first=False)
            return pyg_propagate(conv)(edge_index, size=(self.num_cols, self.num_owned), **kwargs)
        x = kwargs["x"]
        rows = (x[0] if isinstance(x, (tuple, list)) else x).contiguous()
        if self.applied is not None:  # (A x) W^T = A (x W^T): the narrower rows, as the eager call
            rows = torch.nn.functional.linear(rows, linear_weight(self.applied, "linear"))
        return local_spmm(torch.cat([rows, self.halo(rows)], 0), self.aggregation_handle)

    def edge_update(self, conv: MessagePassing, edge_index: Tensor, kwargs: dict[str, Any]) -> Any:
        """The traced call's ``edge_updater``: PyG's over ``[owned | halo]`` sources (the call's first exchange)."""
        kwargs = self._with_halo(conv, kwargs, conv._sparsecomm.plan.edge_update_sources, first=True)
        return pyg_edge_updater(conv)(edge_index, size=(self.num_cols, self.num_owned), **kwargs)

    def _with_halo(self, conv: MessagePassing, kwargs: dict[str, Any], names: tuple[str, ...],
                   first: bool) -> dict[str, Any]:
        """``kwargs`` where each source tensor of ``names`` is ``(cat[owned, halo], targets)``."""
        out = dict(kwargs)
        for name in names:
            value = kwargs.get(name)
            src, dst = value if isinstance(value, (tuple, list)) else (value, value)
            if isinstance(src, Tensor):
                flat = src.reshape(src.size(0), math.prod(src.shape[1:]))  # (an empty part too)
                halo = self.halo(flat) if first else self.plain_halo(flat)
                halo = halo.view((halo.size(0),) + tuple(src.shape[1:]))
                out[name], first = (torch.cat([src, halo], 0), dst), False
        return out

    def halo(self, rows: Tensor) -> Tensor:
        """The halo rows of ``rows`` by the call's first exchange: at run time the call's check stage
        around the exact exchange (:meth:`around_exchange`), one op; none on one rank.  Rows needing no
        gradient (a model's input features) reuse the layer's static halo as an eager call does
        (:class:`~.port.StaticHalo`: fetched again when they or a peer's changed)."""
        if not self.exchanger_handle:
            return rows.new_zeros((0,) + tuple(rows.shape[1:]))
        handle = self.handle if rows.requires_grad else self.static_handle
        return traced_exchange.halo_exchange(rows, self.exchanger_handle, handle)

    def plain_halo(self, rows: Tensor) -> Tensor:
        """The halo rows of ``rows`` by a later exchange of the call (one op; none on one rank)."""
        if not self.exchanger_handle:
            return rows.new_zeros((0,) + tuple(rows.shape[1:]))
        return traced_exchange.halo_exchange(rows, self.exchanger_handle)

    def around_exchange(self, exchange: Callable[[Tensor], Tensor], rows: Tensor) -> Tensor:
        """At run time (inside the op): the call's check stage, its first exchange, the watch's end."""
        conv = self.conv_ref()
        if conv is None:
            raise RuntimeError("pyg_sparsecomm: the layer of a traced steady-state call is gone")
        state = conv._sparsecomm
        call = self.make_call(conv, state, self.adj)
        args, kwargs = self.check_args
        check_stage(call, args, kwargs)
        try:
            return exchange(rows)
        finally:
            if call.key is not None:
                state.port.watch.end(call.key)


class _StaticRows:
    """A record's first exchange of rows needing no gradient, at run time: :meth:`~.port.HaloPort.static_halo`."""

    def __init__(self, record: SteadyRecord) -> None:
        self.record = weakref.ref(record)

    def around_exchange(self, exchange: Callable[[Tensor], Tensor], rows: Tensor) -> Tensor:
        record = self.record()
        conv = None if record is None else record.conv_ref()
        if record is None or conv is None:
            raise RuntimeError("pyg_sparsecomm: the layer of a traced steady-state call is gone")
        port, settings = conv._sparsecomm.port, conv._sparsecomm.settings
        return record.around_exchange(lambda r: port.static_halo("x", r, r, port.shard(record.adj, settings)), rows)


def _position(forward_args: tuple, x: Tensor) -> int | str:
    args, kwargs = forward_args
    for i, a in enumerate(args):
        if a is x:
            return i
    for k, v in kwargs.items():
        if v is x:
            return k
    raise ValueError("x is not among the forward's arguments")


def _replaced(call_args: tuple, x: Tensor, by: Tensor) -> tuple[tuple, dict]:
    args, kwargs = call_args
    return tuple(by if a is x else a for a in args), {k: (by if v is x else v) for k, v in kwargs.items()}


def _same_tensors(a: tuple, b: tuple) -> bool:
    (args_a, kwargs_a), (args_b, kwargs_b) = a, b
    if len(args_a) != len(args_b) or kwargs_a.keys() != kwargs_b.keys():
        return False
    pairs = list(zip(args_a, args_b, strict=True)) + [(kwargs_a[k], kwargs_b[k]) for k in kwargs_a]
    return all(u is v or (isinstance(u, Tensor) and isinstance(v, Tensor) and u.shape == v.shape
                          and u.dtype == v.dtype and torch.equal(u, v)) or (u is None and v is None)
               for u, v in pairs)


def _single_tensor(args: tuple, kwargs: dict, adj: HaloAdj) -> Tensor | None:
    """The call's one tensor argument (``x``) when its only other is ``adj``, else ``None``."""
    found = None
    for v in (*args, *kwargs.values()):
        if v is adj or v is None:
            continue
        if isinstance(v, Tensor) and found is None:
            found = v
        elif isinstance(v, (Tensor, HaloAdj, tuple, list, dict)):
            return None
    return found


def record(call: Any, make_call: Callable[..., Any]) -> None:
    """Leaves ``call``'s :class:`SteadyRecord` on its layer when the record reproduces it (see the
    module doc), else none; a record equal to the kept one keeps that one.

    Args:
        call (LayerCall): an eager call that ended.
        make_call (callable): ``(conv, state, adj) -> LayerCall``.
    """
    conv, state, adj = call.conv, call.state, call.adj
    forward_args, during, path = call.forward_args, call.during, call.steady_path
    call_args = call.call_args
    x = None if call_args is None else _single_tensor(call_args[0], call_args[1], adj)
    shard = call.shard
    if (forward_args is None or during is None or x is None or path not in ("spmm", "attention")
            or during.get("cached") or not only_own_hooks(conv)
            or adj.is_minibatch or adj.value is not None or shard is None
            or type(adj) is not HaloAdj or not _position_ok(forward_args, x) or (x.dim() != 2 and conv.node_dim != 0)
            or (shard.normalisation is not None and (shard.normalisation.normalise is not None
                                                     or shard.normalisation.graph is not None))):
        state.steady = None
        return
    if path == "attention":  # the traced forward gets the graph with the layer's self-loops, adds none
        if conv.node_dim != 0 or during.get("add_self_loops") is None:
            state.steady = None
            return
        forward_args = _replaced(forward_args, shard.edge_index, call.looped)
        during = {**during, "add_self_loops": False}
    aggregation = state.port.last_aggregation() if path == "spmm" else None
    if path == "spmm" and (aggregation is None or (aggregation.value is not None
                                                    and aggregation.value.requires_grad)):
        state.steady = None
        return
    new = SteadyRecord(conv, adj, call_args, forward_args, x, during, make_call, path, aggregation,
                       call.applied_first or None)
    kept = state.steady
    state.steady = kept if kept is not None and kept.same(new) else new


def _position_ok(forward_args: tuple, x: Tensor) -> bool:
    args, kwargs = forward_args
    return any(a is x for a in (*args, *kwargs.values()))


def note_propagate(call: Any, edge_index: Any, kwargs: dict[str, Any]) -> None:
    """An eager call's ``propagate`` (under ``torch.compile``): the path it takes, if a record reproduces it.

    Args:
        call (LayerCall): the running call.
        edge_index (Tensor): the graph ``propagate`` got.
        kwargs (dict): its other arguments.
    """
    conv, plan, state, shard = call.conv, call.plan, call.state, call.shard
    before, call.steady_path = call.steady_path, False  # a second propagate, or another path: no record
    if getattr(conv, "explain", False) or not _traces_exchange(state, shard):
        return
    call.during = {name: getattr(conv, name) for name in NORMALISATION_ATTRIBUTES if hasattr(conv, name)}
    if (before is None and plan.spmm_weight is not None and isinstance(kwargs.get("x"), (Tensor, tuple, list))
            and state.port.traces_spmm(shard, state.settings)):
        call.steady_path = "spmm"
    elif (before == "edge_update" and plan.attention_weight is not None and edge_index is call.looped
          and isinstance(kwargs.get(plan.attention_weight), Tensor)):
        call.steady_path = "attention"


def note_edge_update(call: Any, edge_index: Any) -> None:
    """An eager call's ``edge_updater`` (under ``torch.compile``): only before the call's one ``propagate``."""
    call.steady_path, call.looped = ("edge_update" if call.steady_path is None else False), edge_index


def _traces_exchange(state: Any, shard: Any) -> bool:
    """Exact halos, not replicated, over the shard's traced exchanger (or one rank)."""
    settings = state.settings
    return bool(shard is not None and settings.halo_options.exact and not settings.replicated
                and (shard.world == 1 or getattr(shard.exchanger, "handle", "")))


def traced_call(conv: MessagePassing, args: tuple, kwargs: dict) -> Any:
    """:class:`~.call.EagerCall` as dynamo traces it: a call matching the layer's record as
    :meth:`SteadyRecord.forward`, else eagerly (one graph break), leaving the record."""
    steady = conv._sparsecomm.steady
    x = None if steady is None else steady.input_of(conv, args, kwargs)
    if x is not None:
        return steady.forward(conv, x)
    return _recording_call(conv, args, kwargs)


def traced_method(method: Any, edge_index: Any, size: Any, kwargs: dict) -> Any:
    """:class:`~.call.InstanceMethod` as dynamo traces it: a steady-state call's traced ``propagate``, else
    eagerly.  Also run eagerly within a steady-state call whose trace dynamo broke (its remaining code runs
    as Python): the record's ops run eagerly just as well."""
    tracing = method.conv._sparsecomm.tracing
    if tracing is None:
        return _eager_method(method.function, method.conv, edge_index, size, kwargs)
    if method.traced:
        return tracing.propagate(method.conv, edge_index, kwargs)
    return tracing.edge_update(method.conv, edge_index, kwargs)


@torch.compiler.disable
def _eager_method(function: Any, conv: MessagePassing, edge_index: Any, size: Any, kwargs: dict) -> Any:
    return function(conv, edge_index, size, **kwargs)


@torch.compiler.disable(reason="a distributed layer runs eagerly, but in its steady state (see steady_call): its "
                               "hooks hold per-call Python state and collectives (halo exchanges, first-use checks)")
def _recording_call(conv: MessagePassing, args: tuple, kwargs: dict) -> Any:
    """The eager call of a layer that dynamo traced, which leaves its steady-state record."""
    state = conv._sparsecomm
    state.recording = True
    try:
        return module_call(conv)(*args, **kwargs)
    finally:
        state.recording = False
        retrace_above(state)  # the frames dynamo ran as Python around this break: traced again (outer_frames)
