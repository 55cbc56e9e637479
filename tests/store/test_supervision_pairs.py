"""A link split's supervision pairs survive ``shard()`` whole and in order: with as many pairs as
edges (a directed ``RandomLinkSplit`` without negatives) ``edge_label`` used to be sliced and
reordered as an edge attribute, pairing labels with the wrong pairs, and ``edge_label_index``
refused with advice to delete it."""
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner, shard


def _directed_split() -> Data:
    torch.manual_seed(0)
    n = 40
    edge_index = torch.randint(0, n, (2, 160))
    data = Data(x=torch.randn(n, 3), edge_index=edge_index, num_nodes=n)
    split = T.RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=False, add_negative_train_samples=False,
                              neg_sampling_ratio=0.0)
    train, _, _ = split(data)
    train.edge_label = torch.rand(train.edge_label_index.size(1))  # ratings: one per pair
    assert train.edge_label_index.size(1) == train.edge_index.size(1)  # as many pairs as edges
    return train


def test_pairs_kept_whole_with_as_many_pairs_as_edges():
    train = _directed_split()
    parted = SparsityAwarePartitioner(num_parts=3, method="random", seed=1)(train)
    owned_edges = []
    for rank in range(3):
        local = shard(parted, rank=rank, world_size=3)
        assert torch.equal(local.edge_label_index, train.edge_label_index)
        assert torch.equal(local.edge_label, train.edge_label)
        owned_edges.append(local.e_id)
    # the graph's own edges are still split between the ranks, each once
    assert torch.equal(torch.cat(owned_edges).sort().values, torch.arange(train.edge_index.size(1)))
