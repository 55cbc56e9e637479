r"""Layers of heterogeneous models on a rank's shard: one exchange per source node type.

PyG's ``to_hetero`` and ``HeteroConv`` call one copy of a layer per relation :math:`(s, r, d)`
with ``(x_src, x_dst)`` (``x`` when :math:`s = d`) and the relation's graph; on a shard that
graph is a :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj` whose columns are
``[owned | halo]`` of the source type, the halo being the union over every relation reading
:math:`s`.  The layer's forward pre-hook (:func:`enter_relation`) completes the source rows,

.. math::
    x_{src} \mapsto \begin{bmatrix} x_{src} \\ x_{src}[\mathrm{halo}(s)] \end{bmatrix},

and hands the layer the local ``edge_index``; the layer then runs as plain PyG on the local
bipartite graph (sources ``[owned | halo]``, targets the owned destination rows), which holds
every in-edge of its targets, so its messages, softmaxes and aggregations are exact whatever
the layer does to each source row.  The completed rows are kept for the rest of the model call
(:class:`SourceHalos`, keyed by the tensor's identity and version and the source plan): every
relation reading the same ``x_dict[s]`` reuses them, so a layer moves each source type's halo
once, a row read by three relations once, and autograd sums the three relations' gradients of
it into one reverse exchange.  The rows travel at the source tensor's width (a relation's own
transform runs after the exchange, on the owned and halo rows alike): per-relation transforms
differ, so exchanging after them would move the union once per relation.

Layers that take the whole graph (``HGTConv``, ``HANConv``) complete their sources themselves,
through :mod:`.relation_dict`, with :func:`check_relations` below.

Covered layers (:data:`RELATION_LAYERS`) are those whose bipartite forward reads the graph
only through ``propagate``/``edge_updater``; any other layer called on a relation is refused
by name, as are halo compression, staleness, 1.5D and algorithms other than ``"1d"``.

Layers of PyG's degree-normalised family (:data:`SAME_TYPE_LAYERS`: ``GCNConv``, ``SGConv``,
``TAGConv``, ``SSGConv``, ``LGConv``, ``ARMAConv`` with ``gcn_norm``, ``ChebConv`` with its Laplacian) take one
node set: PyG calls them only on relations :math:`(s, r, s)`, with ``x_dict[s]``, and raises
``ValueError`` (``"does not support bipartite message passing"``) for the ``(x_src, x_dst)`` pair of
a relation between two types; so does :func:`enter_own_type`, naming the relation. On a relation
:math:`(s, r, s)` the block is square over the owned rows of :math:`s` (:math:`\hat D^{-1/2} \hat A
\hat D^{-1/2}` of that relation alone: self-loops and the weighted in-degree :math:`\hat d_i`
counted within the relation, from its ``edge_weight`` only, as PyG's edge-index call; ``ChebConv``:
the relation's Laplacian), and the layer runs as on a homogeneous shard (:mod:`.call`,
:mod:`.degree_norm`): :math:`\hat d_i` is local to the owner of :math:`i`, the halo's :math:`\hat
d_j^{-1/2}` come in one one-column exchange (once, with ``cached=True``; ``ChebConv``'s out-degrees
are folded into their owners first), and the propagation is the distributed SpMM of the rows the
layer propagates: ``GCNConv``'s *transformed* rows :math:`x W^\top` (``out_channels`` wide); the
others propagate what their own forward propagates (``SGConv``/``TAGConv``/``SSGConv``/``ChebConv``:
:math:`x` itself, one exchange per hop at the width of ``x``; ``ARMAConv``: its transformed stacks).
That exchange is the relation's own, over its source type's halo: the union over every relation
reading :math:`s` (exact; rows no edge of this relation reads travel too), not shared with the
input-width exchange of the other relations of the layer. For ``GCNConv``, taking the shared
input-width rows instead would move nothing more only where another relation of the layer reads
:math:`s`, and otherwise ``in_channels`` columns where ``out_channels`` (usually fewer) suffice,
with ``x W^\top`` computed again on every halo row; the homogeneous path also keeps its SpMM, its
global degree normalisation and PyG's cache untouched. The stored ``local[edge_type].edge_weight``
is not applied unless passed (``edge_weight_dict`` of ``HeteroConv``, ``to_hetero``'s
``edge_weight`` argument), as PyG applies no weight it is not given.
"""
import threading
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import (
    ARMAConv,
    ChebConv,
    GATConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GraphConv,
    LGConv,
    MessagePassing,
    RGATConv,
    RGCNConv,
    SAGEConv,
    SGConv,
    SSGConv,
    TAGConv,
    TransformerConv,
)

from ...comm.group import check_plan_matches_group, host_all_reduce, is_distributed, world_size
from ...compat import tensor_version
from ...plan.homogeneous import RankPlan
from ...plan.relation_adj import RelationAdj
from .first_use import check_first_use, check_parameters, parameter_digest
from .plan import forward_signature
from .port import exchange_rows
from .state import LayerState

#: PyG layers checked against single-process PyG on relations of heterogeneous shards (by type: a
#: subclass may override what they rely on, and a user's class of the same name is another class)
RELATION_LAYERS = (SAGEConv, GraphConv, GATConv, GATv2Conv, GINConv, TransformerConv)
#: PyG layers of one node set (``gcn_norm``'s family) checked against single-process PyG on relations
#: whose source and destination types are the same (by type, as :data:`RELATION_LAYERS`)
SAME_TYPE_LAYERS = (GCNConv, SGConv, TAGConv, ChebConv, ARMAConv, SSGConv, LGConv)


class SourceHalos:
    """The completed source rows ``cat[x_src, halo]`` of one model call, per source tensor and plan."""

    def __init__(self) -> None:
        self.entries: list[tuple[Tensor, object, RankPlan, Tensor]] = []

    def extended(self, x_src: Tensor, plan: RankPlan, group: Any) -> Tensor:
        r"""``cat[x_src, halo]`` over ``plan``'s ``[owned | halo]`` columns, exchanged on the first
        request of this ``x_src`` (same object, same version) in the call.  Every rank takes the
        same decision: the model's code passes the same objects on every rank."""
        now = tensor_version(x_src)
        for src, version, known, ext in self.entries:
            if src is x_src and version == now and known is plan:
                return ext
        ext = torch.cat([x_src, exchange_rows(plan, group, [x_src])[0]], dim=0)
        self.entries.append((x_src, now, plan, ext))
        return ext


_local = threading.local()
#: modules whose calls keep completed source rows (:func:`install_scope`)
_SCOPED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


def _scopes() -> list[SourceHalos]:
    if not hasattr(_local, "scopes"):
        _local.scopes = []
    return _local.scopes


def _open(module: torch.nn.Module, args: tuple) -> None:
    _scopes().append(SourceHalos())


def _close(module: torch.nn.Module, args: tuple, output: Any) -> None:
    scopes = _scopes()
    if scopes:
        scopes.pop()


def is_heterogeneous(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds per-relation layers: a ``HeteroConv``, or ``to_hetero``'s
    ``ModuleDict`` of copies keyed ``src__rel__dst``."""
    from torch_geometric.nn import HeteroConv
    return any(isinstance(m, HeteroConv) or (isinstance(m, torch.nn.ModuleDict) and any("__" in k for k in m.keys()))
               for m in module.modules())


def install_scope(module: torch.nn.Module) -> None:
    """Keeps completed source rows for the duration of each call of ``module`` (the model given
    to ``distribute``, when :func:`is_heterogeneous`); idempotent.  Without it every relation
    exchanges its source type's halo itself (exact, but the union moves once per relation): call
    it on a heterogeneous model of your own structure."""
    if module not in _SCOPED:
        module.register_forward_pre_hook(_open)
        module.register_forward_hook(_close, always_call=True)
        _SCOPED.add(module)


#: PyG layers taking ``edge_type`` over one homogeneous graph (and their subclasses): refused on a relation, naming
#: the route that runs them (``data.to_homogeneous()``, partitioned and sharded)
RELATION_TYPED = (RGCNConv, RGATConv)  # FastRGCNConv is an RGCNConv


def refusal(conv: MessagePassing, state: LayerState) -> str | None:
    """Why ``conv`` cannot run on a relation of a heterogeneous shard, or ``None``."""
    if isinstance(conv, RELATION_TYPED):
        return (f"{type(conv).__name__} takes edge_type over one homogeneous graph, not a relation of a heterogeneous "
                f"one: call it on data.to_homogeneous() partitioned and sharded (local.edge_type is in local.adj's "
                f"edge order)")
    if type(conv) not in RELATION_LAYERS:
        return (f"{type(conv).__name__} on a relation of a heterogeneous graph is not supported yet (supported: "
                f"{', '.join(cls.__name__ for cls in RELATION_LAYERS)}; on relations between nodes of one type "
                f"also {', '.join(cls.__name__ for cls in SAME_TYPE_LAYERS)})")
    return settings_refusal(state)


def settings_refusal(state: LayerState) -> str | None:
    """Why the settings of ``distribute`` cannot run a layer on a heterogeneous shard, or ``None``."""
    settings = state.settings
    if settings.algorithm != "1d" or settings.replicated:
        return (f"heterogeneous graphs run the 1D exchange only (got algorithm={settings.algorithm!r}, "
                f"replication={settings.replication}): use algorithm='1d'")
    if not settings.halo_options.exact:
        return "halo compression and staleness are not supported for heterogeneous graphs yet"
    return None


def enter_own_type(conv: MessagePassing, state: LayerState, args: tuple, kwargs: dict, adj: RelationAdj) -> bool:
    """Whether ``conv`` runs on the relation ``adj`` as on a homogeneous shard (a layer of
    :data:`SAME_TYPE_LAYERS`; see the module doc), after checking the call: ``ValueError`` as PyG's
    for a relation between two node types or a pair ``(x_src, x_dst)``, ``NotImplementedError`` for
    settings the heterogeneous path does not run.  ``False``: :func:`enter_relation` takes the call."""
    if type(conv) not in SAME_TYPE_LAYERS:
        return False
    src, _, dst = adj.edge_type
    x = forward_signature(type(conv)).bind(conv, *args, **kwargs).arguments.get("x")
    if src != dst or isinstance(x, (tuple, list)):
        name = type(conv).__name__
        raise ValueError(f"{name} on relation {adj.edge_type}: '{name}' received a tuple of node features as input "
                         f"while this layer does not support bipartite message passing (PyG's ValueError for a "
                         f"relation from {src!r} to {dst!r}): use it on relations between nodes of one type, or "
                         f"try other layers such as 'SAGEConv' or 'GraphConv' instead")
    reason = settings_refusal(state)
    if adj.is_minibatch or adj.num_rows != adj.num_owned:  # a block over the source plan's rows only
        reason = f"{type(conv).__name__} on a relation of a heterogeneous mini-batch is not supported yet"
    if reason:
        raise NotImplementedError(f"distribute(): {reason}")
    return True


def enter_relation(conv: MessagePassing, state: LayerState, args: tuple, kwargs: dict, at: Any,
                   adj: RelationAdj) -> tuple[tuple, dict]:
    """The forward pre-hook's work for a call on a relation (see the module doc): ``(args, kwargs)``
    with ``x`` replaced by ``(cat[x_src, halo], x_dst)`` and ``adj`` by its local ``edge_index``."""
    reason = refusal(conv, state)
    if reason:
        raise NotImplementedError(f"distribute(): {reason}")
    plan = adj.plan
    group = state.settings.group
    check_plan_matches_group(plan.world_size, plan.rank, group)
    if isinstance(at, int):
        args = args[:at] + (adj.edge_index(),) + args[at + 1:]
    else:
        kwargs = {**kwargs, at: adj.edge_index()}
    bound = forward_signature(type(conv)).bind(conv, *args, **kwargs)
    x = bound.arguments.get("x")
    x_src, x_dst = x if isinstance(x, (tuple, list)) else (x, x)
    check_relations(conv, state, [(adj, x_src, x_dst)], group)
    scopes = _scopes()
    halos = scopes[-1] if scopes else SourceHalos()
    bound.arguments["x"] = (halos.extended(x_src, plan, group), x_dst)
    state.calls.append(None)  # the layer runs as plain PyG on the local bipartite graph
    return bound.args[1:], bound.kwargs


def check_relations(conv: MessagePassing, state: LayerState, relations: list[tuple[RelationAdj, Any, Any]],
                    group: dist.ProcessGroup | None) -> None:
    """:func:`_check_rows` of every ``(adj, x_src, x_dst)`` on every rank, agreed before any exchange
    (as :func:`~.checks.check_call` does for homogeneous layers): a layer's first call on a shard
    checks every rank's plans, features and the layer's parameters in one all-gather per source
    plan; later calls agree on flags on the host, so a rank's bad input is every rank's
    ``ValueError``, never a peer waiting in the exchange; the layer's first call on a mini-batch
    compares its parameters (:func:`~.first_use.check_parameters`), once, not per batch."""
    error: ValueError | None = None
    for adj, x_src, x_dst in relations:
        try:
            _check_rows(conv, adj, x_src, x_dst)
        except ValueError as e:
            error = error or e

    def local() -> None:
        if error is not None:
            raise error

    first = relations[0][0]  # a shard's relations are built together: its first plan names it
    new = not first.is_minibatch and not state.checked_plan.is_(first.plan)  # a batch's plan is new every step
    unchecked_parameters = first.is_minibatch and not state.checked_plan.parameters  # once per layer
    flags = [int(new), int(unchecked_parameters), int(error is not None)]
    if is_distributed(group) and world_size(group) > 1:
        some_new, some_unchecked, some_failed = host_all_reduce(flags, dist.ReduceOp.MAX, group)
    else:
        local()
        some_new = some_unchecked = some_failed = 0
    if some_new or some_failed:
        parameters = parameter_digest(conv)
        checked: list[RankPlan] = []
        for adj, x_src, _ in relations:
            if not any(adj.plan is plan for plan in checked):
                checked.append(adj.plan)
                check_first_use(f"{type(conv).__name__} on relation {adj.edge_type}", adj,
                                x_src if error is None else None, local, group, parameters=parameters)
    elif some_unchecked:  # the layer's first mini-batch: its parameters must be every rank's
        check_parameters(f"{type(conv).__name__} on relation {first.edge_type}", parameter_digest(conv), group)
        state.checked_plan.parameters = True
    if new:
        state.checked_plan.set(first.plan)


def _check_rows(conv: MessagePassing, adj: RelationAdj, x_src: Any, x_dst: Any) -> None:
    src, _, dst = adj.edge_type
    if not isinstance(x_src, Tensor) or x_src.size(0) != adj.num_owned:
        got = f"{x_src.size(0)} rows" if isinstance(x_src, Tensor) else type(x_src).__name__
        raise ValueError(f"{type(conv).__name__} on relation {adj.edge_type}: the source features have {got}, but "
                         f"this rank owns {adj.num_owned} {src!r} nodes: pass local.x_dict (or an embedding of "
                         f"local[{src!r}].n_id for a type without features)")
    if isinstance(x_dst, Tensor) and x_dst.size(0) != adj.num_rows:
        raise ValueError(f"{type(conv).__name__} on relation {adj.edge_type}: the destination features have "
                         f"{x_dst.size(0)} rows, but this rank owns {adj.num_rows} {dst!r} nodes")
