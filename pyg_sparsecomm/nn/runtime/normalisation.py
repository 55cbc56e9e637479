r"""The degree normalisation a PyG layer computes in its ``forward``, given to each distributed
instance with global degrees.

On a shard a layer's ``forward`` runs on a local ``edge_index`` whose sources are ``[owned |
halo]`` columns.  PyG's ``gcn_norm`` there would scale by local degrees and index the halo
sources past its ``num_nodes`` (the owned rows); :func:`~.degree_norm.gcn_norm` computes
:math:`\hat D^{-1/2} \hat A \hat D^{-1/2}` with global degrees.  PyG's modules are not touched
(a plain layer in the same process stays PyG's): each distributed instance gets the
normalisation through its class's rule (:class:`~pyg_sparsecomm.nn.rules.registry.GcnNormalisation`), by the first
of these that fits how the class's ``forward`` reaches ``gcn_norm``:

* ``pyg_cache`` with ``cached=True`` (``GCNConv``, ``GCN2Conv``, ``APPNP``, ``DNAConv``,
  ``FAConv``, ``EGConv``): these forwards call ``gcn_norm`` only while PyG's normalisation cache
  is empty and use the cache otherwise.  The forward pre-hook fills an empty cache with the
  distributed normalisation of the call's graph, so PyG's own code caches as it does: once per
  shard (the first-use check refuses another shard, :mod:`.first_use`), emptied by PyG's
  ``reset_parameters``.  The shard keeps one such normalisation per set of choices, which every
  cached layer normalising alike shares (:mod:`.shared_adjacency`);
* ``"arguments"`` (``GCNConv``, ``GCN2Conv``, ``APPNP``, ``DNAConv``, ``FAConv``, ``TAGConv``,
  ``LGConv``; any ``cached``): the forward normalises its graph arguments before using them.
  The pre-hook passes the normalised ``(edge_index, edge_weight)`` with ``normalize=False`` for
  this call only (the forward hook, which runs also when the forward raises, restores it);
* ``"propagate"`` (``PDNConv``, whose weights are ``mlp(edge_attr)``, computed in ``forward``):
  ``normalize=False`` for the call, and the ``propagate`` override normalises the graph
  ``propagate`` receives, which is the one ``gcn_norm`` would have received;
* ``"placeholder"`` (``SGConv``, ``SSGConv``, ``ARMAConv``, ``MixHopConv``,
  ``LabelPropagation``, ``EGConv`` uncached; and ``ChebConv``'s ``__norm__``, see
  :func:`~.adapters.cheb_laplacian`): these normalise without a flag to turn off.  The
  forward gets an empty ``edge_index`` and no weight, which PyG's normalisation maps, harmlessly,
  to self-loops of the owned rows at most, and the ``propagate`` override replaces the graph it
  receives by the distributed normalisation of the call's real one.  These forwards use the
  graph for nothing but ``propagate``.

A call's ``"propagate"``/``"placeholder"`` normalisation is computed at its first
``propagate`` and reused by the others (``TAGConv``'s and ``SGConv``'s hops); a cached
``SGConv`` that reuses its output propagates, and so normalises, nothing.
"""
import weakref
from collections.abc import Callable
from inspect import BoundArguments
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...compat import gcn_norm_cache, set_gcn_norm_cache, tensor_version
from ..rules.registry import GcnNormalisation
from . import degree_norm
from .aggregation import linear_weight_arg
from .checks import shard_key
from .port import Shard
from .shared_adjacency import shared_normalisation

Normalise = Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor]]


class CallNormalisation:
    """What one call of a distributed layer changed for its normalisation (its fields set as the call
    needs them; a plain class: making one runs no code).

    Attributes:
        normalise (Callable, optional): ``(edge_index, weight) -> (edge_index, weight)``, for
            ``propagate``'s graph (``None``: ``propagate`` gets the graph as the forward passes it).
        graph (tuple[Tensor, Tensor or None], optional): the call's real ``(edge_index, weight)`` behind a
            placeholder (``None``: the graph ``propagate`` receives is normalised).
        target (str): the ``propagate`` argument receiving the normalised weights (``"edge_weight"``).
        switched_off (tuple, optional): ``(conv, normalize)``: the ``normalize`` flag the forward hook puts back.
        memo (dict, optional): normalisations of this call, by the identity of their (kept alive) inputs.
        folded (tuple[Tensor, Tensor], optional): ``(weight, scale)``: the SpMM by ``weight`` multiplies
            the halo of ``scale``-scaled rows (:func:`kept_normalisation`, degrees folded).
    """
    normalise: Normalise | None = None
    graph: tuple[Tensor, Tensor | None] | None = None
    target: str = "edge_weight"
    switched_off: tuple[MessagePassing, bool] | None = None
    memo: dict[tuple[int, int], tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]] | None = None
    folded: tuple[Tensor, Tensor] | None = None

    def halo_scale(self, weight: Tensor | None) -> Tensor:
        """``[num_owned, 1]``: the degrees scaling the rows of an SpMM by ``weight``, the folded weights."""
        assert self.folded is not None
        if weight is not self.folded[0]:
            raise RuntimeError("a layer whose rule folds degrees (GcnNormalisation.folds_degrees) aggregated by "
                               "weights other than the normalised ones it was given: register its rule without "
                               "folds_degrees")
        return self.folded[1].unsqueeze(1)

    def normalised(self, edge_index: Tensor, weight: Tensor | None) -> tuple[Tensor, Tensor]:
        assert self.normalise is not None
        if self.memo is None:
            self.memo = {}
        key = (id(edge_index), id(weight))
        if key not in self.memo:
            self.memo[key] = (edge_index, weight, self.normalise(edge_index, weight))
        return self.memo[key][2]


def _call(context: Shard) -> CallNormalisation:
    if context.normalisation is None:
        context.normalisation = CallNormalisation()
    return context.normalisation


def _applies(conv: MessagePassing, use: GcnNormalisation, arguments: dict) -> bool:
    if not getattr(conv, "normalize", True) or (use.applies is not None and not use.applies(conv)):
        return False
    if use.weight is None and arguments.get("edge_weight") is not None:
        return False  # PyG's own code decides: FAConv asserts, LabelPropagation does not normalise
    edge_index = arguments.get("edge_index")  # a local edge index (not an adj_t)
    return isinstance(edge_index, Tensor) and edge_index.layout == torch.strided and edge_index.dim() == 2


def _normaliser(conv: MessagePassing, use: GcnNormalisation, arguments: dict,
                context: Shard) -> tuple[Normalise, tuple]:
    """PyG's ``gcn_norm`` call of ``conv``'s forward, with global degrees, and the choices its
    result depends on besides its inputs."""
    improved = bool(conv.improved) if use.improved else False
    self_loops = bool(conv.add_self_loops) if use.self_loops else False
    value = arguments.get(use.dtype_of) if use.dtype_of else None
    dtype = value.dtype if isinstance(value, Tensor) else None
    flow = conv.flow

    def normalise(edge_index: Tensor, weight: Tensor | None) -> tuple[Tensor, Tensor]:
        return degree_norm.gcn_norm(context, edge_index, weight, None, improved, self_loops, flow, dtype)
    return normalise, ("gcn_norm", improved, self_loops, dtype, flow, context.adj.given_as)


def normalise_call(conv: MessagePassing, use: GcnNormalisation, bound: BoundArguments, context: Shard) -> None:
    """The forward pre-hook's part (see the module doc): edits ``bound`` (the call's ``forward``
    arguments) in place.

    Args:
        conv (MessagePassing): the layer, on a shard.
        use (GcnNormalisation): its rule's normalisation.
        bound (inspect.BoundArguments): its ``forward`` arguments.
        context (Shard): the call on the shard (its ``normalisation`` records the changes).
    """
    args = bound.arguments
    if not _applies(conv, use, args):
        return
    weight = args.get(use.weight) if use.weight else None
    if use.delivery == "arguments" and not (use.pyg_cache and getattr(conv, "cached", False)):
        args["edge_index"], args[use.target] = kept_normalisation(conv, use, args, context, weight)
        was = conv.normalize  # normalize=False for this call; the forward hook puts it back
        conv.normalize = False
        call = context.normalisation
        if call is None:
            call = context.normalisation = CallNormalisation()
        call.switched_off = (conv, was)
        return
    normalise, choices = _normaliser(conv, use, args, context)
    if use.pyg_cache and getattr(conv, "cached", False):
        if gcn_norm_cache(conv) is None:  # one normalised graph per shard and choices (shared_adjacency)
            in_csr_order = linear_weight_arg(conv, conv._sparsecomm.plan) is not None  # propagation is the SpMM
            set_gcn_norm_cache(conv, shared_normalisation(context.adj, choices, args["edge_index"], weight,
                                                          normalise, in_csr_order))
    elif use.delivery == "propagate":
        _switch_off(conv, context)
        call = _call(context)
        call.normalise, call.target = normalise, use.target
    else:
        replace_graph(conv, bound, context, normalise, use.target, use.weight)


def _switch_off(conv: MessagePassing, context: Shard) -> None:
    """``normalize=False`` for this call; the forward hook puts back what it was."""
    _call(context).switched_off = (conv, conv.normalize)
    conv.normalize = False


def kept_normalisation(conv: MessagePassing, use: GcnNormalisation, args: dict, context: Shard,
                       weight: Tensor | None) -> tuple[Tensor, Tensor]:
    """The ``"arguments"`` delivery's normalised ``(edge_index, weight)`` of a call.  An unweighted
    one is kept in the layer's state (``state.normalised``) and reused while the shard's graph and the
    choices it depends on (``improved``, self-loops, dtype, flow) are the same: the same adjacency and
    local ``edge_index``, or (after a new shard object) an equal shard (:func:`~.checks.shard_key`).
    Its degrees then depend on nothing that changes between calls, so their halo exchange runs once
    per shard, not per call, and every rank decides alike without a collective: a new shard equal to
    the last is a hit on that rank as on the others; a different one on some rank only fails the agreed
    first-use checks (on every rank) before any rank exchanges.  A weighted one, where the rule folds
    degrees and the port's SpMM takes them (:func:`_folded`), exchanges no degrees at all; otherwise
    (and at a layer's first call, before its SpMM algorithm is chosen) it is computed every call, as
    PyG does.  (Exchanged degrees travel exactly whatever the layer's halo options: stale and compressed
    layers keep them too.)

    Args:
        conv (MessagePassing): the layer, on a shard.
        use (GcnNormalisation): its rule's normalisation.
        args (dict): its ``forward`` arguments.
        context (Shard): the call on the shard.
        weight (Tensor or None): the edge weights (``None``: unweighted).
    """
    edge_index = args["edge_index"]
    value = args.get(use.dtype_of) if use.dtype_of else None
    choices = (bool(conv.improved) if use.improved else False, bool(conv.add_self_loops) if use.self_loops else False,
               value.dtype if isinstance(value, Tensor) else None, conv.flow)
    state = conv._sparsecomm
    kept = state.normalised
    if (weight is not None and use.folds_degrees and not context.plan.minibatch
            and state.port.folds_degrees(state.settings)):
        return _folded(state, context, edge_index, weight, choices)
    if weight is None and type(kept) is tuple and kept[3] == choices:
        if kept[0] is context.adj and kept[1] is edge_index:
            return kept[4]
        if not context.plan.minibatch and kept[2] == shard_key(context.adj):  # a new shard object, equal
            state.normalised = (context.adj, edge_index, kept[2], choices, kept[4])
            return kept[4]
    improved, self_loops, dtype, flow = choices
    normalised = degree_norm.gcn_norm(context, edge_index, weight, None, improved, self_loops, flow, dtype)
    if weight is not None or context.plan.minibatch:  # (a mini-batch: another graph every step)
        state.normalised = None
        if weight is not None and use.folds_degrees and state.chosen_algorithm is None and not context.plan.minibatch:
            state.port.watch.filled = state.port.watch.headered  # a first call: the next one folds
    else:  # kept: its degrees' exchange, if the call's first, is a one-off, not the steady-state one
        state.normalised = (context.adj, edge_index, shard_key(context.adj), choices, normalised)
        state.port.watch.filled = state.port.watch.headered  # (the pre-hook's: nothing else exchanged yet)
    return normalised


class FoldedNormalisation:
    r"""A weighted call's normalisation with its source degrees folded into the exchanged rows
    (:func:`~.degree_norm.gcn_norm_folded`), kept while its inputs cannot have changed.

    Args:
        adj (HaloAdj): the call's adjacency.
        edge_index (Tensor): its local graph.
        weight (Tensor): its edge weights (held weakly).
        choices (tuple): ``(improved, self-loops, dtype, flow)``.
        graph (tuple[Tensor, Tensor]): the normalised ``(edge_index, weight)``.
        scale (Tensor): :math:`\hat d^{-1/2}` of the owned rows, which scales the rows this rank sends.
    """

    def __init__(self, adj: Any, edge_index: Tensor, weight: Tensor, choices: tuple,
                 graph: tuple[Tensor, Tensor], scale: Tensor) -> None:
        self.adj, self.edge_index, self.choices, self.graph, self.scale = adj, edge_index, choices, graph, scale
        self.weight, self.version = weakref.ref(weight), tensor_version(weight)


def _folded(state: Any, context: Shard, edge_index: Tensor, weight: Tensor, choices: tuple) -> tuple[Tensor, Tensor]:
    r"""A weighted call's normalised graph whose halo sources' degrees travel with their rows: the
    call's SpMM multiplies ``[x | halo(s x)]`` by the weights
    :math:`w'_{ji} = \hat d_i^{-1/2} w_{ji} (\hat d_j^{-1/2}` if :math:`j` is owned), and
    :math:`s = \hat d^{-1/2}` (``context.normalisation.folded``, read by ``HaloPort.multiply``).

    Kept while the weights cannot have changed (the same tensor at the same ``_version``, needing no
    gradient; the same adjacency, local graph and choices); learned or changed weights are normalised
    again, on this rank alone.  Why that is exact without a collective: what a rank keeps or
    recomputes is its own degrees and the weights of its own in-edges only; every degree a peer needs
    reaches it inside the rows of the exchange every call makes anyway, computed by its owner from the
    owner's current weights.  So each rank decides on its own data, and whichever way a rank decides,
    every rank exchanges the same single message: a weight edited on one rank is in that rank's next
    rows, never a stale degree on a peer's side.  Whether a call folds at all depends only on what is
    the same on every rank: the rule, a full-graph shard, the algorithm chosen (``HaloPort.folds_degrees``),
    ``torch.compile``'s recording.  Under the layer's halo options the degrees travel as its rows do: a
    compressed row carries them within its per-row scale, a stale row those of its step (equal while the
    weights are constant).
    """
    kept = state.normalised
    if (type(kept) is FoldedNormalisation and kept.adj is context.adj and kept.edge_index is edge_index
            and kept.weight() is weight and kept.version == tensor_version(weight) and not weight.requires_grad
            and kept.choices == choices):
        graph, scale = kept.graph, kept.scale
    else:
        improved, self_loops, _, flow = choices
        *folded, scale = degree_norm.gcn_norm_folded(context, edge_index, weight, improved, self_loops, flow)
        graph = (folded[0], folded[1])
        state.normalised = None if weight.requires_grad else \
            FoldedNormalisation(context.adj, edge_index, weight, choices, graph, scale)
    call = _call(context)
    call.folded = (graph[1], scale)
    return graph


def replace_graph(conv: MessagePassing, bound: BoundArguments, context: Shard, normalise: Normalise, target: str,
                  weight: str | None = "edge_weight") -> None:
    """Gives the forward an empty ``edge_index`` (and no ``weight``), and ``propagate`` the
    normalisation of the call's real graph under ``target`` (the ``"placeholder"`` delivery).

    Args:
        conv (MessagePassing): the layer, on a shard.
        bound (inspect.BoundArguments): its ``forward`` arguments (edited in place).
        context (Shard): the call on the shard.
        normalise (callable): ``(edge_index, weight) -> (edge_index, weight)`` with global degrees.
        target (str): the ``propagate`` argument receiving the normalised weights.
        weight (str, optional): the ``forward`` argument holding the weights (``None``: unweighted).
            (default: :obj:`"edge_weight"`)
    """
    args = bound.arguments
    edge_index = args["edge_index"]
    call = _call(context)
    call.normalise, call.target = normalise, target
    call.graph = (edge_index, args.get(weight) if weight else None)
    args["edge_index"] = edge_index.new_empty((2, 0))
    if weight and args.get(weight) is not None:
        args[weight] = None


def propagated_graph(call: CallNormalisation, edge_index: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The ``propagate`` override's part: ``(edge_index, kwargs)`` of a ``propagate`` call, with the
    call's normalised graph where the forward pre-hook arranged one (see the module doc).

    Args:
        call (CallNormalisation): what the call's normalisation changed.
        edge_index (Tensor): the graph ``propagate`` got.
        kwargs (dict): its arguments.
    """
    if call.normalise is None:
        return edge_index, kwargs
    graph = call.graph if call.graph is not None else (edge_index, kwargs.get(call.target))
    edge_index, weight = call.normalised(*graph)
    return edge_index, {**kwargs, call.target: weight}


def end_call(call: CallNormalisation) -> None:
    """The forward hook's part: restores what :func:`normalise_call` changed, also after an error.

    Args:
        call (CallNormalisation): what the call's normalisation changed.
    """
    if call.switched_off is not None:
        conv, was = call.switched_off
        conv.normalize = was

