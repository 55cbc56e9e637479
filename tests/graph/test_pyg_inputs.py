"""The graphs PyG scripts hold: ``edge_index`` or a sparse ``adj_t`` (``T.ToSparseTensor()``), the
partitioner as a dataset ``transform``/``pre_transform``, ``local.to(device)``, partition files that
fail on one rank only, and ``HeteroData``."""
import functools
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv
from torch_geometric.typing import WITH_TORCH_SPARSE, SparseTensor
from torch_geometric.utils import coalesce, to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, load_shard, save_partition, shard
from pyg_sparsecomm.graph.inputs import with_edge_index
from pyg_sparsecomm.partition import METHODS
from pyg_sparsecomm.plan.halo_adj import HaloAdj
from pyg_sparsecomm.testing import launch

N = 40


def _graph(weighted=True):
    """A directed graph without duplicate edges (a sparse tensor would merge them)."""
    gen = torch.Generator().manual_seed(3)
    edge_index = coalesce(torch.randint(0, N, (2, 160), generator=gen), num_nodes=N)
    data = Data(x=torch.randn(N, 5, generator=gen), y=torch.randint(0, 3, (N,), generator=gen),
                edge_index=edge_index)
    if weighted:
        data.edge_weight = torch.rand(edge_index.size(1), generator=gen) + 0.5
    return data


def _as_adj_t(data, form):
    """``data`` with its graph as PyG's transposed adjacency (``adj_t[i, j]``: an edge j -> i)."""
    flipped, weight = data.edge_index.flip(0), data.edge_weight
    make = {"csr": to_torch_csr_tensor, "csc": to_torch_csc_tensor, "coo": to_torch_coo_tensor}[form]
    out = Data(x=data.x, y=data.y, adj_t=make(flipped, weight, size=(N, N)))
    return out


def _edges(data):
    return with_edge_index(data, "test").edge_index


def _assert_same_shards(a, b, num_parts):
    """``shard`` of ``a`` and of ``b`` (either graph form) are equal up to the order of the global
    edge list (``e_id`` indexes each graph's own)."""
    edges_a, edges_b = _edges(a), _edges(b)
    for r in range(num_parts):
        la, lb = shard(a, rank=r, world_size=num_parts), shard(b, rank=r, world_size=num_parts)
        for key in ("x", "y", "n_id"):
            assert torch.equal(la[key], lb[key]), key
        for key in ("rowptr", "col", "value"):
            va, vb = getattr(la.adj, key), getattr(lb.adj, key)
            assert (va is None and vb is None) or torch.equal(va, vb), key
        assert torch.equal(la.adj.plan.send_index, lb.adj.plan.send_index)
        assert torch.equal(la.adj.plan.halo_n_id, lb.adj.plan.halo_n_id)
        assert torch.equal(edges_a[:, la.e_id], edges_b[:, lb.e_id])


# -- adj_t forms --------------------------------------------------------------------------------


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("form", ["csr", "csc", "coo"])
def test_adj_t_partitions_and_shards_like_edge_index(form, weighted, tmp_path):
    data = _graph(weighted)
    sparse = _as_adj_t(data, form)
    assert sparse.edge_index is None and sparse.adj_t.layout == getattr(torch, f"sparse_{form}")
    by_edges = SparsityAwarePartitioner(3, "metis")(data)
    by_adj = SparsityAwarePartitioner(3, "metis")(sparse)
    assert torch.equal(by_adj.part, by_edges.part)
    assert by_adj.comm_stats.total_rows == by_edges.comm_stats.total_rows
    # the output holds the equivalent edge_index (adj_t's storage order) and the weights
    assert "adj_t" not in by_adj and by_adj.edge_index.size(1) == data.edge_index.size(1)
    assert (by_adj.edge_weight is not None) == weighted
    _assert_same_shards(by_edges, by_adj, 3)
    # shard and save_partition take adj_t themselves (a partition attached by other means)
    sparse.part, sparse.num_parts = by_edges.part, 3
    _assert_same_shards(by_edges, sparse, 3)
    save_partition(sparse, tmp_path)
    for r in range(3):
        loaded, direct = load_shard(tmp_path, rank=r, world_size=3), shard(by_edges, rank=r, world_size=3)
        assert torch.equal(loaded.adj.col, direct.adj.col) and torch.equal(loaded.x, direct.x)
        # the script reads its graph where it put it: adj_t (with the weights) when given as adj_t
        assert "adj_t" not in direct
        for local in (loaded, shard(sparse, rank=r, world_size=3), shard(by_adj, rank=r, world_size=3)):
            assert local.adj_t is local.adj and (local.adj_t.value is not None) == weighted
        moved = local.to("meta")  # one copy of the adjacency on the device, not one per attribute
        assert moved.adj_t is moved.adj and moved.adj.device.type == "meta"


def test_adj_t_values_become_edge_weights_edge_by_edge():
    data = _graph()
    converted = with_edge_index(_as_adj_t(data, "csc"), "test")
    # the same weighted edge set, edge by edge
    key = lambda ei: ei[0] * N + ei[1]  # noqa: E731 - one line
    order_a, order_b = torch.argsort(key(data.edge_index)), torch.argsort(key(converted.edge_index))
    assert torch.equal(data.edge_index[:, order_a], converted.edge_index[:, order_b])
    assert torch.equal(data.edge_weight[order_a], converted.edge_weight[order_b])
    # an uncoalesced COO: duplicate entries become one summed weight, as in a SpMM
    dup = torch.sparse_coo_tensor(torch.tensor([[1, 1, 0], [0, 0, 1]]), torch.ones(3), (2, 2))
    two = with_edge_index(Data(adj_t=dup, num_nodes=2), "test")
    assert two.edge_index.tolist() == [[1, 0], [0, 1]] and two.edge_weight.tolist() == [1.0, 2.0]


@pytest.mark.skipif(not WITH_TORCH_SPARSE, reason="torch_sparse is not installed")
def test_sparse_tensor_adj_t():
    data = _graph()
    sparse = Data(x=data.x, y=data.y, adj_t=SparseTensor.from_edge_index(
        data.edge_index.flip(0), data.edge_weight, sparse_sizes=(N, N)))
    by_edges, by_adj = (SparsityAwarePartitioner(3, "metis")(d) for d in (data, sparse))
    assert torch.equal(by_adj.part, by_edges.part)
    _assert_same_shards(by_edges, by_adj, 3)


def test_cora_through_to_sparse_tensor(planetoid_root):
    """A PyG pipeline that ran ``T.ToSparseTensor()`` partitions and shards like ``edge_index``
    (without torch_sparse, adj_t is a torch CSR tensor whose all-one values mean "unweighted")."""
    data = Planetoid(planetoid_root, "Cora")[0]
    sparse = T.ToSparseTensor()(data.clone())
    if not WITH_TORCH_SPARSE:
        assert sparse.adj_t.layout == torch.sparse_csr
    assert "edge_index" not in sparse
    P = 4
    by_edges = SparsityAwarePartitioner(P, "metis")(data)
    by_adj = SparsityAwarePartitioner(P, "metis")(sparse)
    assert torch.equal(by_adj.part, by_edges.part)
    assert by_adj.edge_weight is None
    assert by_adj.comm_stats.total_rows == by_edges.comm_stats.total_rows
    _assert_same_shards(by_edges, by_adj, P)
    for r in range(P):
        assert torch.equal(shard(by_adj, rank=r, world_size=P).train_mask,
                           shard(by_edges, rank=r, world_size=P).train_mask)
    # one process: the shard's layer computes GCNConv on the graph given either way
    whole = shard(SparsityAwarePartitioner(1, "contiguous")(sparse), rank=0, world_size=1)
    torch.manual_seed(0)
    conv = DistributedGCNConv(data.num_features, 7)
    ref = GCNConv(data.num_features, 7)
    ref.load_state_dict(conv.state_dict())
    torch.testing.assert_close(conv(whole.x, whole.adj), ref(data.x, data.edge_index), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(conv(sparse.x, sparse.adj_t), ref(data.x, data.edge_index), atol=1e-5, rtol=1e-5)


# -- what is refused, and how ---------------------------------------------------------------------


def _hetero():
    data = HeteroData()
    data["paper"].x = torch.randn(4, 3)
    data["author"].x = torch.randn(2, 3)
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 1], [2, 3]])
    return data


def test_unpartitioned_hetero_data_is_refused_naming_the_partitioner(tmp_path):
    # a partitioned HeteroData saves (tests/store/test_store_hetero.py); an unpartitioned one names the fix
    with pytest.raises(ValueError, match=r"node type\(s\) \['paper', 'author'\] have no partition: apply "
                                         r"SparsityAwarePartitioner"):
        save_partition(_hetero(), tmp_path)
    hetero = SparsityAwarePartitioner(2, "random")(_hetero())
    # to_homogeneous() of a partitioned HeteroData partitions and shards, node_type and all
    homogeneous = SparsityAwarePartitioner(2, "random")(hetero.to_homogeneous())
    local = shard(homogeneous, rank=0, world_size=2)
    assert torch.equal(local.node_type, homogeneous.node_type[local.n_id])


with warnings.catch_warnings():  # torch warns at the first sparse tensors of a process: these are the test's
    warnings.filterwarnings("ignore", message="Sparse (CSR tensor support is in beta|invariant checks are implicitly)")
    UNACCEPTED_GRAPHS = [
        (dict(), r"data has no graph \(attributes \['x'\]\): SparsityAwarePartitioner accepts edge_index "
                 r"\(a LongTensor \[2, num_edges\]\) or adj_t"),
        (dict(adj_t=torch.eye(4)), r"data.adj_t is a torch.Tensor of shape \[4, 4\] and dtype torch.float32; "
                                   r"SparsityAwarePartitioner accepts edge_index"),
        (dict(adj_t=[[0, 1]]), r"data.adj_t is a builtins.list; .* torch sparse CSR, CSC or COO"),
        (dict(edge_index=to_torch_csr_tensor(torch.tensor([[0], [1]]), size=(4, 4))),
         r"data.edge_index is a sparse_csr torch.Tensor .*goes in data.adj_t \(transposed\)"),
        (dict(adj_t=to_torch_csr_tensor(torch.tensor([[0], [1]]), size=(4, 5))),
         r"data.adj_t has shape \[4, 5\] but the graph has num_nodes=4"),
        (dict(adj_t=to_torch_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1, 3), size=(4, 4))),
         r"values of shape \[1, 3\] per edge.*edge_attr"),
    ]


@pytest.mark.parametrize("graph, match", UNACCEPTED_GRAPHS)
def test_unaccepted_graph_names_what_was_found_and_what_is_accepted(graph, match):
    data = Data(x=torch.randn(4, 2), **graph)
    with pytest.raises(ValueError, match=match):
        SparsityAwarePartitioner(2, "random")(data)


def test_x_one_row_short_is_named_when_num_nodes_is_counted_from_it(tmp_path):
    """Issue 45: with num_nodes unset PyG counts x's rows; an x one row short was blamed on edge_index."""
    data = _graph()
    hi = int(data.edge_index.max())
    short = Data(x=data.x[:hi], edge_index=data.edge_index)  # x lacks the row of the largest id
    match = (rf"data.x has {hi} rows but data.edge_index holds node ids up to {hi}.*data.num_nodes is not set.*"
             rf"give x one row per node \({hi + 1} rows for ids 0..{hi}\)")
    partitioned = SparsityAwarePartitioner(2, "random")(data)
    partitioned.x = partitioned.x[:hi]
    for call in (lambda: SparsityAwarePartitioner(2, "random")(short), lambda: shard(partitioned, rank=0, world_size=2),
                 lambda: save_partition(partitioned, tmp_path)):
        with pytest.raises(ValueError, match=match):
            call()
    short.num_nodes = hi + 1  # num_nodes set: x's rows are checked against it, by name
    with pytest.raises(ValueError, match=rf"x has {hi} rows but the graph has num_nodes={hi + 1}"):
        SparsityAwarePartitioner(2, "random")(short)


def test_conflicting_weights_are_refused():
    data = _graph()
    sparse = _as_adj_t(data, "csr")
    sparse.edge_weight = torch.ones(data.edge_index.size(1))
    with pytest.raises(ValueError, match="both edge_weight and an adj_t with other values"):
        SparsityAwarePartitioner(2, "random")(sparse)


# -- local.to(device) --------------------------------------------------------------------------------


def test_to_moves_the_adjacency_with_the_shard(monkeypatch):
    data = SparsityAwarePartitioner(2, "metis")(_graph())
    local = shard(data, rank=1, world_size=2)
    moved = local.to("meta")  # a real device change without a GPU
    assert moved.x.device.type == "meta" and moved.adj.device.type == "meta"
    assert moved.adj.value.device.type == "meta" and moved.adj.rowptr.device.type == "meta"
    assert moved.adj.plan.send_index.device.type == "meta"
    assert moved.adj.plan.halo_n_id.device.type == "meta"
    assert moved.adj.nnz == shard(data, rank=1, world_size=2).adj.nnz

    calls = []
    for name in ("to", "cpu"):
        original = getattr(HaloAdj, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            calls.append((_name, args, kwargs))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(HaloAdj, name, spy)
    local = shard(data, rank=0, world_size=2)
    adj = local.adj
    assert local.to("cpu").adj is adj  # already there: the adjacency (and its caches) is kept
    assert calls == [("to", (), {"device": "cpu", "non_blocking": False})]
    assert local.cpu().adj is adj
    assert calls[1:] == [("cpu", (), {}), ("to", ("cpu",), {})]


def test_moved_single_rank_shard_computes_gcnconv():
    data = _graph()
    local = shard(SparsityAwarePartitioner(1, "contiguous")(data), rank=0, world_size=1).to("cpu")
    torch.manual_seed(0)
    conv = DistributedGCNConv(5, 4)
    ref = GCNConv(5, 4)
    ref.load_state_dict(conv.state_dict())
    torch.testing.assert_close(conv(local.x, local.adj, local.edge_weight),
                               ref(data.x, data.edge_index, data.edge_weight))


# -- partition files that fail on one rank ------------------------------------------------------------


def _load_reporting(rank, world_size, roots):
    outcomes = []
    for root in roots:
        try:
            outcomes.append(("loaded", int(load_shard(root).num_nodes)))
        except Exception as e:  # noqa: BLE001 - the test compares what every rank raised
            outcomes.append((type(e).__name__, str(e)))
    return outcomes


def test_a_bad_part_file_fails_on_every_rank(tmp_path):
    """Rank 1's file is missing, or rank 0's corrupt: every rank raises the same error naming the
    file, instead of the healthy rank going on to hang in its first collective.  One job loads
    three partitions: missing, corrupt, intact (which must then still load on both ranks)."""
    data = SparsityAwarePartitioner(2, "metis")(_graph())
    roots = [tmp_path / name for name in ("missing", "corrupt", "intact")]
    for root in roots:
        save_partition(data, root)
    missing, corrupt = roots[0] / "part-1.pt", roots[1] / "part-0.pt"
    missing.unlink()
    corrupt.write_bytes(corrupt.read_bytes()[:-10] + b"0123456789")
    per_rank = launch(_load_reporting, 2, [str(r) for r in roots], timeout=180, pg_timeout=30)
    assert per_rank[0][:2] == per_rank[1][:2], per_rank  # the same errors on both ranks
    (kind_m, msg_m), (kind_c, msg_c), intact = per_rank[0]
    assert kind_m == "FileNotFoundError" and "failed on 1 of 2 ranks" in msg_m
    assert f"rank 1: FileNotFoundError: missing part file {missing}" in msg_m
    assert "put " in msg_m and "re-run save_partition" in msg_m
    assert kind_c == "ValueError" and f"rank 0: ValueError: checksum mismatch for {corrupt}" in msg_c
    assert intact == ("loaded", shard(data, rank=0, world_size=2).num_nodes)
    assert per_rank[1][2] == ("loaded", shard(data, rank=1, world_size=2).num_nodes)


# -- the partitioner as transform / pre_transform -----------------------------------------------------


@pytest.fixture
def metis_calls(monkeypatch):
    calls = []
    metis = METHODS["metis"]

    @functools.wraps(metis)
    def counting(*args, **kwargs):
        calls.append(1)
        return metis(*args, **kwargs)

    monkeypatch.setitem(METHODS, "metis", counting)
    return calls


def test_as_transform_the_partition_is_computed_once(planetoid_root, metis_calls):
    partitioner = SparsityAwarePartitioner(3, "metis")
    dataset = Planetoid(planetoid_root, "Cora", transform=partitioner)
    first = dataset[0]
    for _ in range(3):
        again = dataset[0]
        assert torch.equal(again.part, first.part)
    assert len(metis_calls) == 1
    plain = Planetoid(planetoid_root, "Cora")[0]
    assert torch.equal(first.part, partitioner.partition(plain.edge_index, plain.num_nodes)[0])
    assert len(metis_calls) == 2  # partition() itself does not use the cache

    first.part.fill_(0)  # a caller editing its copy does not touch the cached partition
    assert not torch.equal(dataset[0].part, first.part)
    # through T.ToSparseTensor (a new adj_t every access) the structure, not the object, is the key
    sparse = Planetoid(planetoid_root, "Cora", transform=T.Compose([T.ToSparseTensor(), partitioner]))
    assert torch.equal(sparse[0].part, dataset[0].part) and torch.equal(sparse[0].part, dataset[0].part)
    assert len(metis_calls) == 2
    # another structure, or other settings, are partitioned anew
    changed = plain.clone()
    changed.edge_index = changed.edge_index[:, 100:]
    partitioner(changed)
    assert len(metis_calls) == 3
    partitioner.seed = 2
    partitioner(changed)
    assert len(metis_calls) == 4


def test_as_pre_transform_the_partition_is_saved_with_the_dataset(tmp_path, metis_calls, planetoid_root):
    # through the planetoid_root fixture: skipped with the reason in a clone without the shared data
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", tmp_path / "Cora" / "raw")
    partitioner = SparsityAwarePartitioner(3, "metis")
    data = Planetoid(str(tmp_path), "Cora", pre_transform=partitioner)[0]
    assert data.num_parts == 3 and data.part.shape == (data.num_nodes,)
    assert len(metis_calls) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. PyG's "weights only load failed" fallback
        reloaded = Planetoid(str(tmp_path), "Cora", pre_transform=SparsityAwarePartitioner(3, "metis"))[0]
    assert len(metis_calls) == 1  # read from the processed file
    assert torch.equal(reloaded.part, data.part)
    for field in ("volume", "part_sizes", "nnz"):
        assert np.array_equal(getattr(reloaded.comm_stats, field), getattr(data.comm_stats, field))
    local = shard(reloaded, rank=2, world_size=3)
    assert torch.equal(local.n_id, torch.nonzero(data.part == 2).view(-1))


@pytest.mark.parametrize("method", ["metis", "metis+vb"])  # the widening is the partitioner's, before any method
def test_int32_edge_index_partitions_and_shards_as_int64(method):
    """An ``int32`` ``edge_index`` (a graph built with numpy) gives the partition and shards of the
    ``int64`` one: the methods' ``row * N + col`` keys overflowed ``int32`` ids from 46341 nodes on
    (METIS and Mt-KaHyPar failed with "'list' argument must have no negative elements")."""
    N = 47_000
    edge_index = torch.randint(0, N, (2, 60_000), generator=torch.Generator().manual_seed(0))
    wide = SparsityAwarePartitioner(2, method)(Data(edge_index=edge_index, num_nodes=N))
    narrow = SparsityAwarePartitioner(2, method)(Data(edge_index=edge_index.int(), num_nodes=N))
    assert torch.equal(narrow.part, wide.part)
    assert narrow.comm_stats.total_rows == wide.comm_stats.total_rows
    a, b = shard(wide, rank=1, world_size=2), shard(narrow, rank=1, world_size=2)
    assert torch.equal(a.adj.col, b.adj.col) and torch.equal(a.adj.plan.send_index, b.adj.plan.send_index)
