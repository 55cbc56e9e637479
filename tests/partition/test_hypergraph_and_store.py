"""Hypergraph partitioning (km1 = measured volume) and the per-rank partition store."""
import json
import sys

import numpy as np
import pytest
import torch
from graphs import NUM_FEATURES, make_cases
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import (
    DistributedGCNConv,
    SparsityAwarePartitioner,
    graph_fingerprint,
    load_shard,
    save_partition,
    shard,
)
from pyg_sparsecomm.partition.hypergraph import column_nets, km1
from pyg_sparsecomm.testing import launch


@pytest.mark.parametrize("P", [2, 3, 4])
def test_km1_equals_plan_volume(P):
    for name, data in make_cases(1).items():
        nets = column_nets(data.edge_index, data.num_nodes)
        for method in ["hypergraph", "random"]:
            out = SparsityAwarePartitioner(P, method, seed=2)(data)
            assert km1(*nets, out.part.numpy()) == out.comm_stats.total_rows, (name, method)


def test_column_net_builder_on_a_tiny_directed_graph():
    """Net j = {j} ∪ {i : j -> i}; duplicate edges and self-loops add no pin.  Its km1, and per part
    the sends and receives of the balancing's model, are the exchange the plan computes."""
    from pyg_sparsecomm import CommStats
    from pyg_sparsecomm.partition.hypergraph import column_net_pins
    from pyg_sparsecomm.partition.volume_model import _state, column_net_incidence
    from pyg_sparsecomm.plan import comm_pattern
    # 0 -> 1, 0 -> 2, 1 -> 2, a self-loop at 2, 3 -> 0 twice; 4 is isolated
    edge_index = torch.tensor([[0, 0, 1, 2, 3, 3], [1, 2, 2, 2, 0, 0]])
    src, dst = edge_index.numpy()
    net, pin = column_net_pins(src, dst, 5)
    assert net.tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 4] and pin.tolist() == [0, 1, 2, 1, 2, 2, 0, 3, 4]
    # a mini-batch's nets: only the columns it reads (here the sampled edges 0 -> 2 and 3 -> 0)
    net, pin = column_net_pins(src[[1, 4]], dst[[1, 4]], 5, columns=np.array([0, 3]))
    assert net.tolist() == [0, 0, 3, 3] and pin.tolist() == [0, 2, 0, 3]
    net_ptr, pins = column_nets(edge_index, 5)  # nets 2 and 4 have one pin: no remote reader
    assert net_ptr.tolist() == [0, 3, 5, 7] and pins.tolist() == [0, 1, 2, 1, 2, 0, 3]
    nets = column_net_incidence(edge_index, 5)
    assert nets.net_ptr.tolist() == [0, 3, 5, 6, 8, 9]
    nets_of = [nets.in_net[a:b].tolist() for a, b in zip(nets.in_ptr[:-1], nets.in_ptr[1:], strict=False)]
    assert nets_of == [[0, 3], [0, 1], [0, 1, 2], [3], [4]]
    for part in ([0, 0, 1, 1, 1], [0, 1, 2, 0, 1], [1, 1, 1, 1, 0]):
        part = torch.tensor(part)
        stats = CommStats.from_pattern(comm_pattern(edge_index, part, 5, 3))
        assert km1(net_ptr, pins, part.numpy()) == stats.total_rows
        state = _state(nets, part.numpy(), 3)
        assert state.km1 == stats.total_rows
        assert state.S.tolist() == stats.rows_sent.tolist() and state.R.tolist() == stats.rows_received.tolist()
    assert stats.total_rows == 0 and km1(net_ptr, pins, np.array([0, 0, 0, 0, 1])) == 0


def test_hypergraph_beats_metis_volume_and_is_deterministic():
    data = make_cases(1)["directed"]
    hp = SparsityAwarePartitioner(4, "hypergraph", seed=3)(data)
    again = SparsityAwarePartitioner(4, "hypergraph", seed=3)(data)
    assert torch.equal(hp.part, again.part)
    rnd = SparsityAwarePartitioner(4, "random", seed=3)(data)
    assert hp.comm_stats.total_rows < rnd.comm_stats.total_rows
    assert hp.comm_stats.as_dict()["compute_imbalance"] <= 1.1
    assert "epsilon=0.1" in repr(SparsityAwarePartitioner(4, "hypergraph", epsilon=0.1))


def test_hypergraph_options_and_missing_backend(monkeypatch):
    with pytest.raises(ValueError, match="takes no option"):
        SparsityAwarePartitioner(2, "metis", epsilon=0.1)
    data = make_cases(1)["directed"]
    with pytest.raises(ValueError, match="unknown hypergraph backend"):
        SparsityAwarePartitioner(2, "hypergraph", backend="zoltan")(data)
    monkeypatch.setitem(sys.modules, "mtkahypar", None)
    with pytest.raises(ImportError, match=r"pyg_sparsecomm\[hypergraph\]"):
        SparsityAwarePartitioner(2, "hypergraph")(data)


def test_store_round_trip_and_validation(tmp_path):
    data = SparsityAwarePartitioner(3, "metis")(make_cases(1)["self_loops_weighted"])
    save_partition(data, tmp_path)
    for r in range(3):
        loaded = load_shard(tmp_path, rank=r, world_size=3, expected_fingerprint=graph_fingerprint(data))
        direct = shard(data, rank=r, world_size=3)
        for key in ["x", "n_id", "e_id", "edge_weight"]:
            assert torch.equal(loaded[key], direct[key]), key
        for key in ["rowptr", "col"]:
            assert torch.equal(getattr(loaded.adj, key), getattr(direct.adj, key))
        assert loaded.adj.plan.send_counts == direct.adj.plan.send_counts
        assert torch.equal(loaded.adj.plan.send_index, direct.adj.plan.send_index)

    with pytest.raises(ValueError, match="has 3 parts but the world size is 2"):
        load_shard(tmp_path, rank=0, world_size=2)
    other = SparsityAwarePartitioner(3, "random")(make_cases(1)["self_loops_weighted"])
    with pytest.raises(ValueError, match="stale cache"):
        load_shard(tmp_path, rank=0, world_size=3, expected_fingerprint=graph_fingerprint(other))
    raw = bytearray((tmp_path / "part-1.pt").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "part-1.pt").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_shard(tmp_path, rank=1, world_size=3)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["format_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="format version 99"):
        load_shard(tmp_path, rank=0, world_size=3)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt partition manifest"):
        load_shard(tmp_path, rank=0, world_size=3)


def _forward_from_store(rank, world_size, root):
    local = load_shard(root)  # reads only this rank's file
    torch.manual_seed(0)
    conv = DistributedGCNConv(NUM_FEATURES, 4)
    x = local.x.clone().requires_grad_()
    y = conv(x, local.adj, local.edge_weight)
    y.sum().backward()
    return local.n_id, y.detach(), x.grad


def test_training_from_store_matches_gcnconv(tmp_path):
    data = SparsityAwarePartitioner(3, "hypergraph")(make_cases(1)["weighted"])
    save_partition(data, tmp_path)
    per_rank = launch(_forward_from_store, 3, str(tmp_path))
    torch.manual_seed(0)
    conv = GCNConv(NUM_FEATURES, 4)
    x = data.x.clone().requires_grad_()
    ref = conv(x, data.edge_index, data.edge_weight)
    ref.sum().backward()
    y, gx = torch.zeros_like(ref), torch.zeros_like(x)
    for n_id, yy, gg in per_rank:
        y[n_id], gx[n_id] = yy, gg
    torch.testing.assert_close(y, ref.detach(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(gx, x.grad, atol=1e-5, rtol=1e-4)


def _rmat_like(n=400, m=3000, seed=0):
    """A skewed directed graph (power-law out-degrees), where send volumes are irregular."""
    gen = torch.Generator().manual_seed(seed)
    hubs = (torch.rand(m, generator=gen) ** 3 * n).long()
    dst = torch.randint(0, n, (m,), generator=gen)
    from torch_geometric.data import Data
    return Data(edge_index=torch.stack([hubs, dst]), num_nodes=n)


@pytest.mark.parametrize("method", ["metis", "hypergraph", "random"])
@pytest.mark.parametrize("P", [4, 8])
def test_volume_balancing_never_hurts(method, P):
    data = _rmat_like()
    base = SparsityAwarePartitioner(P, method, seed=1)(data)
    vb = SparsityAwarePartitioner(P, method + "+vb", seed=1)(data)
    b, r = base.comm_stats.as_dict(), vb.comm_stats.as_dict()
    assert r["max_rows_sent"] <= b["max_rows_sent"]
    assert r["max_rows_received"] <= b["max_rows_received"]
    assert r["total_rows"] <= 1.1 * b["total_rows"] + 1
    assert r["compute_imbalance"] <= max(1.03, b["compute_imbalance"]) + 1e-9
    nets = column_nets(data.edge_index, data.num_nodes)
    assert km1(*nets, vb.part.numpy()) == vb.comm_stats.total_rows
    again = SparsityAwarePartitioner(P, method, seed=1, balance="max_send")(data)
    assert torch.equal(vb.part, again.part)


def test_volume_balancing_improves_a_skewed_graph():
    data = _rmat_like(n=2000, m=20000)
    base = SparsityAwarePartitioner(8, "metis", seed=0)(data).comm_stats.as_dict()
    vb = SparsityAwarePartitioner(8, "metis+vb", seed=0, epsilon_balance=0.05)(data).comm_stats.as_dict()
    assert vb["max_rows_sent"] < base["max_rows_sent"]
    with pytest.raises(ValueError, match="unknown balance"):
        SparsityAwarePartitioner(8, "metis", balance="max_recv")


def test_kahypar_backend_km1_exact_and_crash_contained():
    from pyg_sparsecomm.partition.kahypar_backend import kahypar_partition
    from pyg_sparsecomm.partition.methods import row_nnz
    data = make_cases(1)["directed"]
    out = SparsityAwarePartitioner(4, "hypergraph", backend="kahypar", seed=1)(data)
    nets = column_nets(data.edge_index, data.num_nodes)
    assert km1(*nets, out.part.numpy()) == out.comm_stats.total_rows
    assert out.comm_stats.total_rows < SparsityAwarePartitioner(4, "random")(data).comm_stats.total_rows
    # balanced as asked (epsilon 0.03 of the row-nonzero weights): a degenerate one-part answer has volume 0
    load = np.bincount(out.part.numpy(), weights=row_nnz(data.edge_index, data.num_nodes), minlength=4)
    assert load.max() <= 1.03 * np.ceil(load.sum() / 4)
    weights = np.ones(data.num_nodes, dtype=np.int64)
    with pytest.raises(RuntimeError, match="KaHyPar did not return a partition"):
        kahypar_partition(*nets, weights, data.num_nodes, 4, 0.03, 0, config={"mode": "nonsense"})


def test_metis_volume_objective_and_rmat_generator():
    from pyg_sparsecomm.graph.datasets import rmat_graph
    data = rmat_graph(scale=10, edge_factor=8, seed=3)
    assert data.num_nodes == 1024 and data.edge_index.size(1) > 6000
    assert bool((data.edge_index[0] != data.edge_index[1]).all())
    assert torch.equal(rmat_graph(scale=10, edge_factor=8, seed=3).edge_index, data.edge_index)
    deg = torch.bincount(data.edge_index[0], minlength=1024)
    assert int(deg.max()) > 10 * float(deg.float().mean())  # skewed, as R-MAT must be
    vol = SparsityAwarePartitioner(8, "metis", objective="vol")(data).comm_stats
    rnd = SparsityAwarePartitioner(8, "random")(data).comm_stats
    assert vol.total_rows < rnd.total_rows
    with pytest.raises(ValueError, match="unknown METIS objective"):
        SparsityAwarePartitioner(8, "metis", objective="edges")(data)



@pytest.mark.parametrize("P", [2, 7, 64])
def test_metis_seed(P):
    """Seed 0 is pymetis called as before (benchmark tables depend on it); equal seeds agree, seeds differ."""
    import pymetis

    from pyg_sparsecomm.graph.datasets import sbm_graph
    from pyg_sparsecomm.partition.methods import metis_partition, row_nnz, symmetric_csr
    data = sbm_graph(num_nodes=2000, num_classes=7)  # no vertex heavier than a part's share, even at P = 64
    ei, n = data.edge_index, data.num_nodes
    xadj, adjncy = symmetric_csr(ei, n)
    w = row_nnz(ei, n)
    for objective, objtype in (("cut", pymetis.ObjType.CUT), ("vol", pymetis.ObjType.VOL)):
        ref = pymetis.part_graph(P, pymetis.CSRAdjacency(xadj, adjncy), vweights=w,
                                 options=pymetis.Options(seed=0, objtype=int(objtype)),
                                 recursive=False if objective == "vol" else None).vertex_part
        parts = [metis_partition(ei, n, P, s, objective=objective) for s in (0, 1, 2, 3)]
        assert torch.equal(parts[0], torch.as_tensor(np.asarray(ref)))
        assert torch.equal(parts[2], metis_partition(ei, n, P, 2, objective=objective))
        assert len({tuple(p.tolist()) for p in parts[1:]}) > 1
        for part in parts:
            assert int(part.min()) >= 0 and int(part.max()) < P
            load = np.bincount(part.numpy(), weights=w, minlength=P)
            assert load.max() / load.mean() <= 1.03 + 0.01  # METIS's default k-way ufactor, with its overshoot


def _spec_cases():
    from pyg_sparsecomm.loader import NeighborSampling, NodeSubsetSampling
    return [NeighborSampling(batch_size=96, num_neighbors=(5, 3), shuffle=True, seed=3),
            NodeSubsetSampling(batch_size=150, shuffle=True, seed=3)]


def _shp_graph():
    from pyg_sparsecomm.graph.datasets import sbm_graph
    data = sbm_graph(num_nodes=1200, num_classes=4, avg_degree=8)
    data.train_mask = torch.rand(data.num_nodes, generator=torch.Generator().manual_seed(5)) < 0.5
    return data


def _nets_by_hand(edge_index, batches):
    """Column nets of every batch, built from the batches' edge ids alone: a net per source
    column j, pins j and the targets of the batch edges reading j."""
    src, dst = edge_index.tolist()
    nets = []
    for b in batches:
        readers = {}
        for e in b.e_id.tolist():
            readers.setdefault(src[e], {src[e]}).add(dst[e])
        nets += [sorted(readers[j]) for j in sorted(readers)]
    return nets


def _csr(nets):
    return (np.concatenate([[0], np.cumsum([len(n) for n in nets])]).astype(np.int64),
            np.asarray([p for n in nets for p in n], dtype=np.int64))


def test_hoeffding_num_nets():
    from pyg_sparsecomm.partition.stochastic import hoeffding_num_nets
    assert hoeffding_num_nets(8, 0.5, 0.05) == 362  # (P-1)^2 / (2 θ^2) ln(2/δ) = 98 ln 40
    assert hoeffding_num_nets(16, 0.1, 0.5) == 15596  # the paper's θ = 0.1, δ = 0.5: 11250 ln 4
    with pytest.raises(ValueError, match="theta > 0"):
        hoeffding_num_nets(8, 0.0, 0.05)


@pytest.mark.parametrize("case", [0, 1], ids=["neighbor", "node_subset"])
def test_stochastic_hypergraph_is_built_from_the_loaders_batches(case):
    """One epoch of SHP's sample is exactly the nets of ``global_batches``' batches (what the
    distributed loaders yield), and the partition is Mt-KaHyPar's on exactly those nets."""
    from pyg_sparsecomm.loader import global_batches
    from pyg_sparsecomm.partition.hypergraph import drop_single_pin_nets, merge_identical_nets, run_backend
    from pyg_sparsecomm.partition.methods import row_nnz
    from pyg_sparsecomm.partition.stochastic import stochastic_nets
    data, spec = _shp_graph(), _spec_cases()[case]
    ei, n, mask = data.edge_index, data.num_nodes, data.train_mask
    epoch0, epoch1 = (global_batches(ei, n, spec, mask, e) for e in (0, 1))
    nets = stochastic_nets(ei, n, spec, mask, num_batches=len(epoch0))
    assert (nets.num_batches, nets.num_epochs) == (len(epoch0), 1)
    by_hand = _nets_by_hand(ei, epoch0)
    assert np.array_equal(nets.net_ptr, _csr(by_hand)[0]) and np.array_equal(nets.pins, _csr(by_hand)[1])
    # more batches than an epoch go on with the next epoch's, in order
    more = stochastic_nets(ei, n, spec, mask, num_batches=len(epoch0) + 2)
    assert np.array_equal(more.pins, _csr(by_hand + _nets_by_hand(ei, epoch1[:2]))[1])
    shp = SparsityAwarePartitioner(4, "stochastic_hypergraph", seed=1, sampling=spec, input_nodes=mask,
                                   num_batches=len(epoch0))(data)
    merged = merge_identical_nets(*drop_single_pin_nets(*_csr(by_hand)))
    direct = run_backend(merged[0], merged[1], row_nnz(ei, n), n, 4, 0.03, 1, net_weights=merged[2])
    assert np.array_equal(shp.part.numpy(), direct)


def test_stochastic_hypergraph_default_sample_meets_eq_14():
    """Default: epoch 0 whole, then batch by batch until the nets reach eq. (14), no further."""
    from pyg_sparsecomm.loader import global_batches
    from pyg_sparsecomm.partition.stochastic import hoeffding_num_nets, stochastic_nets
    data = _shp_graph()
    ei, n, mask = data.edge_index, data.num_nodes, data.train_mask
    for k, spec in enumerate(_spec_cases()):
        per_epoch = len(global_batches(ei, n, spec, mask, 0))
        for P in (2, 8):
            needed = hoeffding_num_nets(P, 0.1, 0.5)
            nets = stochastic_nets(ei, n, spec, mask, min_nets=needed)
            count = nets.net_ptr.size - 1
            assert nets.num_epochs >= 1 and nets.num_batches >= per_epoch and count >= needed
            if nets.num_batches > per_epoch:  # grown past epoch 0: one batch less would not do
                fewer = stochastic_nets(ei, n, spec, mask, num_batches=nets.num_batches - 1)
                assert fewer.net_ptr.size - 1 < needed
        # the partitioner's default sample also holds 4 |E| sampled edges (edge_coverage=4): the same
        # partition as with its batch count spelled out
        needed, min_edges = hoeffding_num_nets(8, 0.1, 0.5), 4 * ei.size(1)
        sample = stochastic_nets(ei, n, spec, mask, min_nets=needed, min_edges=min_edges)
        drawn = sample.num_batches
        assert sample.num_edges >= min_edges and sample.net_ptr.size - 1 >= needed
        fewer = stochastic_nets(ei, n, spec, mask, num_batches=drawn - 1)
        assert drawn == per_epoch or fewer.num_edges < min_edges or fewer.net_ptr.size - 1 < needed
        if k == 1:
            continue  # node subsets of 150 of 1200 nodes: 32 epochs for 4 |E|, a slower partition
        default = SparsityAwarePartitioner(8, "stochastic_hypergraph", sampling=spec, input_nodes=mask)(data)
        spelled = SparsityAwarePartitioner(8, "stochastic_hypergraph", sampling=spec, input_nodes=mask,
                                           num_batches=drawn)(data)
        assert torch.equal(default.part, spelled.part)
    # node subsets of 150 of 1200 nodes need several epochs at P = 8 (about 2000 nets per epoch)
    assert stochastic_nets(ei, n, _spec_cases()[1], mask, min_nets=hoeffding_num_nets(8, 0.1, 0.5)).num_epochs >= 2


def test_stochastic_hypergraph_volume_and_shorthand():
    from pyg_sparsecomm.loader import NeighborSampling, NodeSubsetSampling
    from pyg_sparsecomm.partition.stochastic import expected_minibatch_volume, minibatch_volumes, sampling_spec
    data = _shp_graph()
    ei, n, mask = data.edge_index, data.num_nodes, data.train_mask
    # one batch of every node and its whole induced subgraph (or every in-edge) is the full graph
    full = SparsityAwarePartitioner(4, "metis")(data)
    for whole in (NodeSubsetSampling(batch_size=n), NeighborSampling(batch_size=n, num_neighbors=(-1,))):
        assert expected_minibatch_volume(ei, n, full.part, whole, num_batches=2) == full.comm_stats.total_rows
    # the shorthand: fanouts -> neighbour sampling, none -> node subsets (the loaders' rules)
    assert sampling_spec(batch_size=64, fanouts=[10, 5]) == NeighborSampling(batch_size=64, num_neighbors=(10, 5))
    assert sampling_spec(batch_size=64) == NodeSubsetSampling(batch_size=64)
    assert sampling_spec() == NodeSubsetSampling(batch_size=1024)
    spec = _spec_cases()[0]
    short = SparsityAwarePartitioner(4, "stochastic_hypergraph", batch_size=96, fanouts=[5, 3], num_batches=8)(data)
    same = SparsityAwarePartitioner(4, "stochastic_hypergraph", num_batches=8,
                                    sampling=NeighborSampling(batch_size=96, num_neighbors=(5, 3)))(data)
    assert torch.equal(short.part, same.part)
    # SHP lowers the held-out volume of the loader's batches; a sample of 2 batches leaves most
    # vertices in no net, which the partitioner then places blindly
    shp = SparsityAwarePartitioner(4, "stochastic_hypergraph", sampling=spec, input_nodes=mask)(data)
    sparse = SparsityAwarePartitioner(4, "stochastic_hypergraph", sampling=spec, input_nodes=mask,
                                      num_batches=2)(data)
    rnd = SparsityAwarePartitioner(4, "random")(data)
    vol = lambda p: expected_minibatch_volume(ei, n, p, spec, mask, num_batches=16)  # noqa: E731
    assert vol(shp.part) < 0.7 * vol(rnd.part) and vol(shp.part) < 0.9 * vol(sparse.part)
    # trimmed layers read the edges of the first hops only: fewer rows
    outer, inner = (minibatch_volumes(ei, n, shp.part, spec, mask, 8, hops=h) for h in (None, 1))
    assert (inner <= outer).all() and inner.sum() < outer.sum()


def test_stochastic_hypergraph_errors_and_cache_keys():
    from pyg_sparsecomm import partition_source
    from pyg_sparsecomm.loader import NeighborSampling, NodeSubsetSampling
    from pyg_sparsecomm.partition.stochastic import minibatch_volumes
    data = _shp_graph()
    spec = NeighborSampling(batch_size=64, num_neighbors=(5, 5))
    with pytest.raises(ValueError, match="not both"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec, fanouts=[5, 5])(data)
    with pytest.raises(TypeError, match="NeighborSampling or NodeSubsetSampling"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling="neighbor")(data)
    with pytest.raises(ValueError, match="mask of shape .* 1200 nodes"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec, input_nodes=data.train_mask[:10])(data)
    with pytest.raises(ValueError, match="no batch: input_nodes selects no node"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec,
                                 input_nodes=torch.zeros(1200, dtype=torch.bool))(data)
    with pytest.raises(ValueError, match="num_batches must be a positive integer"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec, num_batches=0)(data)
    with pytest.raises(ValueError, match="hops= trims neighbour batches"):
        minibatch_volumes(data.edge_index, 1200, data.train_mask.long(), NodeSubsetSampling(batch_size=64), hops=1)
    with pytest.warns(UserWarning, match="fewer than the .* eq. \\(14\\) needs"):
        SparsityAwarePartitioner(4, "stochastic_hypergraph", sampling=NodeSubsetSampling(batch_size=16),
                                 max_batches=80)(data)
    with pytest.warns(UserWarning, match="not even epoch 0's batches"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec, max_batches=2)(data)
    with pytest.warns(UserWarning, match="less than edge_coverage=50"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec, max_batches=40, edge_coverage=50)(data)
    with pytest.raises(ValueError, match="edge_coverage must be >= 0"):
        SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec, edge_coverage=-1)(data)
    # two masks with the same abbreviated repr are different settings; the spec and the mask go
    # into the store's source description as JSON
    a, b = data.train_mask.clone(), data.train_mask.clone()
    b[600] = ~b[600]
    assert repr(a) == repr(b)
    pa, pb = (SparsityAwarePartitioner(2, "stochastic_hypergraph", sampling=spec, input_nodes=m) for m in (a, b))
    assert pa._settings() != pb._settings()
    source = partition_source(pa, "sbm")
    json.dumps(source)
    assert source["options"]["sampling"] == repr(spec) and "sha256=" in source["options"]["input_nodes"]
    assert partition_source(pa, "sbm") != partition_source(pb, "sbm")
    assert "Tensor(dtype=bool, shape=[1200])" in repr(pa)


def test_merge_identical_nets_is_exact(monkeypatch):
    """Identical nets become one weighted net with the same km1 under any partition, also when
    every hash collides (the pin-by-pin check keeps different nets apart)."""
    from collections import Counter

    from pyg_sparsecomm.partition import hypergraph
    rng = np.random.default_rng(0)
    for collide in (False, True):
        if collide:
            monkeypatch.setattr(hypergraph, "_mix64", lambda z: z * np.uint64(0))
        for _ in range(20):
            nets = [sorted(set(rng.integers(0, 6, size=rng.integers(1, 4)).tolist()))
                    for _ in range(rng.integers(1, 150))]
            net_ptr, pins = _csr(nets)
            ptr2, pins2, weights = hypergraph.merge_identical_nets(net_ptr, pins)
            merged = {tuple(pins2[a:b]): int(w) for a, b, w in zip(ptr2[:-1], ptr2[1:], weights, strict=True)}
            assert merged == dict(Counter(tuple(n) for n in nets)) and len(merged) == weights.size
            part = rng.integers(0, 3, size=6)
            assert km1(net_ptr, pins, part) == km1(ptr2, pins2, part, weights)


ALL_METHODS = [("random", {}), ("contiguous", {}), ("metis", {}), ("metis", {"objective": "vol"}),
               ("hypergraph", {}), ("metis+vb", {}), ("hypergraph+vb", {}),
               ("stochastic_hypergraph", {"batch_size": 16, "num_batches": 8})]


@pytest.mark.parametrize("method,options", ALL_METHODS)
def test_every_method_round_trips_through_the_store(tmp_path, method, options):
    data = SparsityAwarePartitioner(3, method, **options)(make_cases(1)["weighted"])
    save_partition(data, tmp_path)
    for r in range(3):
        loaded, direct = load_shard(tmp_path, rank=r, world_size=3), shard(data, rank=r, world_size=3)
        assert torch.equal(loaded.n_id, direct.n_id) and torch.equal(loaded.adj.col, direct.adj.col)


def _every_method_worker(rank, world_size):
    out = {}
    for method, options in ALL_METHODS:
        data = SparsityAwarePartitioner(world_size, method, seed=4, **options)(make_cases(1)["weighted"])
        local = shard(data)
        torch.manual_seed(0)
        conv = DistributedGCNConv(NUM_FEATURES, 4)
        x = local.x.clone().requires_grad_()
        y = conv(x, local.adj, local.edge_weight)
        y.pow(2).sum().backward()
        out[method + str(options)] = (local.n_id, y.detach(), x.grad)
    return out


def test_every_method_trains_like_gcnconv():
    data = make_cases(1)["weighted"]
    torch.manual_seed(0)
    conv = GCNConv(NUM_FEATURES, 4)
    x = data.x.clone().requires_grad_()
    ref = conv(x, data.edge_index, data.edge_weight)
    ref.pow(2).sum().backward()
    per_rank = launch(_every_method_worker, 3)
    for key in per_rank[0]:
        y, gx = torch.zeros_like(ref), torch.zeros_like(x)
        for r in range(3):
            n_id, yy, gg = per_rank[r][key]
            y[n_id], gx[n_id] = yy, gg
        torch.testing.assert_close(y, ref.detach(), atol=1e-5, rtol=1e-4, msg=key)
        torch.testing.assert_close(gx, x.grad, atol=1e-5, rtol=1e-4, msg=key)


def _threads_worker(rank: int, world_size: int) -> torch.Tensor:
    """In a fresh rank: Mt-KaHyPar's threads are set before the first partition, kept after it."""
    from pyg_sparsecomm.partition import set_hypergraph_threads
    from pyg_sparsecomm.partition.hypergraph import hypergraph_partition
    data = make_cases(1)["directed"]
    for threads in (0, 2.0, True):
        with pytest.raises(ValueError, match="positive integer"):
            set_hypergraph_threads(threads)
    set_hypergraph_threads(1)
    set_hypergraph_threads(2)  # any count before the first partition
    part = hypergraph_partition(data.edge_index, data.num_nodes, 4, seed=0)
    set_hypergraph_threads(2)  # the count it runs with
    with pytest.raises(RuntimeError, match=r"already runs with 2 thread\(s\).*set_hypergraph_threads\(1\) before"):
        set_hypergraph_threads(1)
    return part


def test_hypergraph_threads_are_set_before_the_first_partition():
    """``set_hypergraph_threads`` fixes Mt-KaHyPar's thread pool (made once per process); a later
    different count is refused by name, and the deterministic preset's partition does not depend on
    the count (the suite's own process runs it with two threads, its ranks with one)."""
    from pyg_sparsecomm.partition.hypergraph import hypergraph_partition
    data = make_cases(1)["directed"]
    [two_threads] = launch(_threads_worker, 1)
    assert torch.equal(two_threads, hypergraph_partition(data.edge_index, data.num_nodes, 4, seed=0))
