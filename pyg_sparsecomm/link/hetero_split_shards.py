r"""The shards of a heterogeneous link split: PyG's ``RandomLinkSplit(edge_types=...,
rev_edge_types=...)`` output, the same on every rank, sharded with the training graph's partition
(what :func:`~pyg_sparsecomm.partition_and_shard` does with a ``(train_data, val_data, test_data)``
tuple of ``HeteroData``).

As for homogeneous splits (:mod:`~pyg_sparsecomm.link.split_shards`), every rank draws its own
split unless the script seeds alike; :func:`same_hetero_split` makes them rank 0's (one broadcast
of every relation's edge-level attributes and supervision pairs, and of Python's ``random``
state).  :func:`with_hetero_pairs` then gives a split's shard, for every relation carrying
supervision pairs, its ``edge_label_index`` (a
:class:`~pyg_sparsecomm.link.hetero_pair_index.HeteroPairIndex` of the pairs whose source the rank
owns) and ``edge_label`` (their labels, in that order), and every relation its ``edge_index``: the
relation's :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj` (``local.edge_index_dict`` is
``local.adj_dict``, what a ``distribute()``d model takes).
"""
import copy
import random
from typing import Any

import torch
import torch.distributed as dist
from torch_geometric.data import HeteroData

from ..comm.group import collective_device, global_rank, is_distributed
from ..comm.group import world_size as group_world_size
from ..graph.inputs import SUPERVISION_KEYS
from .hetero_pair_index import HeteroPairIndex
from .hetero_pairs import distribute_hetero_pairs


def is_hetero_link_split(data) -> bool:
    """Whether ``data`` is a ``(train, val, test)``-like sequence of ``HeteroData`` with supervision pairs."""
    return isinstance(data, (tuple, list)) and len(data) > 0 and all(
        isinstance(d, HeteroData) and any("edge_label_index" in d[et] for et in d.edge_types) for d in data)


def _drawn(split: HeteroData) -> dict:
    """``{edge type: {key: tensor}}``: the attributes a link split draws (edges, their attributes, pairs)."""
    out: dict = {}
    for edge_type in split.edge_types:
        store = split[edge_type]
        out[edge_type] = {key: store[key].detach().cpu() for key in store.keys()
                          if key in SUPERVISION_KEYS or store.is_edge_attr(key)}
    return out


def same_hetero_split(splits, group: dist.ProcessGroup | None = None) -> list[HeteroData]:
    """``splits`` as rank 0 drew them, on every rank, and Python's ``random`` as rank 0's.

    One ``broadcast_object_list`` of every relation's ``edge_index``, edge attributes and
    supervision pairs (node features are not sent: the transform before the split must be
    deterministic, as ``torch.eye`` user features or a seeded dataset).

    Args:
        splits (list[torch_geometric.data.HeteroData]): this rank's ``(train_data, val_data, test_data)``.
        group (torch.distributed.ProcessGroup, optional): the ranks (default: all).
    """
    splits = list(splits)
    if not is_distributed(group) or group_world_size(group) == 1:
        return splits
    message: list[Any] = [[_drawn(split) for split in splits], random.getstate()]
    dist.broadcast_object_list(message, src=global_rank(group, 0), group=group, device=collective_device(group))
    drawn, state = message
    if len(drawn) != len(splits) or any(set(d) != set(s.edge_types) for d, s in zip(drawn, splits, strict=False)):
        raise ValueError("partition_and_shard: rank 0 passed other link splits (their number or relations differ): "
                         "every rank passes the same (train_data, val_data, test_data)")
    random.setstate(state)
    out = []
    for split, relations in zip(splits, drawn, strict=True):
        split = copy.copy(split)
        for edge_type, attributes in relations.items():
            for key, value in attributes.items():
                device = split[edge_type][key].device if key in split[edge_type] else torch.device("cpu")
                split[edge_type][key] = value.to(device)
        out.append(split)
    return out


def with_hetero_pairs(local: HeteroData, parts: dict[str, torch.Tensor],
                      group: dist.ProcessGroup | None = None) -> HeteroData:
    """Sets every relation's ``edge_index`` (its ``adj``) and, for a relation with supervision pairs,
    ``edge_label_index`` (a :class:`~pyg_sparsecomm.link.hetero_pair_index.HeteroPairIndex` of the
    pairs whose source this rank owns) and ``edge_label`` (their labels, in that order).

    Args:
        local (torch_geometric.data.HeteroData): this rank's shard of a split (its pairs whole, in global ids,
            as :func:`~pyg_sparsecomm.store.rank_hetero.shard_hetero` keeps them).
        parts (dict[str, torch.Tensor]): ``{node type: [N_type] owner}``, the training graph's partition.
        group (torch.distributed.ProcessGroup, optional): the ranks (default: all).
    """
    for edge_type in local.edge_types:
        store = local[edge_type]
        store.edge_index = store.adj
        if "edge_label_index" not in store:
            continue
        label = store.get("edge_label")
        pairs = distribute_hetero_pairs(store.edge_label_index.cpu(), edge_type,
                                        None if label is None else label.cpu(), parts, group)
        store.edge_label_index = HeteroPairIndex(pairs)
        if label is not None and pairs.edge_label is not None:
            store.edge_label = pairs.edge_label.to(label.device)
        if "edge_label_time" in store:
            store.edge_label_time = store.edge_label_time[pairs.pair_id.to(store.edge_label_time.device)]
    return local
