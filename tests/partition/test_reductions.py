"""Leaf folding (:mod:`pyg_sparsecomm.partition.reductions`): which nodes are folded or left out,
the folded weights, the ParHiP file of the folded graph, the filling of the left-out nodes, and
KaMinPar partitions with ``fold_leaves=True`` (valid, balanced, leaves with their neighbour)."""
import numpy as np
import pytest
import torch

from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.partition import SparsityAwarePartitioner, reductions
from pyg_sparsecomm.partition.methods import row_nnz
from pyg_sparsecomm.partition.reductions import fill_parts, fold_leaves


def _small():
    """0-1-2 path with 0 a leaf of 1; 3 isolated; 4-5 an isolated edge (both directions); 6 a
    self-loop only; 7 a hub with leaves 8 (both directions, twice) and 9, linked to 1 and 2."""
    src = np.array([0, 1, 4, 5, 6, 7, 8, 8, 7, 2, 7])
    dst = np.array([1, 2, 5, 4, 6, 8, 7, 7, 9, 7, 1])
    return src, dst, 10


def test_leaves_are_folded_and_isolated_unit_nodes_left_out():
    src, dst, n = _small()
    f = fold_leaves(src, dst, n)
    assert f.node_map.tolist() == [0, 0, 1, -1, 2, 2, -1, 3, 3, 3]
    assert f.weights.tolist() == [2, 1, 2, 3] and f.left_out.tolist() == [3, 6] and f.num_nodes == 4
    weights = np.array([1, 2, 3, 5, 1, 1, 1, 4, 1, 2])  # 3 weighs 5: it stays, as a node without edges
    f = fold_leaves(src, dst, n, weights)
    assert f.node_map.tolist() == [0, 0, 1, 2, 3, 3, -1, 4, 4, 4]
    assert f.weights.tolist() == [3, 3, 5, 2, 7] and f.left_out.tolist() == [6]
    # the edges are read in chunks: the same folding with chunk boundaries anywhere
    for chunk in (1, 3):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(reductions, "EDGE_CHUNK", chunk)
            assert np.array_equal(fold_leaves(src, dst, n, weights).node_map, f.node_map)


@pytest.mark.parametrize("seed", range(4))
def test_folding_matches_the_symmetrised_neighbour_sets(seed):
    rng = np.random.default_rng(seed)
    n = 200
    src, dst = rng.integers(0, 150, 160), rng.integers(0, 150, 160)  # sparse: many leaves, 50+ isolated
    f = fold_leaves(src, dst, n)
    nbrs = [set() for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        if s != d:
            nbrs[s].add(d)
            nbrs[d].add(s)
    for v in range(n):
        if not nbrs[v]:
            assert f.node_map[v] == -1, v
        elif len(nbrs[v]) == 1:
            (u,) = nbrs[v]
            assert f.node_map[v] == f.node_map[u] >= 0, v  # a leaf shares its neighbour's folded node
        else:
            assert f.node_map[v] >= 0 and (f.node_map == f.node_map[v]).sum() == 1 + sum(
                len(nbrs[u]) == 1 for u in nbrs[v]), v  # itself and its leaves
    kept = f.node_map >= 0
    assert f.weights.sum() == kept.sum() and set(f.node_map[kept].tolist()) == set(range(f.num_nodes))


def test_parhip_file_of_the_folded_graph_is_the_mapped_graphs(tmp_path):
    kaminpar = pytest.importorskip("kaminpar")
    from pyg_sparsecomm.partition.parhip import write_parhip
    src, dst, n = _small()
    f = fold_leaves(src, dst, n)
    write_parhip(str(tmp_path / "f.parhip"), src, dst, f.num_nodes, f.weights, block_entries=1,
                 node_map=f.node_map)
    ms, md = f.node_map[src], f.node_map[dst]
    kept = (ms >= 0) & (md >= 0)
    write_parhip(str(tmp_path / "m.parhip"), ms[kept], md[kept], f.num_nodes, f.weights)
    assert (tmp_path / "f.parhip").read_bytes() == (tmp_path / "m.parhip").read_bytes()
    graph = kaminpar.load_graph(str(tmp_path / "f.parhip"), kaminpar.GraphFileFormat.PARHIP)
    assert [sorted(v for v, _ in graph.neighbors(u)) for u in range(graph.n())] == [[1, 3], [0, 3], [], [0, 1]]


def test_fill_parts_evens_the_room_left():
    assert fill_parts(np.array([5, 3, 4]), np.array([6, 6, 6]), 4).tolist() == [1, 1, 1, 2]
    assert fill_parts(np.array([5, 3, 4]), np.array([6, 6, 6]), 7).tolist() == [0, 1, 1, 1, 1, 2, 2]
    assert fill_parts(np.array([1, 1]), np.array([3, 3]), 0).tolist() == []
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(1, 9))
        caps = rng.integers(5, 30, k)
        loads = caps - rng.integers(-3, 12, k)  # KaMinPar may overshoot a bound
        count = int(rng.integers(0, 60))
        got = fill_parts(loads, caps, count)
        assert len(got) == count and np.all(np.diff(got) >= 0)
        room = caps - loads - np.bincount(got, minlength=k)
        taken = np.bincount(got, minlength=k) > 0
        if taken.any():  # no part that took a node is left with less room than another's minus one
            assert room[taken].min() >= room.max() - 1
        if np.maximum(caps - loads, 0).sum() >= count:
            assert np.all((room >= 0) | ~taken)  # within the bounds whenever they hold the nodes


@pytest.mark.parametrize("P,split", [(4, None), (8, 2), (8, [2, 2])])
def test_kaminpar_with_folded_leaves_is_valid_balanced_and_keeps_leaves_home(P, split):
    pytest.importorskip("kaminpar")
    data = rmat_graph(12, 4, seed=2)  # sparse: many leaves and isolated nodes
    n = data.num_nodes
    out = SparsityAwarePartitioner(P, "kaminpar", seed=1, fold_leaves=True, split=split)(data)
    part = out.part.numpy()
    assert sorted(np.unique(part).tolist()) == list(range(P))
    weights = row_nnz(data.edge_index, n)
    loads = np.bincount(part, weights=weights, minlength=P)
    assert loads.max() <= 1.03 * np.ceil(weights.sum() / P) + 2, loads
    f = fold_leaves(*data.edge_index.numpy(), n)
    src, dst = data.edge_index.numpy()
    leaf_edges = (f.node_map[src] == f.node_map[dst]) & (src != dst)
    assert leaf_edges.any() and np.all(part[src[leaf_edges]] == part[dst[leaf_edges]])
    plain = SparsityAwarePartitioner(P, "kaminpar", seed=1, split=split)(data)
    assert out.comm_stats.total_rows <= 1.1 * plain.comm_stats.total_rows
    assert torch.equal(out.part, SparsityAwarePartitioner(P, "kaminpar", seed=1, fold_leaves=True,
                                                          split=split)(data).part)
    with pytest.raises(ValueError, match="fold_leaves must be True, False or .auto."):
        SparsityAwarePartitioner(P, "kaminpar", fold_leaves="yes")(data)
