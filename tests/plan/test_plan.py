"""The plan, the partitioner and the statistics, checked in one process against brute force."""
import numpy as np
import pytest
import torch
from graphs import make_cases
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner, shard
from pyg_sparsecomm.algorithms import bytes_per_epoch
from pyg_sparsecomm.plan import comm_pattern, rank_plan
from pyg_sparsecomm.plan.stats import CommStats


def _brute_force_volume(edge_index, part, P):
    """V[s, d] = |{j owned by s : some edge j -> i with i owned by d != s}|, by Python sets."""
    needed = [set() for _ in range(P)]
    for j, i in edge_index.t().tolist():
        if part[j] != part[i]:
            needed[int(part[i])].add(j)
    V = np.zeros((P, P), dtype=np.int64)
    for d in range(P):
        for j in needed[d]:
            V[int(part[j]), d] += 1
    return V


@pytest.mark.parametrize("P", [1, 2, 3, 4, 7])
def test_volume_matches_brute_force_and_plans_agree(P):
    for name, data in make_cases(P).items():
        pattern = comm_pattern(data.edge_index, data.part, data.num_nodes, P)
        V = _brute_force_volume(data.edge_index, data.part, P)
        np.testing.assert_array_equal(pattern.volume_matrix(), V, err_msg=name)
        # the halo pairs, the pattern's largest arrays, are narrow: int32 ids, int16 owners
        assert pattern.pair_node.dtype == np.int32 and pattern.pair_dst.dtype == np.int32
        assert pattern.pair_owner.dtype == np.int16 and pattern.pair_src.dtype == np.int64
        assert np.array_equal(pattern.pair_owner, data.part.numpy()[pattern.pair_node])
        pairs = {(d, j) for j, i in data.edge_index.t().tolist() if (d := int(data.part[i])) != int(data.part[j])}
        assert sorted(pairs) == sorted(zip(pattern.pair_dst.tolist(), pattern.pair_node.tolist(), strict=True))
        plans = [rank_plan(pattern, r) for r in range(P)]
        for r, plan in enumerate(plans):
            assert plan.recv_counts == V[:, r].tolist()
            assert plan.send_counts == V[r, :].tolist()
            assert torch.equal(data.part[plan.n_id], torch.full_like(plan.n_id, r))
            # the halo sent by s to r is exactly what r expects from s, in the same order
            offsets = np.concatenate([[0], np.cumsum(plan.recv_counts)])
            for s in range(P):
                expected = plan.halo_n_id[offsets[s]:offsets[s + 1]]
                sp = plans[s]
                so = np.concatenate([[0], np.cumsum(sp.send_counts)])
                sent = sp.n_id[sp.send_index[so[r]:so[r + 1]]]
                assert torch.equal(sent, expected), (name, r, s)


@pytest.mark.parametrize("P", [1, 3, 4])
def test_shards_reassemble_the_global_graph(P):
    for name, data in make_cases(P).items():
        edges = set()
        for r in range(P):
            local = shard(data, rank=r, world_size=P)
            adj = local.adj
            row, col = adj.coo()
            cols = torch.cat([local.n_id, adj.plan.halo_n_id])
            edges.update(zip(cols[col].tolist(), local.n_id[row].tolist(), strict=False))
            # e_id names the global edge of every local edge, in adj order
            assert torch.equal(data.edge_index[:, local.e_id], torch.stack([cols[col], local.n_id[row]]))
            assert torch.equal(local.x, data.x[local.n_id])
        assert edges == set(map(tuple, data.edge_index.t().tolist())), name


def test_partitioners_are_deterministic_and_valid():
    data = make_cases(1)["undirected"]
    for method in ["random", "contiguous", "metis"]:
        a = SparsityAwarePartitioner(4, method=method, seed=5)(data)
        b = SparsityAwarePartitioner(4, method=method, seed=5)(data)
        assert torch.equal(a.part, b.part)
        assert a.part.dtype == torch.long and int(a.part.min()) >= 0 and int(a.part.max()) < 4
        assert a.num_parts == 4 and isinstance(a.comm_stats, CommStats)
        assert a.comm_stats.total_rows == int(_brute_force_volume(a.edge_index, a.part, 4).sum())


def test_metis_beats_random_on_a_mesh_like_graph():
    side = 20  # a 20x20 grid: METIS must find a far smaller cut than random
    idx = torch.arange(side * side).view(side, side)
    right = torch.stack([idx[:, :-1].reshape(-1), idx[:, 1:].reshape(-1)])
    down = torch.stack([idx[:-1, :].reshape(-1), idx[1:, :].reshape(-1)])
    ei = torch.cat([right, down, right.flip(0), down.flip(0)], dim=1)
    data = Data(edge_index=ei, num_nodes=side * side)
    metis = SparsityAwarePartitioner(4, "metis")(data).comm_stats
    rand = SparsityAwarePartitioner(4, "random")(data).comm_stats
    assert metis.total_rows * 4 < rand.total_rows
    assert metis.as_dict()["compute_imbalance"] < 1.1


def test_stats_report():
    data = SparsityAwarePartitioner(3, "random")(make_cases(1)["directed"])
    d = data.comm_stats.as_dict()
    assert d["oblivious_total_rows"] == data.num_nodes * 2
    assert d["max_rows_sent"] >= d["avg_rows_sent"] > 0
    assert "CommStats(P=3" in str(data.comm_stats)
    widths = [16, 7]
    assert bytes_per_epoch(data.comm_stats, widths) == 2 * d["total_rows"] * 23 * 4


@pytest.mark.parametrize("P", [1, 3, 7])
def test_pattern_does_not_depend_on_the_chunk_nor_on_how_edges_are_given(P):
    """``comm_pattern`` one edge at a time, a few at a time, all at once, and from ``edge_chunks``:
    every field equal (halo pairs merged by ``SortedUnion``, spans a chunk of pairs at a time)."""
    from pyg_sparsecomm.plan.edges import edge_chunks
    for name, data in make_cases(P).items():
        whole = comm_pattern(data.edge_index, data.part, data.num_nodes, P)
        for edges, chunk in ((data.edge_index, 1), (data.edge_index, 5), (edge_chunks(data.edge_index.int()), 3)):
            got = comm_pattern(edges, data.part, data.num_nodes, P, chunk=chunk)
            for field in whole.__dataclass_fields__:
                a, b = getattr(whole, field), getattr(got, field)
                assert (np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
                        if isinstance(a, np.ndarray) else a == b), (name, chunk, field)


def test_pair_ids_are_int32_only_where_they_fit():
    from pyg_sparsecomm.plan.homogeneous import id_dtype
    assert id_dtype(2**31 - 1) == np.int32 and id_dtype(2**31) == np.int64


def test_sorted_union_is_the_sorted_distinct_values_of_everything_added():
    from pyg_sparsecomm.plan.sorted_keys import SortedUnion, sorted_unique
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 50, size) for size in (0, 1, 7, 3, 40, 0, 100, 2)]
    union = SortedUnion()
    for a in arrays:
        union.add(sorted_unique(a.copy()))
    np.testing.assert_array_equal(union.result(), np.unique(np.concatenate(arrays)))
    assert SortedUnion().result().size == 0 and sorted_unique(np.array([4])).tolist() == [4]
