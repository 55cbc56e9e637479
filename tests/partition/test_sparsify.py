"""Degree-capped edge sampling (:mod:`pyg_sparsecomm.partition.sparsify`): the pair hash, the
degrees, which edges are kept (all below the cap, about the cap of a hub's, both directions of an
edge together, independent of chunking), the nodes a sample strands and where they are placed,
and KaMinPar partitions with ``sample_degree``."""
import numpy as np
import pytest
import torch

from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.partition import SparsityAwarePartitioner, sparsify
from pyg_sparsecomm.partition.methods import row_nnz
from pyg_sparsecomm.partition.sparsify import edge_degrees, pair_uniform, sample_edges


def test_pair_uniform_is_symmetric_seeded_and_uniform():
    rng = np.random.default_rng(0)
    u, v = rng.integers(0, 1 << 30, 200_000), rng.integers(0, 1 << 30, 200_000)
    x = pair_uniform(u, v, 3)
    assert np.array_equal(x, pair_uniform(v, u, 3))
    assert np.array_equal(x[::-1], pair_uniform(u[::-1], v[::-1], 3))  # per pair, not per position
    assert x.min() >= 0 and x.max() < 1 and abs(x.mean() - 0.5) < 0.01
    assert np.histogram(x, bins=10, range=(0, 1))[0].min() > 19_000
    assert np.mean(x == pair_uniform(u, v, 4)) < 1e-3


def test_degrees_count_both_ends_but_no_self_loops():
    src, dst = np.array([0, 1, 2, 2, 3]), np.array([1, 0, 2, 3, 0])
    assert edge_degrees(src, dst, 5).tolist() == [3, 2, 1, 2, 0]


def test_a_graph_under_the_cap_keeps_every_edge():
    data = rmat_graph(10, 8, seed=1)
    src, dst = data.edge_index.numpy()
    cap = int(edge_degrees(src, dst, data.num_nodes).max())
    s, d = sample_edges(src, dst, data.num_nodes, cap, seed=5)
    off_loop = src != dst
    assert s.dtype == np.int32 and np.array_equal(s, src[off_loop]) and np.array_equal(d, dst[off_loop])
    s, d = sample_edges(src, dst, data.num_nodes, cap - 1, seed=5)
    assert 0 < len(s) < off_loop.sum()


def test_a_hub_keeps_about_the_cap_and_an_edge_keeps_both_directions():
    leaves = 20_000
    ring = np.arange(1, leaves + 1)
    src = np.concatenate([np.zeros(leaves, np.int64), ring, ring])  # hub 0 -> every leaf, and back
    dst = np.concatenate([ring, np.zeros(leaves, np.int64), np.roll(ring, 1)])  # plus a ring of leaves
    s, d = sample_edges(src, dst, leaves + 1, 200, seed=0)
    hub_out, hub_in = np.sort(d[s == 0]), np.sort(s[d == 0])
    assert np.array_equal(hub_out, hub_in)  # {0, v} kept or dropped as one edge
    # the hub's degree counts both directions (40000): p = 200 / 40000 per pair, so 100 pairs, 200 of
    # its edges (sd 20) expected
    assert 140 <= len(hub_out) + len(hub_in) <= 260
    ring_kept = (s != 0) & (d != 0)
    assert ring_kept.sum() == leaves  # degree 3: under the cap, its other ends too
    for chunk in (7, 1000):  # chunk boundaries anywhere: the same sample
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sparsify, "EDGE_CHUNK", chunk)
            s2, d2 = sample_edges(src, dst, leaves + 1, 200, seed=0)
            assert np.array_equal(s2, s) and np.array_equal(d2, d)
    assert not np.array_equal(sample_edges(src, dst, leaves + 1, 200, seed=1)[0], s)


def test_stranded_nodes_join_their_neighbours_within_the_bounds():
    # nodes 0-3 stranded; 4-9 placed: parts 0 0 1 1 1 2
    part = np.array([2, 2, 2, 2, 0, 0, 1, 1, 1, 2])
    src = np.array([0, 0, 0, 6, 1, 2, 2, 3, 3, 3])
    dst = np.array([4, 5, 6, 1, 7, 4, 9, 4, 6, 3])  # 3 -> 3 a self-loop, not a neighbour
    degree = edge_degrees(src, dst, 10)
    kept = np.zeros(10, dtype=np.int64)
    kept[4:] = 1
    stranded = sparsify.stranded_nodes(src, dst, degree, kept)
    assert stranded.nodes.tolist() == [0, 1, 2, 3]
    weights = np.array([3, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    # 0: parts 0, 0, 1 -> 0; 1: 1, 1 -> 1; 2: 0, 2 -> tie, 0; 3: 0, 1 -> tie, 0
    roomy = stranded.place(part, weights, np.array([100, 100, 100]))
    assert roomy.tolist() == [0, 1, 0, 0, 0, 0, 1, 1, 1, 2]
    assert np.array_equal(part[4:], roomy[4:])
    # part 0 has room for 4 more: 0 (weight 3, two neighbours there) first, then one of 2 and 3
    tight = stranded.place(part, weights, np.array([6, 100, 4]))
    assert tight[:2].tolist() == [0, 1] and sorted(tight[2:4].tolist()) == [0, 1]  # the other: roomiest
    loads = np.bincount(tight, weights=weights, minlength=3)
    assert loads[0] <= 6
    # a sample that strands nothing changes nothing
    assert np.array_equal(sparsify.stranded_nodes(src, dst, degree, degree).place(part, weights, np.full(3, 9)),
                          part)


def test_nodes_without_a_home_fill_the_roomiest_parts_within_their_room():
    rng = np.random.default_rng(0)
    for _ in range(200):
        room = rng.integers(-3, 20, rng.integers(1, 9))
        weight = rng.integers(1, 6, rng.integers(0, 30))
        part = sparsify._fill_by_room(room, weight)
        load = np.bincount(part, weights=weight, minlength=len(room))
        fallback = int(np.argmax(room))  # the roomiest part: also where what no room holds goes
        assert np.all(np.delete(load, fallback) <= np.delete(room, fallback).clip(0))
        order = np.argsort(-room, kind="stable")
        rank = np.argsort(order)[part]  # runs in order of room: the first part's, the next's, ...
        assert np.all(np.diff(rank[part != fallback]) >= 0)
        units = sparsify._fill_by_room(room, np.ones(len(weight), dtype=np.int64))
        if len(weight) <= room.clip(0).sum():  # unit weights: nothing spills while the rooms hold them
            assert np.all(np.bincount(units, minlength=len(room)) <= room.clip(0))


def test_a_sample_strands_the_leaves_it_cut_off_and_they_go_home():
    leaves = 5_000
    src = np.zeros(leaves, np.int64)
    dst = np.arange(1, leaves + 1)  # a star: hub 0
    s, d, stranded = sparsify.sample_graph(src, dst, leaves + 1, 50, seed=2)
    assert len(s) + len(stranded.nodes) == leaves  # every leaf kept its edge or is stranded
    assert np.intersect1d(stranded.nodes, d).size == 0 and 0 not in stranded.nodes
    part = np.arange(leaves + 1) % 4
    placed = stranded.place(part, None, np.full(4, leaves))
    assert np.all(placed[stranded.nodes] == part[0])


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "8"])
def test_bad_caps_are_refused(bad):
    with pytest.raises(ValueError, match="max_degree must be a positive integer"):
        sample_edges(np.array([0]), np.array([1]), 2, bad)


@pytest.mark.parametrize("P,options", [(4, {}), (8, {"fold_leaves": True, "split": [2, 2]})])
def test_kaminpar_on_the_sample_is_valid_balanced_and_close_in_volume(P, options):
    pytest.importorskip("kaminpar")
    data = rmat_graph(12, 16, seed=3)  # max degree ~1800: hubs
    n = data.num_nodes
    out = SparsityAwarePartitioner(P, "kaminpar", seed=1, sample_degree=64, **options)(data)
    part = out.part.numpy()
    assert sorted(np.unique(part).tolist()) == list(range(P))
    weights = row_nnz(data.edge_index, n)
    loads = np.bincount(part, weights=weights, minlength=P)
    assert loads.max() <= 1.03 * np.ceil(weights.sum() / P) + 2, loads
    plain = SparsityAwarePartitioner(P, "kaminpar", seed=1, **options)(data)
    assert out.comm_stats.total_rows <= 1.1 * plain.comm_stats.total_rows
    if "split" not in options:  # one call: its stranded nodes sit with most of their neighbours, or
        src, dst = data.edge_index.numpy()  # their part was full
        stranded = sparsify.sample_graph(src, dst, n, 64, seed=1)[2]
        assert len(stranded.nodes) > 10
        neighbours = np.zeros((n, P), dtype=np.int64)
        np.add.at(neighbours, (stranded.nodes[stranded.pair_node], part[stranded.pair_neighbour]), 1)
        at_home = neighbours[stranded.nodes, part[stranded.nodes]] == neighbours[stranded.nodes].max(1)
        bound = np.ceil(1.03 * np.ceil(weights.sum() / P))
        full = loads + weights.max() > bound
        assert np.all(at_home | full[np.argmax(neighbours[stranded.nodes], 1)])
    assert torch.equal(out.part, SparsityAwarePartitioner(P, "kaminpar", seed=1, sample_degree=64,
                                                          **options)(data).part)
    # a cap above every degree: KaMinPar gets the very graph it gets without sampling
    above = SparsityAwarePartitioner(P, "kaminpar", seed=1, sample_degree=n, **options)(data)
    assert torch.equal(above.part, plain.part)


@pytest.mark.parametrize("bad", [0, True, 1.5, "64"])
def test_kaminpar_refuses_bad_sample_degrees(bad):
    pytest.importorskip("kaminpar")
    data = rmat_graph(8, 4, seed=0)
    with pytest.raises(ValueError, match="sample_degree must be a positive integer"):
        SparsityAwarePartitioner(4, "kaminpar", sample_degree=bad)(data)


def test_threaded_passes_keep_order_and_bound_the_items_in_flight():
    import threading
    import time

    from pyg_sparsecomm.partition._threads import ordered_in_threads
    lock, running, most = threading.Lock(), [0], [0]

    def work(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.002 * (i % 3))
        with lock:
            running[0] -= 1
        if i == 7:
            raise KeyError("item 7")
        return i * i

    got = []
    with pytest.raises(KeyError, match="item 7"):
        for value in ordered_in_threads(work, range(20), workers=2):
            got.append(value)
    assert got == [i * i for i in range(7)] and most[0] <= 2
    assert list(ordered_in_threads(lambda i: -i, range(50), workers=3)) == [-i for i in range(50)]
