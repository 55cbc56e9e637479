"""Start-up of a ported script (issue 23, item 1): rank_zero_first, partition_and_shard and
gather_nodes, in real gloo runs at P = 1..4."""
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch_geometric.transforms as T
from configs_per_launch import run_each
from test_distribute_layers import make_graph
from torch_geometric.datasets import Planetoid

from pyg_sparsecomm import (
    SparsityAwarePartitioner,
    gather_nodes,
    partition_and_shard,
    partition_on_rank_zero,
    rank_zero_first,
    shard,
)
from pyg_sparsecomm.graph.inputs import with_edge_index
from pyg_sparsecomm.testing import launch


def _dataset_worker(rank, world_size, root, as_context):
    if as_context:
        with rank_zero_first():
            dataset = Planetoid(root, "Cora", transform=T.NormalizeFeatures())
    else:
        dataset = rank_zero_first(Planetoid)(root, "Cora", transform=T.NormalizeFeatures())
    return dataset[0].x.sum(), dataset[0].edge_index.size(1)


@pytest.mark.parametrize("as_context", [True, False])
def test_rank_zero_first_builds_a_fresh_root_once(planetoid_root, tmp_path, as_context):
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", tmp_path / "Cora" / "raw")
    results = launch(_dataset_worker, 4, str(tmp_path), as_context)
    assert len({(float(s), e) for s, e in results}) == 1 and results[0][1] == 10556


def _failing_worker(rank, world_size):
    with rank_zero_first():
        if rank == 0:
            raise ValueError("no such dataset")
    return "ran"


def _peer_worker(rank, world_size):
    """Rank 0 fails inside the block and carries on; its peers must raise, not run the block."""
    if rank == 0:
        with pytest.raises(ValueError):
            with rank_zero_first():
                raise ValueError("rank 0 fails")
        return "rank 0 raised"
    with rank_zero_first():
        return "ran"


def test_rank_zero_first_error_reaches_every_rank():
    with pytest.raises(RuntimeError, match="no such dataset"):   # rank 0's error, whichever rank reports
        launch(_failing_worker, 3)
    peer_error = r"(?s)rank [12] of 3 failed.*rank 0 failed inside rank_zero_first\(\) \(ValueError: rank 0 fails\)"
    with pytest.raises(RuntimeError, match=peer_error):  # whichever peer the launcher hears from first
        launch(_peer_worker, 3)


def graph(world_size, sparse=False):
    data = make_graph(world_size)
    del data.part, data.num_parts
    data.train_mask = torch.arange(data.num_nodes) % 3 == 0
    if not sparse:
        return data
    del data.edge_attr, data.edge_type     # ToSparseTensor merges the duplicate edges, not these
    return T.ToSparseTensor()(data)


def _shard_worker(rank, world_size, sparse, pre_partitioned):
    data = graph(world_size, sparse)
    if pre_partitioned:                                   # e.g. a pre_transform: used as it is
        data = SparsityAwarePartitioner(world_size, method="random", seed=1)(data)
    local = partition_and_shard(data)
    alias = local.adj_t if sparse else local.edge_index
    full = gather_nodes(local.x * 2, local)
    everywhere = gather_nodes(local.train_mask.long(), local, dst=None)
    adj = local.adj  # adj_t: the shard's HaloAdj; edge_index: its structure without values (as PyG's)
    aliased = alias is adj if sparse else (alias.rowptr is adj.rowptr and alias.col is adj.col
                                           and alias.plan is adj.plan and alias.value is None)
    return local.n_id, aliased, local.adj.nnz, full, everywhere


def _shard_worker_both_forms(rank, world_size):
    return run_each(lambda sparse: _shard_worker(rank, world_size, sparse, False), [(False,), (True,)])


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_partition_and_shard_and_gather_nodes(world_size, subtests):
    """The graph as ``edge_index`` and as a sparse ``adj_t``, both in one launch."""
    per_form = launch(_shard_worker_both_forms, world_size)
    for sparse in (False, True):
        with subtests.test(sparse=sparse):
            _check_shards([r[(sparse,)] for r in per_form], world_size, sparse)


def _check_shards(results, world_size, sparse):
    data = graph(world_size, sparse)
    expected = SparsityAwarePartitioner(world_size)(data)
    num_edges = with_edge_index(data, "test").edge_index.size(1)
    n_ids = torch.cat([r[0] for r in results])
    assert torch.equal(n_ids.sort().values, torch.arange(data.num_nodes))   # every node on one rank
    assert sum(r[2] for r in results) == num_edges                        # every edge on one rank
    for rank, (n_id, aliased, _, full, everywhere) in enumerate(results):
        assert torch.equal(n_id, shard(expected, rank=rank, world_size=world_size).n_id), rank
        assert aliased, "the shard's HaloAdj is not its adj_t / its unweighted edge_index"
        if rank == 0:
            torch.testing.assert_close(full, data.x * 2)
        else:
            assert full is None
        assert torch.equal(everywhere, data.train_mask.long())


def test_partition_and_shard_keeps_a_given_partition():
    results = launch(_shard_worker, 3, False, True)
    data = SparsityAwarePartitioner(3, method="random", seed=1)(graph(3))
    for rank, result in enumerate(results):
        assert torch.equal(result[0], shard(data, rank=rank, world_size=3).n_id)


def _bad_gather_worker(rank, world_size):
    local = partition_and_shard(graph(world_size))
    gather_nodes(local.x[:-1], local)


def test_gather_nodes_names_a_wrong_row_count():
    with pytest.raises(RuntimeError, match="gather_nodes: tensor has .* rows but the shard holds"):
        launch(_bad_gather_worker, 2)


class CountingPartitioner(SparsityAwarePartitioner):
    """Counts the graphs it partitions in this process."""
    calls = 0

    def forward(self, data):
        CountingPartitioner.calls += 1
        return super().forward(data)


def _on_rank_zero_worker(rank, world_size):
    from pyg_sparsecomm.partition import hypergraph
    data = graph(world_size)
    partition_on_rank_zero(SparsityAwarePartitioner(world_size, method="random"), data)
    untouched = hypergraph._MTK_THREADS  # no Mt-KaHyPar ran: its default stays
    done = partition_on_rank_zero(CountingPartitioner(world_size, method="hypergraph", seed=2), data)
    # rank 0 partitioned with the cores the waiting ranks left (launch gives each rank one torch thread)
    threads = (untouched, hypergraph._MTK_THREADS)
    try:  # more parts than nodes: rank 0's partitioner raises, the others must too (not hang)
        partition_on_rank_zero(CountingPartitioner(data.num_nodes + 1), data)
        error = None
    except (ValueError, RuntimeError) as raised:
        error = f"{type(raised).__name__}: {raised}"
    other = graph(world_size)
    if rank == 1:  # e.g. a transform drawing its edges without a common seed
        other.edge_index = other.edge_index[:, 1:]
    try:  # rank 0's partition would be taken for another graph: every rank refuses, before partitioning
        partition_on_rank_zero(CountingPartitioner(world_size), other)
        mismatch = None
    except ValueError as raised:
        mismatch = str(raised)
    return done.part, done.num_parts, done.comm_stats.volume, CountingPartitioner.calls, error, mismatch, threads


def test_partition_on_rank_zero_runs_the_partitioner_once_and_gives_every_rank_its_result():
    expected = SparsityAwarePartitioner(3, method="hypergraph", seed=2)(graph(3))
    results = launch(_on_rank_zero_worker, 3)  # calls: the third partitioner (another graph on rank 1) never runs
    for rank, (part, num_parts, volume, calls, error, mismatch, threads) in enumerate(results):
        assert threads == (None, len(os.sched_getaffinity(0)) if rank == 0 else None), (rank, threads)
        assert torch.equal(part, expected.part) and num_parts == 3
        assert (volume == expected.comm_stats.volume).all()
        assert calls == (2 if rank == 0 else 0), (rank, calls)
        assert ("ValueError: cannot split" if rank == 0 else "RuntimeError: rank 0 failed to partition the graph "
                "(ValueError: cannot split") in error, error
        assert mismatch is not None and "the ranks hold different graphs" in mismatch, mismatch
        n, e = graph(3).num_nodes, graph(3).num_edges
        assert f"rank 0: {n} nodes, {e} edges, rank 1: {n} nodes, {e - 1} edges" in mismatch, mismatch


def test_partition_on_rank_zero_refuses_a_hetero_graph_naming_what_to_do():
    from torch_geometric.data import HeteroData
    data = HeteroData()
    data["paper"].num_nodes = 4
    with pytest.raises(TypeError, match=r"takes a homogeneous Data; partition a HeteroData with partitioner\(data\)"):
        partition_on_rank_zero(SparsityAwarePartitioner(2), data)
