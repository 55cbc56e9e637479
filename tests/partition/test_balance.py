"""Max-send-volume balancing: exact move evaluation, guarantees, determinism and quality."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_sparsecomm import CommStats
from pyg_sparsecomm.partition import METHODS, SparsityAwarePartitioner
from pyg_sparsecomm.partition.balance import balance_max_send, refine_max_send
from pyg_sparsecomm.partition.methods import symmetric_csr
from pyg_sparsecomm.partition.multiconstraint import metis_multiconstraint
from pyg_sparsecomm.partition.volume_model import _evaluate, _state, column_net_incidence
from pyg_sparsecomm.plan import comm_pattern


def _skewed(n=600, m=5000, seed=0, directed=True, isolated=0):
    """Power-law out-degrees (hubs send to many parts); ``isolated`` extra nodes without edges."""
    gen = torch.Generator().manual_seed(seed)
    src = (torch.rand(m, generator=gen) ** 3 * n).long()
    dst = torch.randint(0, n, (m,), generator=gen)
    ei = torch.stack([src, dst])
    if not directed:
        ei = torch.cat([ei, ei.flip(0)], 1)
    return Data(edge_index=ei, num_nodes=n + isolated)


def _stats(data, part, P):
    return CommStats.from_pattern(comm_pattern(data.edge_index, part, data.num_nodes, P)).as_dict()


GRAPHS = {
    "directed": lambda: _skewed(),
    "undirected": lambda: _skewed(directed=False, seed=1),
    "isolated": lambda: _skewed(n=300, m=2000, seed=2, isolated=40),
}


def test_move_evaluation_is_exact_on_a_directed_graph():
    data, P = _skewed(n=120, m=700, seed=3), 5
    nets = column_net_incidence(data.edge_index, data.num_nodes)
    part = METHODS["random"](data.edge_index, data.num_nodes, P, 0).numpy()
    state = _state(nets, part, P)
    gen = np.random.default_rng(0)
    v = gen.integers(0, data.num_nodes, 200)
    b = (part[v] + gen.integers(1, P, 200)) % P
    c, p, d, dR_a, dR_b, dkm1, (n_idx, n_net, n_changes) = _evaluate(nets, state, part, v, b, P)
    for k in range(v.size):
        moved = part.copy()
        moved[v[k]] = b[k]
        new = _state(nets, moved, P)
        dS = np.zeros(P, dtype=np.int64)
        dS[p[c == k]] = d[c == k]
        np.testing.assert_array_equal(new.S - state.S, dS)
        assert new.km1 - state.km1 == dkm1[k]
        assert new.R[part[v[k]]] - state.R[part[v[k]]] == dR_a[k]
        assert new.R[b[k]] - state.R[b[k]] == dR_b[k]
        others = np.setdiff1d(np.arange(P), [part[v[k]], b[k]])
        np.testing.assert_array_equal(new.R[others], state.R[others])
        # every other net whose λ changes is flagged (the greedy batches rely on it)
        changed = np.flatnonzero(new.lam != state.lam)
        changed = changed[changed != v[k]]
        assert set(changed.tolist()) <= set(n_net[(n_idx == k) & n_changes].tolist())


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("P", [2, 5, 16])
@pytest.mark.parametrize("method", ["metis", "random"])
def test_balancing_guarantees(graph, P, method):
    data = GRAPHS[graph]()
    base = METHODS[method](data.edge_index, data.num_nodes, P, 0)
    b = _stats(data, base, P)
    for restarts in (0, 2):
        part = balance_max_send(data.edge_index, data.num_nodes, base, P, epsilon=0.03,
                                max_total_increase=0.1, restarts=restarts, seed=0)
        r = _stats(data, part, P)
        assert part.shape == (data.num_nodes,) and int(part.min()) >= 0 and int(part.max()) < P
        assert r["max_rows_sent"] <= b["max_rows_sent"]
        assert r["max_rows_received"] <= b["max_rows_received"]
        assert r["total_rows"] <= 1.1 * b["total_rows"] + 1e-9
        assert r["compute_imbalance"] <= max(1.03, b["compute_imbalance"]) + 1e-9
        again = balance_max_send(data.edge_index, data.num_nodes, base, P, epsilon=0.03,
                                 max_total_increase=0.1, restarts=restarts, seed=0)
        assert torch.equal(part, again)


def test_refinement_strictly_helps_and_respects_a_zero_volume_budget():
    data, P = _skewed(n=2000, m=20000, seed=4), 8
    base = METHODS["metis"](data.edge_index, data.num_nodes, P, 0)
    b = _stats(data, base, P)
    part = refine_max_send(data.edge_index, data.num_nodes, base, P, epsilon=0.05)
    assert _stats(data, part, P)["max_rows_sent"] < b["max_rows_sent"]
    tight = refine_max_send(data.edge_index, data.num_nodes, base, P, epsilon=0.05, max_total_increase=0.0)
    t = _stats(data, tight, P)
    assert t["total_rows"] <= b["total_rows"] and t["max_rows_sent"] <= b["max_rows_sent"]


def test_multiconstraint_metis_balances_both_weights():
    data = _skewed(n=3000, m=30000, seed=5, directed=False)
    xadj, adjncy = symmetric_csr(data.edge_index, data.num_nodes)
    gen = np.random.default_rng(0)
    weights = np.stack([np.ones(data.num_nodes, dtype=np.int64), gen.integers(0, 10, data.num_nodes)], 1)
    part = metis_multiconstraint(xadj, adjncy, weights, 8, (1.05, 1.05), seed=0)
    assert part is not None and part.min() >= 0 and part.max() < 8
    for c in range(2):
        load = np.bincount(part, weights=weights[:, c], minlength=8)
        assert load.max() / load.mean() <= 1.15  # METIS may overshoot its tolerance a little
    assert np.array_equal(part, metis_multiconstraint(xadj, adjncy, weights, 8, (1.05, 1.05), seed=0))


def test_send_balanced_restarts_reach_far_lower_max_send_on_cora(planetoid_root):
    """Cora, P = 64: METIS max send 70 rows, the single-move refinement alone 53-57 (0.76-0.81x);
    with the send-balanced restarts 43 (0.61x) is measured, total volume +2 % (42 and +7 % while the
    restarts' seeds did not reach METIS)."""
    from torch_geometric.datasets import Planetoid
    data = Planetoid(planetoid_root, "Cora")[0]
    base = SparsityAwarePartitioner(64, "metis", seed=0)(data).comm_stats.as_dict()
    vb = SparsityAwarePartitioner(64, "metis+vb", seed=0, epsilon_balance=0.05)(data)
    r = vb.comm_stats.as_dict()
    assert r["max_rows_sent"] <= 0.66 * base["max_rows_sent"]
    assert r["compute_imbalance"] <= 1.05 + 1e-9
    assert r["total_rows"] <= 1.1 * base["total_rows"]
    assert r["max_rows_received"] <= base["max_rows_received"]


def test_bad_balance_options():
    with pytest.raises(ValueError, match="vb_restarts"):
        SparsityAwarePartitioner(4, "metis+vb", vb_restarts=-1)
    with pytest.raises(ValueError, match="max_total_increase"):
        SparsityAwarePartitioner(4, "metis+vb", max_total_increase=-0.5)


def test_multiconstraint_seed_reaches_metis():
    """One constraint: the ctypes call must equal pymetis's k-way with the same seed (the old bug put the
    seed in METIS 5.1's NO2HOP slot, so every nonzero seed gave the same partition); seed 0 keeps METIS's
    default seed, i.e. equals pymetis with no seed."""
    import pymetis
    data = _skewed(n=1500, m=12000, seed=6, directed=False)
    xadj, adjncy = symmetric_csr(data.edge_index, data.num_nodes)
    w = np.bincount(data.edge_index[1].numpy(), minlength=data.num_nodes) + 1
    P, parts = 8, {}
    for seed in (0, 1, 2, 3):
        for objective, objtype in (("cut", pymetis.ObjType.CUT), ("vol", pymetis.ObjType.VOL)):
            part = metis_multiconstraint(xadj, adjncy, w[:, None], P, (1.03,), seed=seed, objective=objective)
            opts = pymetis.Options(objtype=int(objtype), **({"seed": seed} if seed else {}))
            ref = pymetis.part_graph(P, pymetis.CSRAdjacency(xadj, adjncy), vweights=w, options=opts,
                                     recursive=False).vertex_part
            np.testing.assert_array_equal(part, np.asarray(ref))
            assert part.min() >= 0 and part.max() < P
            load = np.bincount(part, weights=w, minlength=P)
            assert load.max() / load.mean() <= 1.03 + 0.01
            parts[seed, objective] = part
    weights = np.stack([w, np.ones_like(w)], 1)
    two = [metis_multiconstraint(xadj, adjncy, weights, P, (1.05, 1.05), seed=s, objective="vol") for s in (1, 2, 3)]
    assert np.array_equal(two[0], metis_multiconstraint(xadj, adjncy, weights, P, (1.05, 1.05), seed=1,
                                                        objective="vol"))
    for objective in ("cut", "vol"):
        assert len({parts[s, objective].tobytes() for s in (1, 2, 3)}) > 1
    assert len({p.tobytes() for p in two}) > 1


def test_metis_abi_check(monkeypatch):
    import pymetis._internal as internal

    import pyg_sparsecomm.partition.multiconstraint as mc
    lib = mc._metis()
    assert mc._metis() is lib  # loaded and checked once
    mc._check_abi(lib, "x.so", getattr(internal, "_idx_type_width", None))  # this machine's pymetis passes
    with pytest.raises(RuntimeError, match="built with 32-bit idx_t, not the 64-bit idx_t and 32-bit real_t"):
        mc._check_abi(lib, "x.so", lambda: 32)
    # what a 32-bit idx_t METIS reads from the probe's options (each int64 as two int32) is rejected as input
    options = np.full(40, -1, dtype=np.int64)
    options[0] = (7 << 32) | 0xFFFFFFFF
    seen = options.view(np.int32)[:40].astype(np.int64)
    xadj, adjncy = np.array(mc._PROBE_XADJ, dtype=np.int64), np.array(mc._PROBE_ADJNCY, dtype=np.int64)
    ones, ub = np.ones(6, dtype=np.int64), np.full(2, 1.5, dtype=np.float32)
    assert mc._part_graph_kway(lib, xadj, adjncy, ones, 1, 2, ub, seen)[0] == -2  # METIS_ERROR_INPUT
    assert mc._part_graph_kway(lib, xadj, adjncy, ones, 1, 2, ub, options)[0] == 1
    # a real_t mismatch, simulated from our side: 64-bit tolerances read by the 32-bit real_t METIS
    monkeypatch.setattr(mc, "_REAL", np.float64)
    monkeypatch.setattr(mc, "_LIB", None)
    with pytest.raises(RuntimeError, match=r"does not take the 64-bit idx_t .* returned status -2"):
        mc._metis()
    assert mc._LIB is None  # a failed check is not cached as a usable library


def test_fast_sorting_helpers_match_numpy():
    from pyg_sparsecomm.partition._sorting import lexsort, stable_sort, unique_inverse
    rng = np.random.default_rng(0)
    for n in [0, 1, 2, 9, 5000]:
        keys = (rng.integers(-3, 3, n), rng.integers(0, 1000, n), rng.integers(-50, 0, n))
        assert np.array_equal(lexsort(keys), np.lexsort(keys))
        wide = (rng.integers(0, 2 ** 40, n), rng.integers(0, 2 ** 30, n))  # > 63 bits: numpy's lexsort
        assert np.array_equal(lexsort(wide), np.lexsort(wide))
        values = rng.integers(0, 40, n)
        sorted_values, order = stable_sort(values)
        assert np.array_equal(order, np.argsort(values, kind="stable"))
        assert np.array_equal(sorted_values, np.sort(values))
        big = rng.integers(0, 2 ** 60, n)  # value and index do not fit in 63 bits together
        assert np.array_equal(stable_sort(big)[1], np.argsort(big, kind="stable"))
        unique, inverse = unique_inverse(values)
        expected_unique, expected_inverse = np.unique(values, return_inverse=True)
        assert np.array_equal(unique, expected_unique) and np.array_equal(inverse, expected_inverse.reshape(-1))


def test_dense_and_binary_search_pin_counts_agree(monkeypatch):
    """The (net, part) count table and the binary search give the same refinement."""
    import pyg_sparsecomm.partition.volume_model as model
    data, P = _skewed(n=400, m=3000, seed=5), 8
    part = METHODS["random"](data.edge_index, data.num_nodes, P, 0)
    dense = refine_max_send(data.edge_index, data.num_nodes, part, P)
    nets = column_net_incidence(data.edge_index, data.num_nodes)
    state = _state(nets, part.numpy(), P)
    monkeypatch.setattr(model, "_DENSE_COUNT_BYTES", 0)
    searched = refine_max_send(data.edge_index, data.num_nodes, part, P)
    assert torch.equal(dense, searched) and not torch.equal(dense, part)
    net = np.repeat(np.arange(data.num_nodes), P)
    p = np.tile(np.arange(P), data.num_nodes)
    expected = np.zeros(data.num_nodes * P, dtype=np.int64)
    np.add.at(expected, nets.net_of_pin * P + part.numpy()[nets.pins], 1)
    assert np.array_equal(model._pin_counter(state, data.num_nodes, P)(net, p), expected)
    monkeypatch.setattr(model, "_DENSE_COUNT_BYTES", 1 << 27)
    assert np.array_equal(model._pin_counter(state, data.num_nodes, P)(net, p), expected)


def test_receive_phase_lowers_max_receive_without_raising_max_send():
    """Out-hubs, METIS P = 8: max send / max receive 861 / 828; the send phases alone reach 771 / 798,
    with the receive phase 718 / 717 (measured)."""
    data, P = _skewed(n=2000, m=20000, seed=4), 8
    base = METHODS["metis"](data.edge_index, data.num_nodes, P, 0)
    b = _stats(data, base, P)
    send_only = _stats(data, refine_max_send(data.edge_index, data.num_nodes, base, P, epsilon=0.05,
                                             receive=False), P)
    both = _stats(data, refine_max_send(data.edge_index, data.num_nodes, base, P, epsilon=0.05), P)
    assert both["max_rows_received"] < send_only["max_rows_received"] <= b["max_rows_received"]
    assert both["max_rows_sent"] < b["max_rows_sent"]
    assert both["compute_imbalance"] <= max(1.05, b["compute_imbalance"]) + 1e-9
    assert both["total_rows"] <= 1.1 * b["total_rows"]


def test_receive_phase_alone_never_raises_the_maximum_send():
    """With the max phase starved (no rounds), every change comes from the receive and volume
    phases: the maximum send volume must not rise while the maximum receive volume falls."""
    from pyg_sparsecomm.partition.balance import _refine
    for seed, P in ((4, 8), (1, 16)):
        data = _skewed(n=2000, m=20000, seed=seed, directed=seed == 4)
        base = METHODS["random"](data.edge_index, data.num_nodes, P, 0).numpy()
        nets = column_net_incidence(data.edge_index, data.num_nodes)
        before = _state(nets, base, P)
        after = _state(nets, _refine(nets, base.copy(), P, epsilon=0.05, max_rounds=0), P)
        assert after.S.max() <= before.S.max()
        assert after.R.max() < before.R.max()
        assert after.W.max() <= max(1.05 * nets.weights.sum() / P, before.W.max())


@pytest.mark.slow
def test_restart_objective(monkeypatch):
    import pyg_sparsecomm.partition.balance as balance
    mesh_edges = [(i * 30 + j, i * 30 + j + 1) for i in range(30) for j in range(29)]
    mesh_edges += [(i * 30 + j, (i + 1) * 30 + j) for i in range(29) for j in range(30)]
    mesh = torch.tensor(mesh_edges).t()
    mesh = Data(edge_index=torch.cat([mesh, mesh.flip(0)], 1), num_nodes=900)  # a 30 x 30 grid
    hubs = _skewed(n=800, m=8000, seed=7, directed=False)
    for data, expected in ((mesh, "vol"), (hubs, "cut")):
        xadj, _ = symmetric_csr(data.edge_index, data.num_nodes)
        assert balance.restart_objective(xadj) == expected
        assert balance.restart_objective(xadj, "vol") == "vol" and balance.restart_objective(xadj, "cut") == "cut"
    with pytest.raises(ValueError, match="unknown restart objective 'volume'"):
        balance.restart_objective(np.zeros(2), "volume")
    with pytest.raises(ValueError, match="unknown restart objective"):
        SparsityAwarePartitioner(4, "metis+vb", vb_objective="volume")
    # the chosen objective reaches METIS, and each gives a valid, deterministic result
    seen, call = [], balance.metis_multiconstraint
    monkeypatch.setattr(balance, "metis_multiconstraint",
                        lambda *a, **k: seen.append(k["objective"]) or call(*a, **k))
    base = METHODS["random"](hubs.edge_index, hubs.num_nodes, 16, 0)
    b = _stats(hubs, base, 16)
    parts = {}
    for objective, expected in (("auto", "cut"), ("vol", "vol"), ("cut", "cut")):
        seen.clear()
        part = parts[objective] = balance_max_send(hubs.edge_index, hubs.num_nodes, base, 16, restarts=2,
                                                   restart_above=0.0, objective=objective)
        assert seen == [expected] * 2
        r = _stats(hubs, part, 16)
        assert r["max_rows_sent"] < b["max_rows_sent"] and r["max_rows_received"] <= b["max_rows_received"]
        # deterministic: a second run gives the same parts ("cut" is what "auto" chose here: the same
        # computation, so it must give exactly "auto"'s parts, without a third identical run)
        again = parts["auto"] if objective == "cut" else balance_max_send(
            hubs.edge_index, hubs.num_nodes, base, 16, restarts=2, restart_above=0.0, objective=objective)
        assert torch.equal(part, again)


def test_restarts_run_when_the_maximum_is_near_the_average_but_the_total_is_poor():
    """A random start on a 40 x 40 grid, P = 16: the refinement alone holds the maximum within 1.15x
    of the average (89 vs 88.4 rows) at several times METIS's total volume; a restart's METIS start has
    a far lower total, so it is refined and wins (33 rows measured).  Before, the near-average rule
    skipped every restart.  (40 x 40, not 60 x 60: the same case at a twelfth of the time; at 32 x 32
    the restart no longer halves the maximum.)"""
    k, P = 40, 16
    e = [(i * k + j, i * k + j + 1) for i in range(k) for j in range(k - 1)]
    e += [(i * k + j, (i + 1) * k + j) for i in range(k - 1) for j in range(k)]
    e = torch.tensor(e).t()
    grid = Data(edge_index=torch.cat([e, e.flip(0)], 1), num_nodes=k * k)
    base = METHODS["random"](grid.edge_index, grid.num_nodes, P, 0)
    alone = _stats(grid, balance_max_send(grid.edge_index, grid.num_nodes, base, P, epsilon=0.05, restarts=0), P)
    assert alone["max_rows_sent"] <= 1.15 * alone["total_rows"] / P  # the near-average case
    both = _stats(grid, balance_max_send(grid.edge_index, grid.num_nodes, base, P, epsilon=0.05), P)
    assert both["max_rows_sent"] < 0.5 * alone["max_rows_sent"]
    assert both["compute_imbalance"] <= 1.05 + 1e-9
