"""The partitioner computes a partition's communication pattern once: ``shard()`` (every rank's,
the 1.5D grid's) and ``save_partition()`` of its result reuse it (``plan/known_pattern.py``), with
shards equal to those of a pattern computed anew; an edited graph or partition, or statistics that
went through pickling, compute it again."""
import pickle
import sys

import pytest
import torch
from torch_geometric.data import Data

import pyg_sparsecomm.plan.homogeneous as homogeneous
from pyg_sparsecomm import SparsityAwarePartitioner, load_shard, save_partition, shard
from pyg_sparsecomm.comm.grid import ProcessGrid
from pyg_sparsecomm.store.rank_data import replicate, shard_from_pattern

P = 4


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of ``comm_pattern`` wherever the package imported it."""
    original, count = homogeneous.comm_pattern, [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)
    for name, module in list(sys.modules.items()):
        if name.startswith("pyg_sparsecomm") and getattr(module, "comm_pattern", None) is original:
            monkeypatch.setattr(module, "comm_pattern", counted)
    return count


def _graph(num_nodes: int = 80, num_edges: int = 400) -> Data:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    return Data(x=torch.randn(num_nodes, 3, generator=gen), edge_index=edge_index,
                edge_weight=torch.rand(num_edges, generator=gen), num_nodes=num_nodes)


def _fresh(data: Data, rank: int, num_parts: int = P) -> Data:
    """The shard of a pattern computed anew (what shard() did before it reused the partitioner's)."""
    pattern = homogeneous.comm_pattern(data.edge_index.clone(), data.part.clone(), data.num_nodes, num_parts)
    return shard_from_pattern(data, pattern, rank)


def _assert_same(a: Data, b: Data) -> None:
    for key in ("n_id", "x", "e_id", "edge_weight"):
        assert torch.equal(a[key], b[key]), key
    for key in ("rowptr", "col", "value"):
        assert torch.equal(getattr(a.adj, key), getattr(b.adj, key)), key
    pa, pb = a.adj.plan, b.adj.plan
    assert (pa.send_counts, pa.recv_counts) == (pb.send_counts, pb.recv_counts)
    assert torch.equal(pa.send_index, pb.send_index) and torch.equal(pa.halo_n_id, pb.halo_n_id)


def test_partitioner_and_every_rank_compute_one_pattern(calls):
    partitioner = SparsityAwarePartitioner(P, method="metis")
    data = partitioner(_graph())
    assert calls[0] == 1  # for data.comm_stats
    shards = [shard(data, rank=r, world_size=P) for r in range(P)]
    assert calls[0] == 1  # before: one more per rank
    again = partitioner(data.clone())  # the partitioner's cache: the same graph, the same pattern
    assert [shard(again, rank=r, world_size=P) for r in range(1)] and calls[0] == 1
    for r, local in enumerate(shards):
        _assert_same(local, _fresh(data, r))


def test_the_grid_and_save_partition_reuse_it_too(calls, tmp_path):
    data = SparsityAwarePartitioner(2, method="random")(_graph())
    grid = ProcessGrid(2, world_size=4, rank=3)  # P = 4, c = 2: block row 1 of 2, replica 1
    local = shard(data, grid=grid)
    save_partition(data, tmp_path / "parts")
    assert calls[0] == 1
    _assert_same(local, replicate(_fresh(data, grid.row, 2), grid.col, grid.replication))
    assert torch.equal(local.owner_mask, replicate(_fresh(data, grid.row, 2), grid.col, 2).owner_mask)
    for r in range(2):
        _assert_same(load_shard(tmp_path / "parts", rank=r, world_size=2), _fresh(data, r, 2))


@pytest.mark.parametrize("edit", ["part", "edge_index in place", "new edge_index", "pickled stats"])
def test_an_edited_graph_or_partition_computes_the_pattern_again(calls, edit):
    data = SparsityAwarePartitioner(P, method="random")(_graph())
    if edit == "part":
        data.part[:3] = (data.part[:3] + 1) % P
    elif edit == "edge_index in place":
        data.edge_index[0, :5] = 0
    elif edit == "new edge_index":
        data.edge_index = data.edge_index.flip(0)
    else:
        data.comm_stats = pickle.loads(pickle.dumps(data.comm_stats))
        assert not hasattr(data.comm_stats, "_known_pattern")  # the pattern never leaves the process
    shards = [shard(data, rank=r, world_size=P) for r in range(P)]
    assert calls[0] == 1 + P
    for r, local in enumerate(shards):
        _assert_same(local, _fresh(data, r))
