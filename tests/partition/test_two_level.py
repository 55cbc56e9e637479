"""Two-level partitions (:mod:`pyg_sparsecomm.partition.two_level`): what each level's partitioner
is given (groups' induced subgraphs in local ids, their vertex weights, the weight bounds) and how
the parts are numbered, with a recording stand-in for the partitioner."""
import math
import weakref

import numpy as np
import pytest

from pyg_sparsecomm.partition import two_level
from pyg_sparsecomm.partition.two_level import check_split, max_block_weights, parts_per_group, two_level_partition


def _graph(seed=0, n=60):
    """Directed, with self-loops, duplicates and isolated nodes (the last 5 have no edge)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n - 5, 300), rng.integers(0, n - 5, 300)
    src, dst = np.concatenate([src, [3, 3, 7]]), np.concatenate([dst, [3, 3, 8]])
    return src, dst, n, rng.integers(1, 9, n)


class Recorder:
    """Returns ``top`` for the first call, then node ``i`` of a group -> block ``i % blocks``;
    keeps every call's arguments."""

    def __init__(self, top):
        self.top, self.calls = top, []

    def __call__(self, edges, n, caps, weights):
        src, dst = edges
        self.calls.append((src.copy(), dst.copy(), n, caps.copy(), weights.copy()))
        return self.top if len(self.calls) == 1 else np.arange(n) % len(caps)


@pytest.mark.parametrize("num_parts,split", [(7, 3), (8, 4), (5, 4), (64, 8)])
def test_each_group_gets_its_induced_subgraph_and_its_share_of_the_parts(monkeypatch, num_parts, split):
    monkeypatch.setattr(two_level, "EDGE_CHUNK", 37)  # several chunks, boundaries anywhere
    src, dst, n, weights = _graph(num_parts)
    top = np.random.default_rng(1).integers(0, split, n)
    top[top == split - 1] = 0  # the last group empty: no call for it
    rec = Recorder(top)
    part = two_level_partition(src, dst, n, num_parts, split, weights, 0.03, rec)
    shares = parts_per_group(num_parts, split)
    assert shares.sum() == num_parts and shares.max() - shares.min() <= 1 and len(shares) == split
    eps = math.sqrt(1.03) - 1
    first = rec.calls[0]
    assert first[2] == n and np.array_equal(first[0], src) and np.array_equal(first[1], dst)
    assert np.array_equal(first[3], max_block_weights(weights.sum(), shares, num_parts, eps))
    assert np.array_equal(first[4], weights)
    offsets = np.concatenate([[0], np.cumsum(shares)])
    calls = iter(rec.calls[1:])
    for g in range(split):
        nodes = np.flatnonzero(top == g)
        assert np.all((part[nodes] >= offsets[g]) & (part[nodes] < offsets[g + 1])), g
        if len(nodes) == 0 or shares[g] == 1:
            continue
        sub_src, sub_dst, sub_n, caps, sub_w = next(calls)
        local = np.full(n, -1)
        local[nodes] = np.arange(len(nodes))
        inside = (top[src] == g) & (top[dst] == g)
        want = sorted(zip(local[src[inside]].tolist(), local[dst[inside]].tolist(), strict=True))
        assert sorted(zip(sub_src.tolist(), sub_dst.tolist(), strict=True)) == want, g
        assert sub_n == len(nodes) and np.array_equal(sub_w, weights[nodes])
        rest = two_level._rest_epsilon(0.03, weights.sum(), num_parts, sub_w.sum(), shares[g])
        assert np.array_equal(caps, max_block_weights(sub_w.sum(), np.ones(shares[g], dtype=np.int64),
                                                      shares[g], rest))
        assert np.array_equal(part[nodes], offsets[g] + np.arange(len(nodes)) % shares[g])
    assert next(calls, None) is None


def test_weight_bounds_compose_to_the_overall_imbalance():
    # a group within its bound leaves its parts at least sqrt(1 + eps) - 1 (two levels), a lighter one
    # more, and a part within the inner bound is within (1 + eps) W / k, up to rounding
    total, k, split, eps = 10_007, 12, 5, 0.03
    level = math.sqrt(1 + eps) - 1
    shares = parts_per_group(k, split)
    for g, cap in enumerate(max_block_weights(total, shares, k, level)):
        for weight in (cap, int(cap * 0.97)):
            rest = two_level._rest_epsilon(eps, total, k, weight, shares[g])
            assert rest >= level - 1e-3 and (weight == cap or rest > level + 0.02)
            inner = max_block_weights(weight, np.ones(shares[g], dtype=np.int64), shares[g], rest)
            assert inner.max() <= (1 + eps) * total / k + 2
    assert two_level._rest_epsilon(eps, total, k, total, 1) == 1e-3  # a group over its bound: a floor
    assert max_block_weights(10, np.array([1, 2]), 3, 0.0).tolist() == [4, 7]  # exact integer ceilings


@pytest.mark.parametrize("split", [1, 8, 9, 0, 2.0, True, "4", [], [1], [2, 1], [8, 2], [2, True], (2, 2.0)])
def test_bad_split_is_refused_naming_the_range(split):
    with pytest.raises(ValueError, match="split must be an integer from 2 to num_parts - 1 = 7"):
        check_split(split, 8)
    assert check_split(None, 8) is None
    assert check_split(7, 8) == (7,) and check_split([2, 2], 8) == (2, 2) and check_split((3, 9), 8) == (3, 9)


@pytest.mark.parametrize("num_parts,split,blocks", [(16, [2, 2], [2, 2, 2, 4, 4, 4, 4]), (10, [3, 2], [2] * 7 + [3]),
                                                     (12, [2, 4], [2, 2, 2, 2, 2, 4, 4])])
def test_a_list_split_goes_down_level_by_level_and_its_bounds_compose(monkeypatch, num_parts, split, blocks):
    """[g1, g2, ...]: g1 groups, then each group the same way with [g2, ...] where its share exceeds
    g2, directly into its share otherwise; the first level gets (1 + eps)^(1/L) - 1, and every final
    part's bound stays within (1 + eps) W / k."""
    monkeypatch.setattr(two_level, "EDGE_CHUNK", 53)
    src, dst, n, _ = _graph(3, n=300)
    weights = np.ones(n, dtype=np.int64)  # the stand-in below then keeps every level's bounds
    seen = []

    def in_proportion(edges, m, caps, w):  # runs of local ids, each block's in proportion to its bound
        s, d = edges
        seen.append((len(caps), caps.copy(), m, s.copy(), d.copy()))
        assert len(s) == len(d) and (len(s) == 0 or 0 <= min(s.min(), d.min()) and max(s.max(), d.max()) < m)
        return np.searchsorted(np.floor(np.cumsum(caps) * m / caps.sum()), np.arange(m), side="right")

    part = two_level_partition(src, dst, n, num_parts, split, weights, 0.03, in_proportion)
    assert sorted(np.unique(part).tolist()) == list(range(num_parts))
    assert sorted(c[0] for c in seen) == blocks  # the blocks asked of every call (shares of 1: no call)
    assert seen[0][2] == n and np.array_equal(seen[0][3], src) and np.array_equal(seen[0][4], dst)
    eps = 1.03 ** (1 / (len(split) + 1)) - 1
    assert np.array_equal(seen[0][1], max_block_weights(weights.sum(), parts_per_group(num_parts, split[0]),
                                                        num_parts, eps))
    one_part = np.concatenate([c[1] for c in seen])
    one_part = one_part[one_part < 1.5 * n / num_parts]  # the bounds of final parts (groups weigh 2 parts or more)
    assert len(one_part) >= num_parts - len(split) - 1 and one_part.max() <= 1.03 * n / num_parts + len(split) + 1
    # the same partition whatever the chunking of the edges
    monkeypatch.setattr(two_level, "EDGE_CHUNK", 1 << 20)
    assert np.array_equal(two_level_partition(src, dst, n, num_parts, split, weights, 0.03, in_proportion), part)


def test_a_groups_edges_are_freed_once_the_partitioner_has_read_them():
    """The partitioner gets a group's induced edges in a list it may empty: nothing else holds them
    then (with them passed as arguments, the caller held them while the partitioner ran)."""
    src, dst, n, weights = _graph(4)
    held = []

    def dropping(edges, m, caps, w):
        s, d = edges
        edges.clear()
        ref = weakref.ref(s)
        del s, d
        held.append(ref() is not None)
        return np.arange(m) % len(caps)

    two_level_partition(src, dst, n, 6, [2], weights, 0.03, dropping)
    two_level_partition(src, dst, n, 8, [2, 2], weights, 0.03, dropping)
    # a level's own call keeps its edges (its groups' subgraphs are written from them after it), the last
    # level's calls not: [2] = whole graph, 2 halves; [2, 2] = whole graph, then per half its own, 2 quarters
    assert held == [True, False, False] + [True] + [True, False, False] * 2
