r"""The values of ``local.adj`` reach a layer as PyG's sparse ``adj_t`` path uses them.

A shard's :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` carries the graph's edge weights as values
(``T.ToSparseTensor()``'s ``adj_t``, ``T.GCNNorm()``'s normalised weights, or ``edge_weight``).
Single-process PyG called with a weighted ``adj_t`` uses them, for the layers that do, as the
weights :math:`w_{ji}` of the message :math:`w_{ji} x_j` (``spmm(adj_t, x)``, and in the degree
normalisation of ``gcn_norm``): exactly what the layer computes from an ``edge_index`` with
``edge_weight``.  Under :func:`~pyg_sparsecomm.distribute` a layer runs on a local
``edge_index``, so the values are passed as its ``edge_weight`` when the caller passed none:

* the layer's ``forward`` takes ``edge_weight`` (``GCNConv``, ``GCN2Conv``, ``GraphConv``,
  ``APPNP``, ``SGConv``, ``ChebConv``, ``TAGConv``, ...): the values become ``edge_weight``; an
  explicit ``edge_weight`` (``local.edge_weight``, the same numbers) wins, so nothing is doubled;
* PyG's ``adj_t`` path drops the values (``SAGEConv``, ``GINConv``, ``MFConv``, ``RGCNConv``
  strip a ``SparseTensor``'s values, ``ClusterGCNConv`` replaces them by its own normalisation,
  and layers without a fused ``message_and_aggregate`` read them only under the names
  ``edge_weight``/``edge_type``): the values are not used, as in PyG -- except that a *torch
  sparse* ``adj_t`` keeps them in ``spmm(adj_t, x, reduce=aggr)``, so ``SAGEConv``/``GINConv``
  given one aggregate :math:`w_{ji} x_j` by the distributed SpMM (:func:`torch_sparse_weights`;
  an aggregation other than sum or mean raises);
* anything else (a fused ``message_and_aggregate`` that uses the values but no ``edge_weight``
  argument to pass them through, e.g. ``EGConv`` with ``"symnorm"``, ``PDNConv``, or a message
  reading ``edge_weight`` that ``forward`` does not take) raises ``ValueError`` naming why.

A layer that a distributed layer calls with the same local ``edge_index`` (``AntiSymmetricConv``'s
``phi``) gets the values the same way.

Self-loops: PyG's own paths disagree on a graph that already has them (``gcn_norm`` adds the
missing loops to an ``edge_index``, adds a loop to every node of a torch sparse ``adj_t`` and
replaces the diagonal of a ``SparseTensor``); distributed layers follow the form the script gave
the graph in, recorded by the shard (``HaloAdj.given_as``, :func:`~pyg_sparsecomm.graph.inputs.graph_form`).
"""
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...plan.halo_adj import HaloAdj
from .aggregation import linear_weight_arg
from .plan import LayerPlan


def with_adjacency_values(conv: MessagePassing, plan: LayerPlan, args: tuple, kwargs: dict, adj: HaloAdj) -> tuple:
    """``(args, kwargs)`` of a call of ``conv`` on ``adj``, its values (``None``: unweighted)
    passed as PyG's ``adj_t`` path would use them (see the module doc).

    Args:
        conv (MessagePassing): the layer, called with the local ``edge_index`` in place of ``adj``.
        plan (LayerPlan): its compiled plan.
        args (tuple): the call's positional arguments.
        kwargs (dict): its keyword arguments.
        adj (HaloAdj): the adjacency the layer was called with; its ``[nnz]`` values are in its
            edge order (the local ``edge_index``'s).
    """
    value = adj.value
    if value is None:
        return args, kwargs
    if plan.takes_edge_weight:
        bound = plan.signature.bind(conv, *args, **kwargs)
        if bound.arguments.get("edge_weight") is None:
            bound.arguments["edge_weight"] = value
            return bound.args[1:], bound.kwargs  # without self
        return args, kwargs
    if plan.drops_adj_values:
        if adj.given_as == "torch.sparse" and plan.rule.drops_adj_values and linear_weight_arg(conv, plan) is None:
            raise ValueError(_unsupported_values(conv, "its aggregation "
                                                 f"{getattr(conv, 'aggr', None)!r} of the weighted messages"))
        return args, kwargs
    raise ValueError(_unsupported_values(conv, "the values in a way distribute() cannot pass to it on a local "
                                         "edge_index"))


def torch_sparse_weights(conv: MessagePassing, plan: LayerPlan, edge_index: Tensor, adj: HaloAdj) -> Tensor | None:
    """The message weights of an unweighted-message layer (``SAGEConv``, ``GINConv``) called with a
    weighted torch sparse ``adj_t``: PyG's ``spmm(adj_t, x, reduce=aggr)`` aggregates
    :math:`w_{ji} x_j` (only a ``SparseTensor``'s values are dropped), so its SpMM uses them.
    ``None`` for other forms, unweighted adjacencies and layers whose rule keeps the values."""
    if adj.value is None or adj.given_as != "torch.sparse" or not plan.rule.drops_adj_values:
        return None
    if edge_index.size(1) != adj.nnz:
        raise ValueError(_unsupported_values(conv, "the values of a graph it changed before aggregating"))
    return adj.value


def _unsupported_values(conv: MessagePassing, what: str) -> str:
    name = type(conv).__name__
    return (f"{name} got an adjacency carrying edge weights (local.adj holds the graph's edge_weight or adj_t "
            f"values), but PyG's sparse adj_t path of {name} uses {what}, which distribute() cannot run on a "
            f"local edge_index: pass local.adj.with_value(None) for the unweighted graph")
