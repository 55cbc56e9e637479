"""``link.negative_sampling`` on a shard's ``edge_index`` refuses bipartite sizes by name (a
homogeneous shard has one node set) instead of failing inside ``int()``."""
import pytest
import torch
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner, shard
from pyg_sparsecomm.link import negative_sampling


def test_bipartite_sizes_on_a_shard_name_the_fix():
    data = Data(edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    local = shard(SparsityAwarePartitioner(num_parts=1, method="random")(data), rank=0, world_size=1)
    with pytest.raises(ValueError, match="hetero_negative_sampling"):
        negative_sampling(local.adj, num_nodes=(2, 2))
