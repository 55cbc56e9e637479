r"""PyG's ``negative_sampling`` called with a shard's ``edge_index``: PyG's own draw, this rank's share.

A ported script keeps PyG's call::

    neg_edge_index = negative_sampling(edge_index=train_data.edge_index, num_nodes=train_data.num_nodes,
                                       num_neg_samples=train_data.edge_label_index.size(1), method='sparse')

where ``train_data`` is a shard (:func:`~pyg_sparsecomm.partition_and_shard` of a link split).
Every rank then runs PyG's :func:`torch_geometric.utils.negative_sampling` on the whole graph's
edges (gathered once from the shards and kept) with the same Python ``random`` state (rank 0's,
given to every rank when the split was sharded), so the negatives are exactly the single-process
script's, fresh at every call as PyG's; each rank keeps those whose source it owns, as a
:class:`~pyg_sparsecomm.link.pair_index.PairIndex`.  Every call checks, in one host all-reduce of two
integers, that the ranks drew the same negatives (a rank whose ``random`` state differs raises on
every rank, naming the fix).  Counts are the shard's: ``num_neg_samples`` (an ``int``) is this rank's
share and the ranks' shares are added (``train_data.edge_label_index.size(1)`` on every rank: the
number of all positives); a ``float`` is a ratio of the whole graph's edges, ``None`` their number,
as PyG's.

A shard's pairs (a :class:`~pyg_sparsecomm.link.pair_index.PairIndex`: ``train_data.pos_edge_label_index``,
what PyG's ``GAE.recon_loss`` samples against) are drawn from likewise: PyG's draw on the union of
every rank's pairs (gathered once and kept), with the graph's number of nodes.

Any other ``edge_index`` (a tensor of global ids) goes to the hash-based
:func:`~pyg_sparsecomm.link.negative_sampling.negative_sampling` (``seed=``, ``epoch=``, ``part=``).
"""
import weakref
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.utils import negative_sampling as pyg_negative_sampling

from ..comm.collectives import gather_rows
from ..comm.group import host_all_reduce, is_distributed, raise_together
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..plan.halo_adj import HaloAdj
from .negative_sampling import check_num_neg_samples
from .negative_sampling import negative_sampling as hashed_negative_sampling
from .pair_index import PairIndex
from .partition_vector import partition_vector
from .same_pairs import check_same_pairs, check_same_settings

#: a shard adjacency's whole-graph edges and partition, gathered at its first negative sampling
_WHOLE_GRAPH: "weakref.WeakKeyDictionary[HaloAdj, tuple[Tensor, np.ndarray]]" = weakref.WeakKeyDictionary()
#: a shard's pairs over all ranks, gathered at their first negative sampling
_WHOLE_PAIRS: "weakref.WeakKeyDictionary[PairIndex, Tensor]" = weakref.WeakKeyDictionary()


def negative_sampling(edge_index, num_nodes: int | tuple[int, int] | None = None,
                      num_neg_samples: int | float | None = None, method: str = "sparse",
                      force_undirected: bool = False, *, group: dist.ProcessGroup | None = None,
                      **hashed) -> Tensor | PairIndex:
    r"""PyG's ``negative_sampling``; on a shard's ``edge_index``, this rank's share of PyG's own draw
    (see the module doc).

    Args:
        edge_index (HaloAdj or PairIndex or torch.Tensor): a shard's ``edge_index`` (its adjacency) or
            pairs (``train_data.pos_edge_label_index``), or a ``[2, E]`` tensor of the whole graph's
            edges (then the hash-based sampler).
        num_nodes (int or tuple[int, int], optional): the shard's ``num_nodes`` or the graph's (a shard
            knows both); with a tensor ``edge_index`` also bipartite sizes ``(num_src, num_dst)``, as PyG's.
            (default: :obj:`None`, the shard's, or the largest id + 1)
        num_neg_samples (int or float, optional): this rank's share of the negatives (added over
            the ranks), a ratio of the graph's edges, or ``None``: as many as edges.
            (default: :obj:`None`)
        method (str, optional): PyG's ``"sparse"`` or ``"dense"``. (default: :obj:`"sparse"`)
        force_undirected (bool, optional): as PyG's. (default: :obj:`False`)
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: :obj:`None`, all)
        **hashed (optional): ``seed``, ``epoch``, ``part``, ``rank`` of the hash-based sampler (tensors
            only).

    Returns:
        :class:`~pyg_sparsecomm.link.pair_index.PairIndex`: the negatives whose source this rank
        owns (a tensor of global ids for a tensor ``edge_index``).
    """
    if not isinstance(edge_index, (HaloAdj, PairIndex)):
        return hashed_negative_sampling(edge_index, num_nodes, num_neg_samples, method, force_undirected,
                                        group=group, **hashed)
    if hashed:
        raise ValueError(f"negative_sampling on a shard's edge_index replays PyG's draw; {sorted(hashed)} belong to "
                         f"the hash-based sampler, which takes the whole graph's edge_index tensor")
    if isinstance(num_nodes, tuple):  # bipartite sizes: a relation of a HeteroData, drawn from its edge tensor
        raise ValueError(f"negative_sampling: bipartite sizes num_nodes={num_nodes} on a shard's edge_index: a "
                         f"homogeneous shard has one node set; for a relation of a HeteroData pass the partitioned "
                         f"graph or its shard to link.hetero_negative_sampling(data, edge_type, ...), or the "
                         f"relation's global edge_index tensor with part= to this function")
    if isinstance(edge_index, PairIndex):
        group = edge_index.group if group is None else group
        edges, part = whole_pairs(edge_index), edge_index.part
        num_owned = int((part == group_rank(group)).sum())
    else:
        edges, part = whole_graph(edge_index, group)
        num_owned = edge_index.num_owned
    N = part.size
    raise_together(lambda: _check_counts(num_nodes, num_neg_samples, num_owned, N), "negative_sampling",
                   group, flag_first=True)  # a rank's own counts: a bad one raises on every rank
    share = isinstance(num_neg_samples, (int, np.integer))  # the ranks' shares may differ; a ratio may not
    check_same_settings({"num_neg_samples": "an int (a rank's share)" if share else num_neg_samples, "method": method,
                         "force_undirected": force_undirected}, "negative_sampling", group)
    if isinstance(num_neg_samples, (int, np.integer)) and is_distributed(group):
        num_neg_samples = host_all_reduce([int(num_neg_samples)], dist.ReduceOp.SUM, group)[0]
    neg = pyg_negative_sampling(edges, N, num_neg_samples, method, force_undirected)
    try:
        check_same_pairs(neg, "negative_sampling", group)
    except ValueError as error:  # raised on every rank alike
        raise ValueError("negative_sampling: the ranks drew different negatives, so their Python random states differ "
                         "(PyG's sampler draws from random): shard the split with partition_and_shard((train_data, "
                         "val_data, test_data)), which gives every rank rank 0's state, or seed random alike on every "
                         "rank and draw the same number of times") from error
    mine = torch.from_numpy(part[neg[0].numpy()] == group_rank(group))
    return PairIndex(neg[:, mine], part, group)


def whole_pairs(pairs: PairIndex) -> Tensor:
    """``[2, M]`` global ids of the pairs of every rank's ``pairs`` (grouped by rank; a collective at the
    first call for ``pairs``, then kept while they live): PyG's sampler reads them as a set."""
    if pairs not in _WHOLE_PAIRS:
        _WHOLE_PAIRS[pairs] = gather_rows(pairs.global_ids.cpu().t().contiguous(), pairs.group).t().contiguous()
    return _WHOLE_PAIRS[pairs]


def _check_counts(num_nodes: Any, num_neg_samples: Any, num_owned: int, N: int) -> None:
    if num_nodes is not None and int(num_nodes) not in (N, num_owned):
        raise ValueError(f"negative_sampling: num_nodes={num_nodes} is neither this shard's {num_owned} "
                         f"nodes nor the graph's {N}: pass the shard's num_nodes (train_data.num_nodes)")
    check_num_neg_samples(num_neg_samples, share=True)


def whole_graph(adj: HaloAdj, group: dist.ProcessGroup | None = None) -> tuple[Tensor, np.ndarray]:
    """``([2, E] global edges, [N] partition)`` of the graph ``adj`` is a shard of: every rank's
    edges gathered (a collective, at the first call for ``adj``; then kept while ``adj`` lives).
    The edges come grouped by rank, which PyG's sampler does not see: it reads them as a set."""
    if adj in _WHOLE_GRAPH:
        return _WHOLE_GRAPH[adj]
    plan = adj.plan
    if plan.world_size != group_world_size(group):
        raise ValueError(f"negative_sampling: the shard is one of {plan.world_size} parts but the process group has "
                         f"{group_world_size(group)} ranks: pass the shard's group=")
    ids = torch.cat([plan.n_id, plan.halo_n_id]).cpu()
    local = adj.edge_index().cpu()
    edges = torch.stack([ids[local[0]], plan.n_id.cpu()[local[1]]], dim=1)
    edges = gather_rows(edges, group).t().contiguous()
    tagged = torch.stack([plan.n_id.cpu(), torch.full_like(plan.n_id.cpu(), plan.rank)], dim=1)
    owner = gather_rows(tagged, group)  # every rank's nodes, tagged with its rank
    part = np.empty(plan.num_nodes, dtype=np.int64)
    part[owner[:, 0].numpy()] = owner[:, 1].numpy()
    part = partition_vector(torch.from_numpy(part), group)
    _WHOLE_GRAPH[adj] = (edges, part)
    return edges, part
