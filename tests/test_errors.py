"""Bad input gives a clear error naming the problem: never a hang, never silent wrong results."""
import os

import pytest
import torch
from dead_peer import assert_survivor_raised, report_outcome
from graphs import NUM_FEATURES, make_cases
from torch_geometric.data import Data

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, shard
from pyg_sparsecomm.testing import launch


def _graph(n=20):
    gen = torch.Generator().manual_seed(0)
    return Data(x=torch.randn(n, NUM_FEATURES, generator=gen),
                edge_index=torch.randint(0, n, (2, 60), generator=gen), num_nodes=n)


def test_edge_index_out_of_range():
    data = _graph()
    data.edge_index[1, 3] = 20
    with pytest.raises(ValueError, match="num_nodes=20"):
        SparsityAwarePartitioner(2, "random")(data)
    data.edge_index[1, 3] = -1
    with pytest.raises(ValueError, match="ids must lie"):
        SparsityAwarePartitioner(2, "random")(data)


def test_float_edge_index():
    data = _graph()
    data.edge_index = data.edge_index.float()
    with pytest.raises(ValueError, match="integer node ids"):
        SparsityAwarePartitioner(2, "random")(data)


def test_bad_edge_index_shape():
    data = _graph()
    data.edge_index = data.edge_index.t().contiguous()
    with pytest.raises(ValueError, match=r"shape \[2, num_edges\]"):
        SparsityAwarePartitioner(2, "random")(data)


def test_x_rows_differ_from_num_nodes():
    data = _graph()
    data.x = torch.randn(21, NUM_FEATURES)
    with pytest.raises(ValueError, match="x has 21 rows"):
        SparsityAwarePartitioner(2, "random")(data)
    good = SparsityAwarePartitioner(2, "random")(_graph())
    good.x = torch.randn(19, NUM_FEATURES)
    with pytest.raises(ValueError, match="x has 19 rows"):
        shard(good, rank=0, world_size=2)


def test_world_size_differs_from_num_parts():
    data = SparsityAwarePartitioner(2, "random")(_graph())
    with pytest.raises(ValueError, match="num_parts=2 but the world size is 3"):
        shard(data, rank=0, world_size=3)


def test_missing_partition():
    with pytest.raises(ValueError, match="apply SparsityAwarePartitioner"):
        shard(_graph(), rank=0, world_size=1)


@pytest.mark.parametrize("corrupt,match", [
    (lambda p: p[:-1], "one part id per node"),
    (lambda p: p + 5, "num_parts=2"),
    (lambda p: p.float(), "integer part ids"),
    (lambda p: -p, r"part ids lie in \[-1"),
])
def test_corrupt_partition(corrupt, match):
    data = SparsityAwarePartitioner(2, "random")(_graph())
    data.part = corrupt(data.part)
    with pytest.raises(ValueError, match=match):
        shard(data, rank=0, world_size=2)


def test_bad_options():
    with pytest.raises(ValueError, match="unknown partitioning method"):
        SparsityAwarePartitioner(2, "spectral")
    with pytest.raises(ValueError, match="positive integer"):
        SparsityAwarePartitioner(0)
    with pytest.raises(ValueError, match="cannot split 20 nodes into 21 parts"):
        SparsityAwarePartitioner(21, "random")(_graph())
    with pytest.raises(ValueError, match="unknown algorithm"):
        DistributedGCNConv(4, 4, algorithm="2d")


def test_layer_input_checks_single_process():
    data = SparsityAwarePartitioner(1, "random")(_graph())
    local = shard(data, rank=0, world_size=1)
    conv = DistributedGCNConv(NUM_FEATURES, 3)
    with pytest.raises(ValueError, match="this rank owns 20 rows"):
        conv(torch.randn(19, NUM_FEATURES), local.adj)
    with pytest.raises(ValueError, match="floating point"):
        conv(torch.ones(20, NUM_FEATURES, dtype=torch.long), local.adj)
    with pytest.raises(ValueError, match="edge_weight has shape"):
        conv(local.x, local.adj, torch.ones(3))


def test_adjacency_of_another_world_without_process_group():
    data = SparsityAwarePartitioner(2, "random")(_graph())
    local = shard(data, rank=0, world_size=2)
    with pytest.raises(RuntimeError, match="not initialised"):
        DistributedGCNConv(NUM_FEATURES, 3)(local.x, local.adj)


def _wrong_world(rank, world_size):
    data = SparsityAwarePartitioner(world_size + 1, "random")(_graph())
    shard(data)


def _plain_edge_index(rank, world_size):
    data = _graph()
    DistributedGCNConv(NUM_FEATURES, 3)(data.x, data.edge_index)


def _wrong_rank(rank, world_size):
    data = SparsityAwarePartitioner(world_size, "random")(_graph())
    local = shard(data, rank=(rank + 1) % world_size, world_size=world_size)
    DistributedGCNConv(NUM_FEATURES, 3)(local.x, local.adj)


def test_errors_inside_a_real_job():
    with pytest.raises(RuntimeError, match="num_parts=3 but the world size is 2"):
        launch(_wrong_world, 2)
    with pytest.raises(RuntimeError, match="apply SparsityAwarePartitioner|partition the graph"):
        launch(_plain_edge_index, 2)
    with pytest.raises(RuntimeError, match=r"built for rank \d but this process is rank \d"):
        launch(_wrong_rank, 2)


def _dead_peer(rank, world_size, report):
    data = make_cases(world_size)["directed"]
    local = shard(data)
    if rank == 1:
        os._exit(3)  # dies without a word, as a crashed or killed process would
    report_outcome(report, lambda: DistributedGCNConv(NUM_FEATURES, 3)(local.x, local.adj).sum().backward())


def test_dead_peer_surfaces_as_error_within_timeout(tmp_path):
    assert_survivor_raised(_dead_peer, tmp_path / "rank0.txt")


def test_plain_inputs_behave_exactly_like_gcnconv():
    """Without a multi-rank group, edge_index and torch sparse inputs go through GCNConv itself."""
    from torch_geometric.nn import GCNConv
    data = _graph()
    torch.manual_seed(0)
    ours = DistributedGCNConv(NUM_FEATURES, 3, improved=True)
    ref = GCNConv(NUM_FEATURES, 3, improved=True)
    ref.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(data.x, data.edge_index), ref(data.x, data.edge_index))
    adj_t = torch.sparse_coo_tensor(data.edge_index.flip(0), torch.ones(data.edge_index.size(1)),
                                    (20, 20)).coalesce().to_sparse_csr()
    torch.testing.assert_close(ours(data.x, adj_t), ref(data.x, adj_t))
    assert repr(ours) == "DistributedGCNConv(6, 3, algorithm='1d')"
