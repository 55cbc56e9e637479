"""PyG's ``RandomLinkSplit(edge_types=..., rev_edge_types=...)`` run before partitioning (issue 48, item 2).

The training graph is partitioned by the package's heterogeneous partitioner, and every split
(train, val, test) sharded with that partition (``shard(..., rank=r)`` for P = 2, 3): the shards'
relations, read back from their ``adj`` and ``e_id``, are exactly the split's ``edge_index`` of every
edge type (message passing uses the split's edges only: the reverse edges of supervision pairs
stay out, as PyG keeps them out), and every shard carries the split's ``edge_label_index`` and
``edge_label`` of the supervision type whole, in order.  Before the fix, ``shard()`` took
``edge_label`` (ratings, ``neg_sampling_ratio=0.0`` as PyG's ``hetero_link_pred.py``) for an edge
attribute when it had one entry per edge, and permuted it against ``edge_label_index``.
"""
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import HeteroData

from pyg_sparsecomm import SparsityAwarePartitioner, shard

USERS, ITEMS = 14, 10
RATES, REV = ("user", "rates", "item"), ("item", "rated_by", "user")


def _graph(ratings: bool) -> HeteroData:
    gen = torch.Generator().manual_seed(11)
    data = HeteroData()
    data["user"].x = torch.randn(USERS, 3, generator=gen)
    data["item"].x = torch.randn(ITEMS, 3, generator=gen)
    rated = torch.unique(torch.stack([torch.randint(0, 12, (60,), generator=gen),
                                      torch.randint(0, 8, (60,), generator=gen)]), dim=1)
    data[RATES].edge_index = rated
    if ratings:  # PyG's hetero_link_pred.py: the ratings are the labels, no negatives
        data[RATES].edge_label = torch.randint(1, 6, (rated.size(1),), generator=gen).float()
    data[REV].edge_index = rated.flip(0)
    return data


def _relation(local: HeteroData, edge_type) -> torch.Tensor:
    """``[m, 3]`` (edge id, global source, global target) of the edges a shard holds of a relation."""
    store = local[edge_type]
    plan = store.adj.plan
    ids = torch.cat([plan.n_id, plan.halo_n_id])
    mine = store.adj.edge_index()
    return torch.stack([store.e_id, ids[mine[0]], local[edge_type[2]].n_id[mine[1]]], dim=1)


def _keys(pairs: torch.Tensor, num_dst: int) -> set:
    return set((pairs[0] * num_dst + pairs[1]).tolist())


@pytest.mark.parametrize("options", [{"neg_sampling_ratio": 0.0}, {"disjoint_train_ratio": 0.3}])
def test_shards_of_a_hetero_link_split_hold_its_relations_and_pairs(options):
    torch.manual_seed(0)
    splits = T.RandomLinkSplit(num_val=0.15, num_test=0.15, edge_types=RATES, rev_edge_types=REV,
                               **options)(_graph(ratings="neg_sampling_ratio" in options))
    train = splits[0]
    for P in (2, 3):
        partitioned = SparsityAwarePartitioner(num_parts=P)(train.clone())
        for which, split in enumerate(splits):
            whole = split.clone()
            for node_type in whole.node_types:
                whole[node_type].part = partitioned[node_type].part
            whole.num_parts = P
            shards = [shard(whole, rank=r, world_size=P) for r in range(P)]
            for edge_type in split.edge_types:  # message passing: exactly the split's edges
                rows = torch.cat([_relation(local, edge_type) for local in shards])
                assert torch.equal(torch.sort(rows[:, 0]).values, torch.arange(split[edge_type].num_edges))
                edges = torch.empty_like(split[edge_type].edge_index)
                edges[:, rows[:, 0]] = rows[:, 1:].t()
                assert torch.equal(edges, split[edge_type].edge_index), (P, which, edge_type)
            for local in shards:  # the supervision pairs, whole and in order, their labels with them
                assert torch.equal(local[RATES].edge_label_index, split[RATES].edge_label_index)
                assert torch.equal(local[RATES].edge_label, split[RATES].edge_label), (P, which)
                assert "edge_label_index" not in local[REV]
    # PyG keeps the held-out positives out of the training graph in both directions, so the shards do
    positives = [s[RATES].edge_label_index[:, s[RATES].edge_label > 0] for s in splits[1:]]
    if "disjoint_train_ratio" in options:
        positives.append(train[RATES].edge_label_index[:, train[RATES].edge_label > 0])
    held_out = set().union(*(_keys(p, ITEMS) for p in positives))
    assert held_out and not held_out & _keys(train[RATES].edge_index, ITEMS)
    assert not held_out & _keys(train[REV].edge_index.flip(0), ITEMS)
