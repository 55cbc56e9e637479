r"""The shards of a link split: PyG's ``RandomLinkSplit`` output, the same on every rank, sharded
with the training graph's partition (what :func:`~pyg_sparsecomm.partition_and_shard` does with a
``(train_data, val_data, test_data)`` tuple).

A PyG script splits its graph in the dataset's transform::

    train_data, val_data, test_data = dataset[0]      # T.RandomLinkSplit in the transform

Every rank runs that transform with its own random state (``torch`` permutes the edges, Python's
``random`` draws the validation and test negatives), so the ranks' splits differ unless the script
seeds both alike.  :func:`same_split` makes them rank 0's (one broadcast of the splits' edge-level
attributes, and of Python's ``random`` state, so that PyG's ``negative_sampling`` draws alike on
every rank afterwards: :func:`~pyg_sparsecomm.link.negative_sampling` on a shard replays it).
Rank 0 with the single-process script's seeds thus splits as the single process does.

:func:`with_pairs` then gives a split's shard its ``edge_label_index`` (a
:class:`~pyg_sparsecomm.link.pair_index.PairIndex` of the pairs whose source the rank owns) and
``edge_label`` (their labels, in that order); a split of ``RandomLinkSplit(split_labels=True)`` gets
``pos_edge_label_index`` / ``neg_edge_label_index`` likewise (pair indices of this rank's positives and
negatives) with ``pos_edge_label`` / ``neg_edge_label``.
"""
import copy
import random
from typing import Any

import torch
import torch.distributed as dist
from torch_geometric.data import Data

from ..comm.group import collective_device, global_rank, is_distributed
from ..comm.group import world_size as group_world_size
from .pair_index import PairIndex
from .pairs import distribute_pairs
from .partition_vector import partition_vector

#: the supervision pairs of a link split and their labels: ``RandomLinkSplit``'s, then with ``split_labels=True``
PAIR_KEYS = (("edge_label_index", "edge_label"), ("pos_edge_label_index", "pos_edge_label"),
             ("neg_edge_label_index", "neg_edge_label"))
#: the supervision attributes of a link split, which a shard holds as the rank's pairs
LABEL_KEYS = tuple(key for pair in PAIR_KEYS for key in pair)


def is_link_split(data) -> bool:
    """Whether ``data`` is a ``(train, val, test)``-like sequence of graphs carrying ``edge_label_index``
    (or ``pos_edge_label_index``, as ``RandomLinkSplit(split_labels=True)`` gives)."""
    return isinstance(data, (tuple, list)) and len(data) > 0 and all(
        isinstance(d, Data) and ("edge_label_index" in d or "pos_edge_label_index" in d) for d in data)


def _split_keys(data: Data) -> list[str]:
    """The attributes a link split draws: the edges, their attributes and the supervision pairs."""
    return [key for key in data.keys() if key in LABEL_KEYS or data.is_edge_attr(key)]


def same_split(splits, group: dist.ProcessGroup | None = None) -> list[Data]:
    """``splits`` as rank 0 drew them, on every rank, and Python's ``random`` as rank 0's.

    One ``broadcast_object_list`` of the splits' edge-level attributes (``edge_index``,
    ``edge_label_index``, ``edge_label``, edge attributes; node features are not sent: the
    transform before the split must be deterministic, as PyG's ``NormalizeFeatures``).

    Args:
        splits (list[torch_geometric.data.Data]): this rank's ``(train_data, val_data, test_data)``.
        group (torch.distributed.ProcessGroup, optional): the ranks (default: all).
    """
    splits = list(splits)
    if not is_distributed(group) or group_world_size(group) == 1:
        return splits
    drawn = [{key: split[key].detach().cpu() for key in _split_keys(split)} for split in splits]
    message: list[Any] = [drawn, random.getstate()]
    dist.broadcast_object_list(message, src=global_rank(group, 0), group=group, device=collective_device(group))
    drawn, state = message[0], message[1]
    if len(drawn) != len(splits):
        raise ValueError(f"partition_and_shard: rank 0 passed {len(drawn)} link splits, this rank {len(splits)}: "
                         f"every rank passes the same (train_data, val_data, test_data)")
    random.setstate(state)
    out = []
    for split, attributes in zip(splits, drawn, strict=True):
        split = copy.copy(split)
        for key, value in attributes.items():
            device = split[key].device if key in split else torch.device("cpu")
            split[key] = value.to(device)
        out.append(split)
    return out


def without_pairs(split: Data) -> Data:
    """``split`` without its supervision pairs (the message-passing graph a shard is built of)."""
    graph = copy.copy(split)
    for key in LABEL_KEYS:
        if key in graph:
            del graph[key]
    return graph


def with_pairs(local: Data, split: Data, part, group: dist.ProcessGroup | None = None) -> Data:
    """Sets ``local.edge_label_index`` (a :class:`~pyg_sparsecomm.link.pair_index.PairIndex` of the
    pairs of ``split`` whose source this rank owns) and ``local.edge_label`` (their labels), and so
    ``pos_edge_label_index`` / ``neg_edge_label_index`` with their labels where ``split`` has them
    (``RandomLinkSplit(split_labels=True)``).

    Args:
        local (torch_geometric.data.Data): this rank's shard of ``split``'s graph.
        split (torch_geometric.data.Data): the whole split (global ``edge_label_index``, the same on
            every rank).
        part (torch.Tensor or torch_geometric.data.Data): the partition (see
            :func:`~pyg_sparsecomm.link.distribute_pairs`).
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: :obj:`None`, all)
    """
    part_np = partition_vector(part, group)
    for index_key, label_key in PAIR_KEYS:
        if index_key not in split:
            continue
        label = split.get(label_key)
        pairs = distribute_pairs(split[index_key].cpu(), None if label is None else label.cpu(), part_np, group)
        local[index_key] = PairIndex(pairs.edge_label_index, part_np, group, pairs)
        if pairs.edge_label is not None:
            local[label_key] = pairs.edge_label.to(label.device)
    return local
