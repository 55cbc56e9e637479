"""``partition/rebalance.py``: a part vector over its bounds comes back within them, by boundary
moves first (fewest cut edges), any node where no boundary node fits, a warning where no node
fits; KaMinPar's partitions are within the bound the package documents whatever KaMinPar returns."""
import numpy as np
import pytest
import torch

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.partition.methods import row_nnz
from pyg_sparsecomm.partition.rebalance import boundary_moves, enforce_balance, enforce_block_weights


def _path(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(n - 1), np.arange(1, n)


def _loads(part, weights, k):
    return np.bincount(part, weights=weights, minlength=k).astype(np.int64)


def test_a_balanced_part_vector_is_returned_as_it_is():
    src, dst = _path(12)
    part = np.repeat(np.arange(3), 4)
    assert enforce_block_weights(src, dst, part, None, np.array([4, 4, 4])) is part


def test_an_overweight_part_gives_its_boundary_nodes_to_the_neighbouring_part():
    src, dst = _path(12)  # a path: part 0 = nodes 0..7, part 1 = 8..11 (bound 6 each)
    part = np.r_[np.zeros(8, dtype=np.int64), np.ones(4, dtype=np.int64)]
    fixed = enforce_block_weights(src, dst, part, None, np.array([6, 6]))
    assert _loads(fixed, None, 2).tolist() == [6, 6]
    assert fixed.tolist() == [0] * 6 + [1] * 6  # the two nodes at the boundary moved: one cut edge still
    assert part.tolist() == [0] * 8 + [1] * 4  # the input is not changed


def test_the_move_cutting_fewest_edges_goes_first_and_targets_need_room():
    # node 0 has 1 neighbour at home and 2 in part 1; node 3 has 2 at home and 1 in part 2
    src = np.array([0, 0, 0, 3, 3, 3, 1, 2])
    dst = np.array([1, 4, 5, 1, 2, 6, 2, 1])
    part = np.array([0, 0, 0, 0, 1, 1, 2])
    loads = _loads(part, None, 3)
    node, target = boundary_moves(src, dst, part, loads, np.array([3, 3, 3]))
    assert (node.tolist(), target.tolist()) == ([0, 3], [1, 2])
    node, target = boundary_moves(src, dst, part, loads, np.array([3, 2, 3]))  # part 1 is full
    assert (node.tolist(), target.tolist()) == ([3], [2])
    fixed = enforce_block_weights(src, dst, part, None, np.array([3, 3, 3]))
    assert fixed.tolist() == [1, 0, 0, 0, 1, 1, 2]


def test_weights_count_and_isolated_nodes_move_where_no_boundary_node_fits():
    weights = np.array([5, 1, 1, 1, 1, 1, 1])
    src, dst = np.array([0]), np.array([6])  # nodes 1..5 isolated, all in part 0 with node 0
    part = np.array([0, 0, 0, 0, 0, 0, 1])
    fixed = enforce_block_weights(src, dst, part, weights, np.array([7, 6]))
    assert fixed.tolist() == [1, 0, 0, 0, 0, 0, 1]  # node 0, the boundary node, fits part 1's room of 5
    fixed = enforce_block_weights(src, dst, part, weights, np.array([8, 3]))  # a room of 2: it does not
    assert fixed.tolist() == [0, 1, 1, 0, 0, 0, 1]  # the lightest nodes move instead


def test_a_node_heavier_than_every_room_is_named_in_a_warning():
    weights = np.array([10, 1])
    part = np.array([0, 1])
    with pytest.warns(UserWarning, match=r"parts \[0\] weigh \[10\], above their bounds \[6\]"):
        fixed = enforce_block_weights(np.array([0]), np.array([1]), part, weights, np.array([6, 6]))
    assert fixed.tolist() == [0, 1]


def test_a_random_overweight_vector_ends_within_the_balance_bound():
    data = rmat_graph(9, 8, seed=2)
    src, dst = data.edge_index.numpy()
    weights = row_nnz(data.edge_index, data.num_nodes)
    rng = np.random.default_rng(0)
    part = rng.integers(0, 8, data.num_nodes)
    part[rng.random(data.num_nodes) < 0.2] = 3  # part 3 about 2.4x the average
    fixed = enforce_balance(src, dst, part, weights, 8, 0.03)
    bound = np.ceil(1.03 * np.ceil(weights.sum() / 8))
    assert _loads(fixed, weights, 8).max() <= bound < _loads(part, weights, 8).max()
    assert np.array_equal(fixed, enforce_balance(src, dst, part, weights, 8, 0.03))  # deterministic


def test_kaminpar_partitions_are_held_to_the_bound_whatever_kaminpar_returns(monkeypatch):
    pytest.importorskip("kaminpar")
    from pyg_sparsecomm.partition import kaminpar_backend
    real = kaminpar_backend.partition_parhip_file

    def overweight(*args, **kwargs):  # KaMinPar's partition with a tenth of the nodes moved to part 0
        part = real(*args, **kwargs)
        part[::10] = 0
        return part

    monkeypatch.setattr(kaminpar_backend, "partition_parhip_file", overweight)
    data, P = rmat_graph(10, 8, seed=1), 8
    weights = row_nnz(data.edge_index, data.num_nodes)
    bound = np.ceil(1.03 * np.ceil(weights.sum() / P))
    for options in ({}, {"split": 2}):
        part = SparsityAwarePartitioner(P, "kaminpar", seed=3, **options)(data).part
        assert part.dtype == torch.long
        assert _loads(part.numpy(), weights, P).max() <= bound, options
