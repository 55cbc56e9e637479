"""The checks of every call of a distributed layer on a shard, agreed by all ranks.

A call's own checks (edge arguments in the shard's edge order, the shard's rows of ``x``, a
``cached=True`` layer on the shard it cached) run on this rank; the ranks agree on what they found
as the module doc of :mod:`.first_use` describes (:func:`check_call`): a layer's first call on a
shard runs :func:`~.first_use.check_first_use`, later calls agree on three flags on the host.
"""
import inspect
import weakref
from typing import Any

import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...comm.group import host_all_reduce, is_distributed, raise_together, world_size
from ...plan.halo_adj import HaloAdj
from ...plan.homogeneous import RankPlan
from ...sampling.sampled_adj import SampledAdj
from .first_use import _digest, check_batch_inputs, check_first_use, check_parameters, parameter_digest
from .plan import forward_signature

#: attributes in which PyG's ``cached=True`` layers keep what they computed from the first graph
CACHE_ATTRIBUTES = ("_cached_edge_index", "_cached_adj_t", "_cached_x", "_cached_h", "_cached_spmm")


class CheckedPlan:
    """What a layer's checks passed on: the plan of its last full-graph first-use check, held
    weakly (it must not keep a shard alive, travel with ``layer.to(device)`` or be pickled with the
    layer: a copy checks again), and whether its parameters were compared across the ranks.

    A mini-batch's plan is new every step, so mini-batch calls are not keyed on it: the layer's
    first mini-batch call compares its parameters once (:func:`check_parameters`; a watched call, also
    its features: :func:`~.first_use.check_batch_inputs`, again when its :func:`call_key` changes,
    :attr:`batch_key`), and later batches only run the per-call checks."""

    def __init__(self) -> None:
        self._ref: weakref.ref | None = None
        self.parameters = False  # the ranks' parameters were found equal (a first-use check passed)
        self.batch_key: tuple | None = None  # the mini-batch call key whose features were agreed

    def is_(self, plan: RankPlan) -> bool:
        ref = self._ref
        return ref is not None and ref() is plan

    def set(self, plan: RankPlan) -> None:
        self._ref = weakref.ref(plan)
        self.parameters = True

    def __getstate__(self) -> dict:
        return {"_ref": None, "parameters": False, "batch_key": None}


def shard_key(adj: HaloAdj) -> tuple:
    """What a cached layer depends on: the owned and halo ids and the local structure."""
    plan = adj.plan
    return (plan.world_size, plan.num_nodes, _digest(plan.n_id), _digest(plan.halo_n_id), _digest(adj.rowptr),
            _digest(adj.col))


def node_features(arguments: dict[str, Any], args: tuple) -> Any:
    """The call's ``x`` (the source side of an ``(x_src, x_dst)`` pair), or its first tensor argument.

    Args:
        arguments (dict): the call's bound ``forward`` arguments.
        args (tuple): its positional arguments.
    """
    x = arguments.get("x", next((v for v in args if isinstance(v, Tensor)), None))
    return x[0] if isinstance(x, (tuple, list)) and x else x


_EDGE_ARGUMENTS = ("edge_weight", "edge_attr", "edge_type")


def check_edge_arguments(conv: MessagePassing, arguments: dict[str, Any], adj: HaloAdj) -> None:
    """Edge-level arguments must be the shard's, in ``adj``'s edge order (``local.edge_weight``...).

    Args:
        conv (MessagePassing): the layer.
        arguments (dict): the call's bound ``forward`` arguments.
        adj (HaloAdj): the adjacency of the call.
    """
    for name in _EDGE_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, Tensor) and value.dim() > 0 and value.size(0) != adj.nnz:
            raise ValueError(f"{type(conv).__name__}: {name} has shape {list(value.shape)}: {value.size(0)} rows but "
                             f"this rank's adjacency has {adj.nnz} edges: pass the shard's local.{name} (in "
                             f"local.adj's edge order)")


def check_rows(conv: MessagePassing, x: Any, adj: HaloAdj) -> None:
    """``x`` must hold the shard's rows."""
    node_dim = conv.node_dim if conv.node_dim >= 0 else conv.node_dim + (x.dim() if isinstance(x, Tensor) else 0)
    if isinstance(x, Tensor) and 0 <= node_dim < x.dim() and x.size(node_dim) != adj.num_owned:
        raise ValueError(f"{type(conv).__name__}: x has {x.size(node_dim)} rows but this rank owns "
                         f"{adj.num_owned} rows (of {adj.plan.num_nodes} in the graph): pass the shard's rows, local.x")


def check_cache(conv: MessagePassing, adj: HaloAdj, cached_key: tuple | None) -> tuple | None:
    """The key of the shard a ``cached=True`` layer's cache holds (``None`` for other layers).

    Such a layer reuses what it computed from the first shard (PyG's semantics); on another shard
    that is silently wrong, so this raises naming the fix."""
    if not getattr(conv, "cached", False):
        return None
    key = shard_key(adj)
    filled = any(getattr(conv, name, None) is not None for name in CACHE_ATTRIBUTES)
    if filled and cached_key is not None and key != cached_key:
        raise ValueError(f"{type(conv).__name__}(cached=True) reuses the normalised adjacency of the shard it first "
                         f"ran on, but is now called with another shard (another partition or graph): build the "
                         f"layer with cached=False, or one layer per shard")
    return key


def check_first_call(conv: MessagePassing, arguments: dict[str, Any], args: tuple, adj: HaloAdj,
                     cached_key: tuple | None, group: dist.ProcessGroup | None,
                     collective: bool = True) -> tuple | None:
    """The checks of a layer's first call on a shard: this rank's (edge arguments, rows of ``x``,
    a cached layer's shard) and the consistency of every rank's, agreed over ``group``; returns the
    key of the shard a ``cached=True`` layer now holds (see :func:`check_cache`)."""
    x = node_features(arguments, args)
    key = [cached_key]

    def local_checks() -> None:
        check_edge_arguments(conv, arguments, adj)
        check_rows(conv, x, adj)
        key[0] = check_cache(conv, adj, cached_key)

    check_first_use(type(conv).__name__, adj, x, local_checks, group, collective, parameter_digest(conv))
    return key[0]


def check_call(conv: MessagePassing, args: tuple, kwargs: dict, adj: HaloAdj, checked: CheckedPlan,
               cached_key: tuple | None, group: dist.ProcessGroup | None, collective: bool = True,
               signature: inspect.Signature | None = None, key: tuple | None = None) -> tuple | None:
    """The checks of every call of a distributed layer, agreed over ``group`` (see the module doc).

    Args:
        conv (MessagePassing): the layer.
        args (tuple): the call's positional arguments.
        kwargs (dict): the call's keyword arguments.
        adj (HaloAdj): the shard's (or a mini-batch's) adjacency of the call.
        checked (CheckedPlan): the plan the first-use check passed on; set to ``adj``'s when it runs and
            passes (on a mini-batch: whether the parameters were compared, see :class:`CheckedPlan`).
        cached_key (tuple or None): the shard a ``cached=True`` layer's cache holds (:func:`check_cache`).
        group (torch.distributed.ProcessGroup or None): the process group of the layer's exchanges.
        collective (bool, optional): ``False``: this rank's checks only (1.5D layouts, whose shards
            ``exchange_group`` checks, or a group of one rank). (default: :obj:`True`)
        signature (inspect.Signature, optional): the signature of the layer's ``forward``.
            (default: :obj:`None`, computed from its class)
        key (tuple, optional): the call's :func:`call_key` on a mini-batch whose checks the halo header
            carries (a new key: every rank compares the features and parameters). (default: :obj:`None`)

    Returns:
        the key of the shard a ``cached=True`` layer now holds.

    Raises:
        ValueError: on every rank, if a check failed on any rank.
    """
    arguments = (signature or forward_signature(type(conv))).bind_partial(conv, *args, **kwargs).arguments
    new = not checked.is_(adj.plan) if not adj.is_minibatch else key is not None and key != checked.batch_key
    unchecked_parameters = adj.is_minibatch and not checked.parameters  # once per layer, not per batch
    if not collective or not is_distributed(group) or world_size(group) == 1:
        if new and not adj.is_minibatch:
            cached_key = check_first_call(conv, arguments, args, adj, cached_key, group, collective)
            checked.set(adj.plan)
        else:
            _later_checks(conv, arguments, args, adj)
        return cached_key
    error = None
    try:
        _later_checks(conv, arguments, args, adj)
    except ValueError as e:
        error = e
    some_new, some_unchecked, some_failed = host_all_reduce(
        [int(new), int(unchecked_parameters), int(error is not None)], dist.ReduceOp.MAX, group)
    if some_new and not adj.is_minibatch:  # every rank checks its shard against the others' (one all-gather)
        cached_key = check_first_call(conv, arguments, args, adj, cached_key, group, collective)
        checked.set(adj.plan)
    elif some_failed:
        def local() -> None:
            if error is not None:
                raise error
        raise_together(local, f"{type(conv).__name__} (a later call on this shard)", group)
    elif some_new:  # a watched mini-batch call of new inputs on some rank: features and parameters (one all-gather)
        check_batch_inputs(type(conv).__name__, node_features(arguments, args), parameter_digest(conv), group,
                           checked.parameters)
        checked.parameters, checked.batch_key = True, key
    elif some_unchecked:  # a layer's first mini-batch: its parameters must be every rank's
        check_parameters(type(conv).__name__, parameter_digest(conv), group)
        checked.parameters = True
    return cached_key


#: the first entry of a mini-batch call's key (:func:`call_key`)
MINIBATCH = "minibatch"


def call_key(conv: MessagePassing, args: tuple, kwargs: dict, adj: HaloAdj, state: Any) -> tuple:
    """What the checks of a call on a full-graph shard read: the shard's plan (by identity) and
    size, the shapes of the edge arguments, the shape, dtype and device of ``x``.  Equal keys, equal
    verdicts: a call with the key of the last agreed one need not agree again (:class:`AgreementWatch`).
    On a mini-batch (a new plan and new sizes every batch) what stays from batch to batch: the shapes
    after the first dimension, and whether this rank's checks of the edge arguments pass (a failing
    one changes the key, so the call agrees and every rank raises).

    Args:
        conv (MessagePassing): the layer.
        args (tuple): the call's positional arguments.
        kwargs (dict): its keyword arguments.
        adj (HaloAdj): the adjacency of the call.
        state (LayerState): what the layer keeps (its plan's ``forward`` signature).
    """
    arguments = state.plan.signature.bind_partial(conv, *args, **kwargs).arguments
    x = arguments["x"] if "x" in arguments else node_features(arguments, args)
    if isinstance(x, (tuple, list)) and x:
        x = x[0]
    edges: list[Any] = []
    plan = adj.plan  # (its fields, not the adjacency's properties: a hot path)
    if plan.minibatch:
        for name in _EDGE_ARGUMENTS:
            value = arguments.get(name)
            edges.append((tuple(value.shape[1:]), value.dim() == 0 or value.size(0) == adj.col.numel())
                         if isinstance(value, Tensor) else None)
        features = (tuple(x.shape[1:]), x.dtype, x.device) if isinstance(x, Tensor) else None
        return (MINIBATCH, features, tuple(edges))
    for name in _EDGE_ARGUMENTS:  # a loop, not a generator: no frame per call
        value = arguments.get(name)
        edges.append(tuple(value.shape) if isinstance(value, Tensor) else None)
    features = (tuple(x.shape), x.dtype, x.device) if isinstance(x, Tensor) else None
    return (id(plan), adj.col.numel(), plan.num_owned, features, tuple(edges))


def check_stage(call: Any, args: tuple, kwargs: dict, at: Any = None) -> tuple[tuple, dict]:
    """The check stage of a :class:`~.call.LayerCall`: the checks of :func:`check_call`, agreed by
    every rank when the call's :func:`call_key` changed since the last agreed call, else by the
    header of its first exchange (:class:`AgreementWatch`); and the checks of this rank alone.
    Returns ``(args, kwargs)`` unchanged (a stage of a :class:`~.plan.CallPath`).

    Args:
        call (LayerCall): the call on a shard.
        args (tuple): its positional arguments.
        kwargs (dict): its keyword arguments.
        at (int or str, optional): where they hold the adjacency (unused). (default: ``None``)
    """
    conv, state, adj = call.conv, call.state, call.adj
    if getattr(conv, "explain", False):
        raise ValueError(f"{type(conv).__name__} is in explain mode (set by PyG's Explainer), whose edge masks "
                         f"cover the whole graph's edges; a shard's layer cannot apply them: explain on one "
                         f"process with the whole graph, or set conv.explain = False")
    settings, port, plan = state.settings, state.port, adj.plan
    collective, watchable = port.check_modes(settings, call.plan, adj)
    call.key = call_key(conv, args, kwargs, adj, state) if watchable else None
    watch = port.watch
    checked = state.checked_plan._ref  # (CheckedPlan.is_, inline: a hot path)
    if call.key is None or call.key != watch.key or not (plan.minibatch or (checked is not None and checked() is plan)):
        if collective and watch.key is not None:
            port.announce_change(settings, adj)  # peers in a steady-state call wait in its first exchange
        watch.forget()
        agree(call, args, kwargs)
    if call.key is not None:  # (watch.begin, inline: a hot path)
        watch.armed, watch.headered, watch.agree = True, False, lambda: agree(call, args, kwargs)
    if plan.minibatch or isinstance(adj, SampledAdj):
        _minibatch_checks(conv, settings, adj)
    return args, kwargs


def _minibatch_checks(conv: MessagePassing, settings: Any, adj: HaloAdj) -> None:
    """What a mini-batch call of a layer may not be: a cached layer's, a stale exchange's."""
    if isinstance(adj, SampledAdj) and getattr(conv, "cached", False):
        raise ValueError(f"{type(conv).__name__}(cached=True) keeps the normalised adjacency of the first graph "
                         f"it sees, but every mini-batch is another graph: build the layer with cached=False")
    if settings.halo_options.staleness and adj.is_minibatch:
        raise ValueError("staleness needs full-graph training on the same shard: every mini-batch is another "
                         "graph with another halo, so the previous step's halo rows cannot stand in; use "
                         "staleness=0 with mini-batch loaders")


def agree(call: Any, args: tuple, kwargs: dict) -> None:
    """The checks of :func:`check_call` of a layer call, agreed by every rank."""
    state = call.state
    state.cached_key = check_call(call.conv, args, kwargs, call.adj, state.checked_plan, state.cached_key,
                                  state.settings.group, state.port.check_modes(state.settings, state.plan, call.adj)[0],
                                  state.plan.signature, call.key)


def _later_checks(conv: MessagePassing, arguments: dict[str, Any], args: tuple, adj: HaloAdj) -> None:
    """This rank's checks of a call after the first on its shard: the edge arguments and (full-graph
    shards: a mini-batch's rows are trimmed per layer) the rows of ``x``."""
    check_edge_arguments(conv, arguments, adj)
    if not adj.is_minibatch:
        check_rows(conv, node_features(arguments, args), adj)


#: :attr:`AgreementWatch.previous` after a call whose first exchange filled a cache (a one-off)
_FILLED = ("filled",)


class AgreementWatch:
    r"""What lets a layer's steady-state calls skip the agreed checks: its agreement is carried by
    the header of the call's first halo exchange (:func:`~pyg_sparsecomm.comm.halo.headered_exchange`).

    The checks of a layer call are agreed by every rank so that a bad input on one rank is every
    rank's ``ValueError``, never a peer waiting in the exchange.  A steady-state call (the
    :func:`call_key` of the last agreed call: the same shard, edge arguments of the same shapes,
    ``x`` of the same shape, dtype and device) would agree on the same verdict again, so it runs no
    collective but its exchange, whose first one carries one header row per peer.  A rank whose
    key changed first sends the peers' steady-state first exchange (:attr:`recorded` at the last
    call) with the flag set (``HaloPort.announce_change``), then runs :func:`check_call`; a rank
    receiving a set flag drops the halo, runs :func:`check_call` too (which raises on every rank,
    naming the rank and the fix, or passes) and exchanges again.  Calls whose first collective may
    be another one agree every call, as before: compressed or stale halos, rules with
    an adapter, SpMM algorithms other than ``"1d"``, tensors off the CPU, and any call whose first
    collective turned out not to be the headered exchange (a reused static halo agreeing on its
    reuse, a fold of out-degrees: :meth:`taint`).  A key counts as agreed from the second call in a
    row whose first exchange was the same (a ``cached=True`` layer exchanges degrees first only at
    its first call).  Correct programs change keys on every rank together: all announce, all agree.

    Mini-batch calls are watched too (issue 56): their plan is new every batch, so their key is what
    stays (:func:`call_key`: the rows' shapes after the first dimension, this rank's verdict on the
    edge arguments); a steady call is one whose first exchange had the previous call's trailing shape
    and dtype, and a rank announcing sends its rows over the current batch's plan (every rank's
    first exchange of the call runs over it), in the shape and dtype recorded.
    """

    def __init__(self) -> None:
        self.key: tuple | None = None  # the key of the last agreed call (None: the next call agrees)
        self.recorded: tuple | None = None  # (send counts, recv counts, shape, dtype) of its first exchange
        self.previous: tuple | None = None  # the same of the call before
        self.armed = False  # the running call's next exchange is its first
        self.headered = False  # the running call's first collective was the headered exchange
        self.agree: Any = None  # the running call's agreed checks
        self.headered_plan: tuple[Any, Any] | None = None  # (plan, HeaderedPlan) of the last plan
        #: the running call's first exchange fills a cache (a normalisation's degrees, see
        #: normalisation.kept_normalisation): the next call's first exchange is its steady one
        self.filled = False

    def __getstate__(self) -> dict:
        return {**self.__dict__, "key": None, "recorded": None, "previous": None, "armed": False,
                "headered": False, "agree": None, "headered_plan": None, "filled": False}

    def forget(self) -> None:
        """The next call agrees (and announces nothing): every rank's watch is off together."""
        self.key, self.headered = None, False

    def begin(self, agree: Any) -> None:
        """A call that may watch starts: ``agree()`` runs its agreed checks when a peer asks."""
        self.armed, self.headered, self.agree = True, False, agree

    def taint(self) -> None:
        """The running call's first collective is not the headered exchange: the next call agrees."""
        self.armed = False

    def replans(self, adj: HaloAdj) -> bool:
        """Whether a rank announcing a change sends its recorded rows over ``adj``'s plan (a watched
        mini-batch: every rank's first exchange of the call runs over the current batch's plan)."""
        return adj.is_minibatch and self.key is not None and self.key[0] == MINIBATCH

    def end(self, key: tuple | None) -> None:
        """The call ended: ``key`` is agreed if its first collective was the headered exchange, the
        same as the previous call's."""
        recorded, previous = self.recorded, self.previous
        if key is not None and key[0] == MINIBATCH and recorded is not None and previous is not None \
                and previous is not _FILLED:
            recorded, previous = recorded[2:], previous[2:]  # a new batch, new counts: the same rows' shape
        steady = self.headered and (previous is _FILLED or recorded == previous)
        self.previous = (_FILLED if self.filled else self.recorded) if self.headered else None
        self.key = key if steady else None
        self.armed, self.agree, self.filled = False, None, False
