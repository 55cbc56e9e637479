"""Errors on the path of a ported script that named nothing the user did or could do (issue 45,
finding 0), now naming the fix: ``partition_and_shard(hetero_data)`` named
``partition_on_rank_zero``, which the user never called; ``local.edge_index_dict`` on a
heterogeneous shard (or batch) was PyG's bare ``KeyError``; a PyG transform applied to a shard
(``T.GDC()``) raised "'HaloAdj' object has no attribute 'size'".  PyG's own probes of a shard's
attributes (``hasattr``, ``print``, ``num_edges``, copies) answer as before."""
import copy
import pickle

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner, partition_and_shard, shard
from pyg_sparsecomm.graph.datasets import igbh_like
from pyg_sparsecomm.loader import DistributedNeighborLoader


def _hetero():
    return igbh_like(num_papers=20, num_authors=10, num_institutes=2, num_fos=3, num_features=4, seed=0)


def test_partition_and_shard_of_a_hetero_graph_names_its_path():
    with pytest.raises(TypeError) as error:
        partition_and_shard(_hetero())
    message = str(error.value)
    assert "partition_on_rank_zero" not in message
    for words in ("HeteroData", "SparsityAwarePartitioner(num_parts=world_size)(hetero_data)", "shard(data)",
                  "local.adj_dict"):
        assert words in message, message


def test_edge_index_dict_of_a_hetero_shard_names_adj_dict():
    local = shard(SparsityAwarePartitioner(1)(_hetero()))
    batch = next(iter(DistributedNeighborLoader(local, [2], batch_size=4, input_nodes="paper")))
    for graph in (local, batch):
        for name in ("edge_index_dict", "adj_t_dict"):
            with pytest.raises(KeyError) as error:  # PyG's type, still
                getattr(graph, name)
            assert isinstance(error.value, AttributeError)
            assert "local.adj_dict where the model takes edge_index_dict" in str(error.value), str(error.value)
        assert not hasattr(graph, "edge_index_dict")
        assert set(graph.x_dict) == set(graph.node_types) and set(graph.adj_dict) == set(graph.edge_types)
        assert graph.collect("edge_index", allow_empty=True) == {}
    with pytest.raises(KeyError, match="did not find any occurrences"):
        local.collect("no_such_attribute")  # other keys: PyG's own error


def test_a_transform_after_partitioning_names_the_fix():
    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(30, 4, generator=gen), edge_index=torch.randint(0, 30, (2, 90), generator=gen))
    local = partition_and_shard(data)
    for transform, kind in ((T.GDC(), AttributeError), (T.GCNNorm(), TypeError), (T.ToUndirected(), AttributeError),
                            (T.LargestConnectedComponents(), TypeError)):
        with pytest.raises(kind) as error:
            transform(copy.copy(local))
        assert "apply it before partitioning" in str(error.value), f"{transform}: {error.value}"
        assert "adj.edge_index()" in str(error.value)
    adj = local.adj
    assert not hasattr(adj, "size") and not hasattr(adj, "no_such_attribute")
    with pytest.raises(AttributeError, match="'HaloAdj' object has no attribute 'no_such_attribute'"):
        _ = adj.no_such_attribute
    assert local.num_edges == adj.nnz and "HaloAdj" in repr(local)
    again = pickle.loads(pickle.dumps(adj))
    assert torch.equal(again.edge_index(), adj.edge_index()) and copy.copy(adj).nnz == adj.nnz
