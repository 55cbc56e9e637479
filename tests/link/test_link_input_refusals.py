"""Bad ids and counts of the link and recommendation API are refused on every rank, naming the argument passed
and what it accepts (issue 55, item 4), at P = 2..4 in real gloo jobs.

Before: ``LightGCN.recommend(..., exclude=)`` accepted pairs with items numbered from 0 per node type (the
training pairs were recommended again) and ids -1 and 10,000; a bad ``edge_label_index`` was named
``edge_index``; ranks passing different ``batch_size`` were told about ``RandomLinkSplit``'s negatives;
``num_neg_samples=-5`` on a shard raised Python's "Sample larger than population or is negative";
``batch_size=0`` raised ``ZeroDivisionError`` and ``-3`` was accepted; PyG's ``neg_sampling_ratio`` drew no
negatives; a bad id on one rank only left its peers in a collective; ``recommend_topk`` accepted a
negative user id in ``exclude``.
"""
import random

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import LightGCN

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.graph.datasets import amazon_book_like
from pyg_sparsecomm.link import distribute_pairs, negative_sampling, recommend_topk
from pyg_sparsecomm.loader import DistributedLinkNeighborLoader
from pyg_sparsecomm.testing import launch

N, USERS, BOOKS = 50, 30, 40


def _error(call) -> str:
    try:
        call()
    except ValueError as error:
        return str(error)
    return "accepted"


def _link_graph(P):
    gen = torch.Generator().manual_seed(2)
    data = Data(x=torch.randn(N, 4, generator=gen), edge_index=torch.randint(10, N, (2, 200), generator=gen),
                num_nodes=N)
    data.part, data.num_parts = torch.arange(N) % P, P
    return data, torch.randint(0, N, (2, 30), generator=gen)


def _link_errors(rank, P, data, pairs):
    local = shard(data)
    bad = pairs.clone()
    bad[1, 0] = 10000
    last = rank == P - 1
    loader = DistributedLinkNeighborLoader(local, [2], pairs, batch_size=8, neg_sampling_ratio=2.0)
    labels = torch.cat([batch.edge_label for batch in loader])
    return {
        "loader ids": _error(lambda: DistributedLinkNeighborLoader(local, [2], bad)),
        "loader ids on one rank": _error(lambda: DistributedLinkNeighborLoader(local, [2], bad if last else pairs)),
        "batch_size differs": _error(lambda: DistributedLinkNeighborLoader(local, [2], pairs, batch_size=4 + rank)),
        "batch_size 0": _error(lambda: DistributedLinkNeighborLoader(local, [2], pairs, batch_size=0)),
        "batch_size -3 on one rank": _error(lambda: DistributedLinkNeighborLoader(local, [2], pairs,
                                                                                  batch_size=-3 if last else 4)),
        "ratio -1": _error(lambda: DistributedLinkNeighborLoader(local, [2], pairs, neg_sampling_ratio=-1.0)),
        "ratio 2": (loader.neg_sampling, loader.amount, int((labels == 0).sum()), int((labels == 1).sum())),
        "distribute_pairs": _error(lambda: distribute_pairs(bad, part=data.part)),
        "shard negatives -5": _error(lambda: negative_sampling(local.adj, num_neg_samples=-5)),
        "shard negatives -5 on one rank": _error(lambda: negative_sampling(local.adj,
                                                                           num_neg_samples=-5 if last else 10)),
        "shard negatives ratio differs": _error(lambda: negative_sampling(local.adj, num_neg_samples=0.5 + rank)),
        "shard negatives shares": _error(lambda: (random.seed(0), negative_sampling(local.adj,  # PyG draws from
                                                                                     num_neg_samples=3 + rank))),
        "hashed negatives -5": _error(lambda: negative_sampling(data.edge_index, N, num_neg_samples=-5,
                                                                part=data.part)),
    }


@pytest.mark.parametrize("P", [2, 3, 4])
def test_link_ids_and_counts_are_refused_on_every_rank(P):
    data, pairs = _link_graph(P)
    per_rank = launch(_link_errors, P, data, pairs)
    assert {out["ratio 2"][:2] for out in per_rank} == {("binary", 2.0)}  # PyG: a nonzero ratio means binary
    assert sum(out["ratio 2"][3] for out in per_rank) == 30  # every positive once, a rank holding its own
    assert sum(out["ratio 2"][2] for out in per_rank) >= 2 * 30  # ceil(2 m_b) negatives per batch
    for out in per_rank:
        assert out["loader ids"].endswith("edge_label_index holds node ids in [0, 10000] but the graph has "
                                          "num_nodes=50: ids must lie in [0, 49]")
        assert f"failed on 1 of {P} ranks" in out["loader ids on one rank"]
        assert f"rank {P - 1}: ValueError: edge_label_index holds node ids" in out["loader ids on one rank"]
        differs = out["batch_size differs"]
        assert "the ranks passed different batch_size (batch_size: rank 0: 4, rank 1: 5" in differs
        assert "pass the same batch_size on every rank" in differs and "RandomLinkSplit" not in differs
        assert "batch_size must be a positive integer (supervision pairs per batch), got 0" in out["batch_size 0"]
        assert f"rank {P - 1}: ValueError: batch_size must be a positive integer" in out["batch_size -3 on one rank"]
        assert "(neg_sampling_ratio, or NegativeSampling's amount) must be > 0, got -1.0" in out["ratio -1"]
        assert "edge_label_index holds node ids in [0, 10000]" in out["distribute_pairs"]
        for key in ("shard negatives -5", "shard negatives -5 on one rank"):
            assert "num_neg_samples=-5: pass an int >= 0 (this rank's share of the negatives, added over the ranks)" \
                   ", a float >= 0 (a ratio of the graph's edges) or None" in out[key], key
        assert f"rank {P - 1}: ValueError" in out["shard negatives -5 on one rank"]
        assert "the ranks passed different num_neg_samples (num_neg_samples: rank 0: 0.5, rank 1: 1.5" in \
               out["shard negatives ratio differs"]
        assert out["shard negatives shares"] == "accepted"  # the ranks' int shares may differ
        assert "num_neg_samples=-5: pass an int >= 0 (the negatives of all ranks)" in out["hashed negatives -5"]


def _recipe(P):
    data = amazon_book_like(USERS, BOOKS, 300, isolated=0.1, seed=3).to_homogeneous()
    del data.node_type, data.edge_type
    data.num_nodes = USERS + BOOKS
    data.part, data.num_parts = torch.arange(USERS + BOOKS) % P, P
    return data, data.edge_index[:, data.edge_index[0] < data.edge_index[1]]


def _recommend_errors(rank, P, data, train):
    local = shard(data)
    torch.manual_seed(0)
    model = distribute(LightGCN(data.num_nodes, 8, num_layers=2))
    users, books = torch.arange(USERS), torch.arange(USERS, USERS + BOOKS)

    def recommend(exclude, src_index=users, dst_index=books):
        return model.recommend(local.adj, src_index=src_index, dst_index=dst_index, k=5, exclude=exclude)
    with torch.no_grad():
        top = recommend(train)
        seen = {(int(u), int(i)) for u, i in train.t()}
        owned = local.n_id[local.n_id < USERS].sort().values
        out = {"seen recommended": sum((int(u), int(i)) in seen for u, row in zip(owned, top, strict=True)
                                       for i in row)}
        minus, far = train.clone(), train.clone()
        minus[1, 0], far[0, 3] = -1, 10000
        per_rank = train if rank else torch.stack([train[0], train[1] - USERS])  # rank 0 alone numbers per type
        out.update({
            "per type": _error(lambda: recommend(torch.stack([train[0], train[1] - USERS]))),
            "per type on one rank": _error(lambda: recommend(per_rank)),
            "-1": _error(lambda: recommend(minus)),
            "10000": _error(lambda: recommend(far)),
            "not a candidate": _error(lambda: recommend(torch.tensor([[0, 1], [31, 67]]), dst_index=books[:35])),
            "mask": _error(lambda: recommend(train, src_index=torch.arange(USERS + BOOKS) < USERS)),
            "float ids": _error(lambda: recommend(train, dst_index=books.double())),
            "edge_label_index": _error(lambda: model(local.adj, torch.tensor([[0, 1], [31, 10000]]))),
            "node_id on one rank": _error(lambda: model.recommendation_loss(
                torch.zeros(2), torch.zeros(2), node_id=torch.tensor([10000 if rank == P - 1 else 1]))),
        })
        mine = torch.arange(rank, 20, P)
        out["topk user -1"] = _error(lambda: recommend_topk(torch.randn(mine.numel(), 4), torch.randn(mine.numel(), 4),
                                                            mine, 3, user_ids=mine,
                                                            exclude=torch.tensor([[-1], [int(mine[0])]])))
    return out


@pytest.mark.parametrize("P", [2, 3, 4])
def test_recommend_refuses_ids_in_another_numbering_on_every_rank(P):
    data, train = _recipe(P)
    for out in launch(_recommend_errors, P, data, train):
        assert out["seen recommended"] == 0  # the right numbering: no training pair recommended again
        for key in ("per type", "per type on one rank"):
            assert "are the items numbered from 0 per node type" in out[key], key
            assert f"users 0..{USERS - 1}, items from {USERS}" in out[key]
            assert f"pass torch.stack([pairs[0], pairs[1] + {USERS}])" in out[key]
        assert f"failed on 1 of {P} ranks" in out["per type on one rank"]
        assert "exclude holds ids in [-1, 69] but the graph has 70 nodes" in out["-1"]
        assert "exclude holds ids in [0, 10000] but the graph has 70 nodes" in out["10000"]
        assert "exclude names 1 targets that are no candidate of dst_index (e.g. 67; dst_index holds ids 30..64): " \
               "pass only the pairs of candidate targets" in out["not a candidate"]
        assert "src_index must be a vector of integer global node ids, got torch.bool" in out["mask"]
        assert "pass mask.nonzero().view(-1)" in out["mask"]
        assert "dst_index must be a vector of integer global node ids, got torch.float64" in out["float ids"]
        assert "edge_label_index holds node ids in [0, 10000] but the graph has num_nodes=70" in \
               out["edge_label_index"]
        assert f"rank {P - 1}: ValueError: node_id names node 10000 of a graph of 70 nodes" in \
               out["node_id on one rank"]
        assert "exclude holds the negative user id -1" in out["topk user -1"]
