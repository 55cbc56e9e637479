"""``partition_and_shard`` on a graph that carries ``edge_weight``: the shard's ``edge_index`` is
PyG's (no values), its ``edge_weight`` is used only where the script passes it, and an ``adj_t``
keeps its values, exactly as in the single-process script (real gloo runs, P = 1..4)."""
import pytest
import torch
import torch_geometric.transforms as T
from test_distribute_layers import make_graph
from torch_geometric.nn.models import GCN
from torch_geometric.utils import remove_self_loops

from pyg_sparsecomm import distribute, gather_nodes, partition_and_shard
from pyg_sparsecomm.testing import launch


def weighted_graph(world_size):
    data = make_graph(world_size)
    del data.part, data.num_parts, data.edge_attr, data.edge_type
    return data


def build_model(seed):
    torch.manual_seed(seed)
    return GCN(weighted_graph(1).num_features, 8, num_layers=2, out_channels=3)


def _worker(rank, world_size, call):
    data = weighted_graph(world_size)
    if call in ("adj_t", "SparseTensor"):
        data = T.ToSparseTensor()(data)   # moves edge_weight into adj_t's values, as PyG users do
    local = partition_and_shard(data)
    model = distribute(build_model(seed=rank))   # different seeds: rank 0's parameters are broadcast
    if call == "edge_index":
        out = model(local.x, local.edge_index)
    elif call == "edge_index+edge_weight":
        out = model(local.x, local.edge_index, local.edge_weight)
    elif call == "adj_t":
        out = model(local.x, local.adj_t)
    else:  # as a torch_sparse.SparseTensor adj_t would give it (torch_sparse is not installed here)
        local.adj_t.given_as = "SparseTensor"
        out = model(local.x, local.adj_t)
    return gather_nodes(out, local)


def reference(call):
    data = weighted_graph(1)
    model = build_model(seed=0)
    if call == "edge_index":
        return model(data.x, data.edge_index)
    if call == "edge_index+edge_weight":
        return model(data.x, data.edge_index, data.edge_weight)
    if call == "adj_t":
        return model(data.x, T.ToSparseTensor()(data).adj_t)
    # SparseTensor's gcn_norm sets the diagonal to 1 (fill_diag): existing loops dropped, one added
    return model(data.x, *remove_self_loops(data.edge_index, data.edge_weight))


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("call", ["edge_index", "edge_index+edge_weight", "adj_t", "SparseTensor"])
def test_weighted_graph_calls_equal_single_process(world_size, call):
    out = launch(_worker, world_size, call)[0]
    expected = reference(call)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_the_three_calls_differ():
    """The comparison above could not tell the calls apart if they agreed: the weights change the
    output, and on this graph with self-loops PyG's adj_t path (a loop added to every node) differs
    from its edge_index path (loops added where missing) -- the shard follows the script's form."""
    calls = ("edge_index", "edge_index+edge_weight", "adj_t", "SparseTensor")
    outs = [reference(call) for call in calls]
    for a in range(len(outs)):
        for b in range(a):
            assert (outs[a] - outs[b]).abs().max() > 1e-2, (calls[a], calls[b])


def _minibatch_worker(rank, world_size):
    from pyg_sparsecomm.loader import DistributedNeighborLoader
    local = partition_and_shard(T.ToSparseTensor()(weighted_graph(world_size)))
    loader = DistributedNeighborLoader(local, [3, 2], batch_size=8, input_nodes=torch.arange(16))
    batch = next(iter(loader))
    return batch.adj_t is batch.adj, batch.adj.given_as, batch.adj.trim().given_as


def test_minibatches_keep_the_form_of_the_graph():
    """A mini-batch of a shard given as a torch sparse adj_t is one too (its layers add self-loops
    and use values as PyG's adj_t path does, as on the whole shard)."""
    for aliased, form, trimmed_form in launch(_minibatch_worker, 2):
        assert aliased and form == trimmed_form == "torch.sparse"
