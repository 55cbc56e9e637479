"""Bad input to a distributed model gets an error naming the problem and the fix, on every rank
(before any collective, so nothing hangs)."""
import pytest
import torch
from layer_specs import OUT, D, F
from test_distribute_layers import make_graph
from torch_geometric.nn import GATConv, GCNConv

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.testing import launch


def _errors_worker(rank, world_size):
    data = make_graph(world_size)
    local = shard(data)
    gcn = distribute(GCNConv(F, OUT))
    gat = distribute(GATConv(F, OUT, edge_dim=D))
    with pytest.raises(ValueError, match="plain edge_index .* call local = shard\\(data\\) and pass local.adj"):
        gcn(local.x, data.edge_index)
    with pytest.raises(ValueError, match="edge_index=None .* shard\\(data\\) keeps .* local.adj .* pass local.adj"):
        gcn(local.x, local.edge_index)  # shard() gives local.adj only (partition_and_shard also edge_index)
    with pytest.raises(ValueError, match="edge_weight has .* rows .* pass the shard's local.edge_weight"):
        gcn(local.x, local.adj, data.edge_weight)
    with pytest.raises(ValueError, match="edge_attr has .* rows .* pass the shard's local.edge_attr"):
        gat(local.x, local.adj, edge_attr=data.edge_attr)
    with pytest.raises(ValueError, match="this rank owns .* rows"):
        gat(data.x, local.adj)
    with pytest.raises(ValueError, match="got 2 HaloAdj arguments"):
        gcn(local.x, local.adj, local.adj)
    return True


def test_errors_name_the_problem():
    assert launch(_errors_worker, 2) == [True, True]


def test_unknown_algorithm_and_layouts_are_refused():
    with pytest.raises(ValueError, match="unknown algorithm 'fast'"):
        distribute(GCNConv(F, OUT), algorithm="fast")
    with pytest.raises(ValueError, match="needs replication > 1"):
        distribute(GCNConv(F, OUT), algorithm="1.5d")
    with pytest.raises(ValueError, match="needs replication = 1"):
        distribute(GCNConv(F, OUT), algorithm="1d", replication=2)


def test_single_process_without_shard_is_plain_pyg():
    data = make_graph(1)
    torch.manual_seed(0)
    ref = GCNConv(F, OUT)(data.x, data.edge_index, data.edge_weight)
    torch.manual_seed(0)
    out = distribute(GCNConv(F, OUT))(data.x, data.edge_index, data.edge_weight)
    assert torch.equal(out, ref)


def test_state_dict_keys_checkpoints_copies_and_pickles_survive(tmp_path):
    from torch_geometric.nn.models import GraphSAGE
    torch.manual_seed(0)
    model = GraphSAGE(F, 8, num_layers=2, out_channels=OUT, norm="batch_norm")
    checkpoint = {k: v.clone() for k, v in model.state_dict().items()}
    distribute(model)
    assert list(model.state_dict()) == list(checkpoint)
    model.load_state_dict(checkpoint)
    data = make_graph(1)
    local = shard(data)
    out = model(local.x, local.adj)  # SAGE's lin_l is swapped during the call and restored after
    assert list(model.state_dict()) == list(checkpoint)
    import copy
    for twin in (copy.deepcopy(model), _pickled(model, tmp_path)):
        torch.testing.assert_close(twin(local.x, local.adj), model(local.x, local.adj))
    assert out.shape == (data.num_nodes, OUT)


def _pickled(model, tmp_path):
    torch.save(model, tmp_path / "model.pt")
    return torch.load(tmp_path / "model.pt", weights_only=False)
