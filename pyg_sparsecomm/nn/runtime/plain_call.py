"""The checks of a distributed layer's call without a shard's adjacency (a plain PyG call).

Without a process group of more than one rank such a call is single-process PyG.  Under one, a
plain ``edge_index``, a sparse adjacency or ``edge_index=None`` would propagate over this rank's
rows only (a silently different result), and a heterogeneous shard's ``adj_dict`` reaches a layer
that cannot read it: each raises, naming the fix.
"""
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...comm.group import world_size
from .plan import forward_signature
from .relation_dict import RelationDictLayer, holds_relations
from .state import LayerState


def _is_graph_argument(value: Any) -> bool:
    if isinstance(value, Tensor):
        return value.layout != torch.strided or (value.dim() == 2 and value.size(0) == 2
                                                 and not value.is_floating_point())
    return type(value).__name__ == "SparseTensor"


def _edge_index_is_none(conv: MessagePassing, args: tuple, kwargs: dict) -> bool:
    """Whether the call passes ``edge_index=None`` (a shard from ``shard()`` has ``local.adj`` only)."""
    try:
        bound = forward_signature(type(conv)).bind_partial(conv, *args, **kwargs).arguments
    except TypeError:
        return False  # PyG's own error for a wrong call
    return "edge_index" in bound and bound["edge_index"] is None


def check_plain_call(conv: MessagePassing, state: LayerState, args: tuple, kwargs: dict) -> None:
    """Raises for a call of ``conv`` without a ``HaloAdj`` that cannot be plain PyG (see the module doc).

    Args:
        conv (MessagePassing): the layer.
        state (LayerState): what it keeps between calls.
        args (tuple): its positional arguments.
        kwargs (dict): its keyword arguments.
    """
    values = list(args) + list(kwargs.values())
    if not isinstance(conv, RelationDictLayer) and any(holds_relations(v) for v in values):
        raise NotImplementedError(f"distribute(): {type(conv).__name__} got a heterogeneous shard's adj_dict, which it "
                                  f"cannot read: heterogeneous layers that run on one are HGTConv and HANConv (PyG's "
                                  f"own classes); others run per relation in HeteroConv or to_hetero")
    size = world_size(state.settings.group)
    if size > 1 and any(_is_graph_argument(v) for v in values):
        raise ValueError(f"{type(conv).__name__} got a plain edge_index or sparse adjacency under a world size "
                         f"of {size}: partition the graph with SparsityAwarePartitioner("
                         f"num_parts=world_size), call local = shard(data) and pass local.adj")
    if size > 1 and _edge_index_is_none(conv, args, kwargs):
        raise ValueError(f"{type(conv).__name__} got edge_index=None under a world size of {size}: "
                         f"shard(data) keeps the shard's adjacency in local.adj (partition_and_shard also as "
                         f"local.edge_index): pass local.adj")
