"""A distributed ``GCNConv``'s degree normalisation is kept per shard (issue 57): an unweighted
layer's steady-state call makes one exchange (the rows'), not two (degrees, then rows), and its
output stays PyG's; edge weights changed between calls (in place, or a new tensor) are noticed, and
a new shard object equal to the last one reuses the kept normalisation on every rank alike.

Real gloo runs at P = 2 against ``GCNConv`` on the whole graph.
"""
import torch
from graphs import NUM_FEATURES as F
from graphs import OUT
from test_first_use_checks import graph, partition_a
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.comm.counters import comm_counter
from pyg_sparsecomm.testing import launch


def _layers():
    torch.manual_seed(0)
    ref = GCNConv(F, OUT)
    torch.nn.init.normal_(ref.bias)
    ours = GCNConv(F, OUT)
    ours.load_state_dict(ref.state_dict())
    return ref, distribute(ours)


def _unweighted(rank, world_size):
    data = graph(partition_a())
    local = shard(data)
    ref, layer = _layers()
    expected = ref(data.x, data.edge_index)[local.adj.plan.n_id]
    exchanges, errors = [], []
    for step in range(5):
        if step == 3:
            local = shard(data)  # every rank: a new shard object, equal to the last
        before = comm_counter().calls["halo"]  # halo exchanges (not a rank's announcement of a new shard)
        out = layer(local.x, local.adj)
        exchanges.append(comm_counter().calls["halo"] - before)
        errors.append(float((out - expected).abs().max()))
    return exchanges, errors


def test_an_unweighted_gcn_exchanges_its_degrees_once_per_shard():
    for exchanges, errors in launch(_unweighted, 2):
        assert max(errors) < 1e-5, errors
        assert exchanges[0] == 2  # the first call: degrees, then rows
        assert exchanges[2:] == [1, 1, 1], exchanges  # steady state, and the equal new shard: rows only


def _weighted(rank, world_size):
    data = graph(partition_a())
    data.edge_weight = torch.rand(data.edge_index.size(1), generator=torch.Generator().manual_seed(3)) + 0.5
    local = shard(data)
    ref, layer = _layers()
    weight, errors = local.edge_weight, []
    for step, scale in enumerate([1.0, 1.0, 3.0, 3.0, 0.5]):
        if step == 2:
            weight.mul_(3.0)  # in place: the same object, a new version
        elif step == 4:
            weight = weight / 6.0  # a new tensor
        expected = ref(data.x, data.edge_index, data.edge_weight * scale)[local.adj.plan.n_id]
        out = layer(local.x, local.adj.with_value(None), weight)
        errors.append(float((out - expected).abs().max()))
    return errors


def test_changed_edge_weights_are_noticed():
    for errors in launch(_weighted, 2):
        assert max(errors) < 1e-5, errors
