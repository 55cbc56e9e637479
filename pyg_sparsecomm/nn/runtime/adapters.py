r"""Whole-graph quantities a few PyG layers compute inside ``forward``, supplied globally.

Most layers reach the graph only through ``propagate``/``edge_updater`` and the degree
normalisations, which :mod:`.call` and :mod:`.normalisation` make exact.  A
layer that also reduces over *all* edges in its forward gets an adapter here (its
:class:`~pyg_sparsecomm.nn.rules.registry.LayerRule`'s ``adapter``), run by the forward
pre-hook on the call's bound arguments, that passes the whole-graph value explicitly:

* ``ChebConv``: with ``lambda_max=None`` it scales by :math:`2 \\max_e L_e`, the largest
  Laplacian weight of the whole graph: the maximum over ranks is passed as ``lambda_max``.  Its
  Laplacian comes from ``ChebConv.__norm__``, a method of the class that calls PyG's
  ``get_laplacian``: the adapter gives the forward an empty graph, which ``__norm__`` maps to
  self-loops, and ``propagate`` the scaled Laplacian with global degrees
  (:func:`~.degree_norm.scaled_laplacian`, the ``"placeholder"`` delivery of
  :mod:`.normalisation`).
* ``LabelPropagation``: labels given as classes are one-hot encoded with the classes of the whole
  graph (PyG counts ``y.max() + 1``, which on a shard is the rank's own maximum), and ``mask``
  must select the shard's rows: a bool mask over them or a
  :class:`~pyg_sparsecomm.graph.node_index.ShardIndex` (``shard_index(split_idx, data)``); a plain
  integer index on a partitioned graph is refused on every rank, naming ``shard_index``
  (:func:`~pyg_sparsecomm.graph.node_index.node_selection`).
* ``RGCNConv``: with ``x=None`` node :math:`i`'s features are row :math:`i` of the layer's
  weights, ``x = arange(num_nodes)`` of the whole graph: the owned rows' global ids are passed
  instead.  ``FastRGCNConv`` without features is refused: its message reads the embedding row at
  the local source index ``edge_index_j``, which on a shard is not the node's id.
"""
import inspect
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import ChebConv, FastRGCNConv, LabelPropagation, RGCNConv
from torch_geometric.utils import one_hot

from ...comm.collectives import all_reduce_value
from ...comm.group import host_all_reduce, is_distributed, raise_together
from ...graph.node_index import node_selection
from . import degree_norm
from .normalisation import normalise_call, replace_graph
from .port import Shard


def global_max(value: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """The maximum of ``value`` over all ranks (``-inf`` where empty); the gradient reaches the
    rank(s) holding it, as a single-process ``max`` would."""
    local = value.max() if value.numel() else value.new_tensor(float("-inf"))
    if not is_distributed(group):
        return local
    reduced = all_reduce_value(local.detach(), dist.ReduceOp.MAX, group, "global_max")
    return torch.where(local == reduced, local, reduced)


def cheb_laplacian(conv: ChebConv, bound: inspect.BoundArguments, context: Shard) -> None:
    r"""``ChebConv``'s adapter: ``lambda_max=None`` becomes :math:`2 \max_e L_e` over all ranks, and
    ``propagate`` gets the scaled Laplacian with global degrees (see the module doc).

    Args:
        conv (ChebConv): the layer.
        bound (inspect.BoundArguments): its ``forward`` arguments (edited in place).
        context (Shard): the shard the call runs on.
    """
    args = bound.arguments
    x, edge_index, edge_weight = args["x"], args["edge_index"], args.get("edge_weight")
    if args.get("lambda_max") is None:
        if args.get("batch") is not None:
            raise NotImplementedError("ChebConv with a batch vector and lambda_max=None cannot run distributed: "
                                      "pass lambda_max explicitly")
        _, weight = degree_norm.get_laplacian(context, edge_index, edge_weight, conv.normalization, x.dtype,
                                              x.size(conv.node_dim))
        args["lambda_max"] = 2.0 * global_max(weight, context.group)
    normalization, lambda_max, batch = conv.normalization, args["lambda_max"], args.get("batch")

    def normalise(edge_index: Tensor, edge_weight: Tensor | None) -> tuple[Tensor, Tensor]:
        return degree_norm.scaled_laplacian(context, edge_index, edge_weight, normalization, lambda_max, x.dtype,
                                            batch)
    replace_graph(conv, bound, context, normalise, "norm")


def label_propagation_inputs(conv: LabelPropagation, bound: inspect.BoundArguments, context: Shard) -> None:
    r"""``LabelPropagation``'s adapter: ``y`` of classes becomes its one-hot rows with the number of
    classes of the whole graph (:math:`1 + \max_r \max y_r`), and ``mask`` the shard's rows it selects,
    agreed by every rank (see the module doc).

    Args:
        conv (LabelPropagation): the layer.
        bound (inspect.BoundArguments): its ``forward`` arguments (edited in place).
        context (Shard): the shard the call runs on.
    """
    args = bound.arguments
    y = args["y"]
    if args.get("mask") is not None:
        partitioned = context.plan.world_size > 1
        args["mask"] = raise_together(lambda: node_selection(args["mask"], y.size(0), partitioned,
                                                             f"{type(conv).__name__}(mask=...)"),
                                      type(conv).__name__, context.group, flag_first=True)
    if y.dtype == torch.long and y.size(0) == y.numel():  # PyG's test for labels given as classes
        classes = int(y.max()) + 1 if y.numel() else 0
        if is_distributed(context.group):
            classes = host_all_reduce([classes], dist.ReduceOp.MAX, context.group)[0]
        args["y"] = one_hot(y.view(-1), num_classes=classes)


def node_embedding_ids(conv: RGCNConv, bound: inspect.BoundArguments, context: Shard) -> None:
    r"""``RGCNConv``'s adapter: without features (``x=None``) PyG takes node :math:`i`'s row :math:`i`
    of its weights, ``x = arange(in_channels)`` over the whole graph; on a shard ``x`` becomes the
    owned rows' global ids (``local.n_id``), the same rows of the owned nodes.  ``FastRGCNConv``
    (a subclass) without float features is refused (see the module doc).

    Args:
        conv (RGCNConv): the layer.
        bound (inspect.BoundArguments): its ``forward`` arguments (edited in place).
        context (Shard): the shard the call runs on.
    """
    x = bound.arguments.get("x")
    if isinstance(conv, FastRGCNConv) and not (isinstance(x, Tensor) and x.is_floating_point()):
        raise NotImplementedError(f"distribute(): {type(conv).__name__} without features cannot run on a shard: its "
                                  f"message looks node embeddings up by the local source index (edge_index_j), not by "
                                  f"node id; use RGCNConv (the same parameters and results) or pass features")
    if x is not None:
        return
    if context.adj.is_minibatch:
        raise ValueError(f"{type(conv).__name__} with x=None numbers the nodes of the whole graph: on a mini-batch "
                         f"pass the batch's global node ids as x (batch.n_id)")
    bound.arguments["x"] = context.adj.plan.n_id.to(conv.weight.device)


def adapt(call: Any, args: tuple, kwargs: dict, at: int | str | None = None) -> tuple[tuple, dict]:
    """The *normalise* stage of a layer call (:class:`~.plan.CallPath`): ``(args, kwargs)`` with the
    normalisation and the whole-graph arguments of the layer's rule (:mod:`.normalisation`, the rule's
    adapter).

    Args:
        call (LayerCall): the call on a shard (its layer, plan and shard).
        args (tuple): the call's positional arguments.
        kwargs (dict): its keyword arguments.
        at (int or str, optional): where they held the adjacency (unused). (default: ``None``)
    """
    conv, plan, context = call.conv, call.plan, call.shard
    bound = plan.signature.bind(conv, *args, **kwargs)
    if plan.normalisation is not None:
        normalise_call(conv, plan.normalisation, bound, context)
    if plan.rule.adapter is not None:
        plan.rule.adapter(conv, bound, context)
    return bound.args[1:], bound.kwargs  # without self
