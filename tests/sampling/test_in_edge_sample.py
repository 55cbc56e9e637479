"""The in-edge draw (``sampling/in_edge_sample.py``): Floyd's algorithm vectorised over the nodes
equals the sequential algorithm written out here with Python integers; every in-edge is kept with
probability k / d and every k-subset with probability 1 / C(d, k) (chi-square over many batches and
nodes); the number of ids hashed per node is the fanout, whatever the in-degree; the hashes are
SplitMix64's as NumPy computes them; the canonical order is (target, source, edge id)."""
import itertools
import math

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from pyg_sparsecomm import shard
from pyg_sparsecomm.loader import DistributedNeighborLoader, NeighborSampling, global_batches
from pyg_sparsecomm.sampling import randomness
from pyg_sparsecomm.sampling.in_edge_sample import in_edge_order, sample_in_edges, sample_positions
from pyg_sparsecomm.sampling.randomness import hashed_items, stream_key, uniform

_U64 = 1 << 64


def _splitmix_numpy(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser in NumPy's uint64 (the form the package used before torch)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % _U64
    return z ^ (z >> 31)


def _key(seed: int, *stream: int) -> int:
    key = seed % _U64
    for s in stream:
        key = (_mix(key ^ s) + 0x9E3779B97F4A7C15) % _U64
    return _mix(key)


def _floyd_sequential(key: int, node: int, d: int, k: int) -> set[int]:
    """Bentley & Floyd's algorithm, one node, Python integers: step j draws from the hash of the
    node's id under the key of (key, j)."""
    chosen: set[int] = set()
    for step, j in enumerate(range(d - k, d)):
        bits = _mix((node * 0x9E3779B97F4A7C15 + _key(key, step)) % _U64) >> 11
        t = min(int(bits * 2.0 ** -53 * (j + 1)), j)
        chosen.add(j if t in chosen else t)
    return chosen


def test_hashes_are_splitmix64_as_numpy_computes_them():
    for stream in [(0,), (5, 1, 2), (2 ** 63 + 5, 3, 0, 7), (11, 2, 0, 3, 1)]:
        assert int(stream_key(*stream)) == _key(*stream)
    ids = np.concatenate([np.arange(1000), np.random.default_rng(0).integers(0, 2 ** 62, 10_000), [2 ** 63 - 1]])
    for key in (stream_key(3, 1, 2), np.uint64(0), np.uint64(_U64 - 1)):
        with np.errstate(over="ignore"):
            z = _splitmix_numpy(ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key)
        expected = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        assert np.array_equal(uniform(key, ids), expected)
        assert np.array_equal(uniform(key, torch.from_numpy(ids)), expected)


def test_a_table_of_hashes_is_each_key_hashed_alone():
    ids = torch.from_numpy(np.random.default_rng(2).integers(0, 2 ** 62, 500))
    keys = [stream_key(4, 1, step) for step in range(7)] + [np.uint64(0), np.uint64(_U64 - 1)]
    before = hashed_items()
    table = randomness.raw_bits_table(keys, ids)
    assert hashed_items() - before == ids.numel() * len(keys)
    assert table.shape == (500, len(keys))
    for j, key in enumerate(keys):
        assert torch.equal(table[:, j], randomness.raw_bits(key, ids))


def test_vectorised_floyd_equals_the_sequential_algorithm():
    rng = np.random.default_rng(1)
    for trial in range(40):
        n, k = int(rng.integers(1, 60)), int(rng.integers(1, 12))
        degree = torch.from_numpy(rng.integers(0, 40, n))
        ids = torch.from_numpy(rng.choice(10 ** 9, n, replace=False))
        key = stream_key(trial, 2, 0, trial)
        node, position = sample_positions(key, ids, degree, k)
        for i in range(n):
            got = position[node == i].tolist()
            d = int(degree[i])
            assert len(got) == min(d, k) and len(set(got)) == len(got), (trial, i)
            expected = set(range(d)) if d <= k else _floyd_sequential(int(key), int(ids[i]), d, k)
            assert set(got) == expected, (trial, i, d, k)
    degree = torch.tensor([0, 3, 7])
    node, position = sample_positions(stream_key(0), torch.arange(3), degree, -1)
    assert node.tolist() == [1, 1, 1] + [2] * 7 and position.tolist() == [0, 1, 2] + list(range(7))
    assert sample_positions(stream_key(0), torch.arange(3), degree, 0)[0].numel() == 0


def _draws(d: int, k: int, keys: int, nodes: int = 1) -> np.ndarray:
    """``[keys * nodes, d]`` inclusion indicators of the positions kept, ``nodes`` node ids under
    ``keys`` batch keys (every (key, node) pair one draw)."""
    ids = torch.arange(nodes) * 104_729 + 3
    out = np.zeros((keys * nodes, d), dtype=bool)
    for b in range(keys):
        node, position = sample_positions(stream_key(7, 2, 0, b), ids, torch.full((nodes,), d), k)
        out[b * nodes + node.numpy(), position.numpy()] = True
    return out


@pytest.mark.parametrize("d,k,keys,nodes", [(7, 3, 3000, 4), (40, 10, 400, 10), (12, 11, 2000, 2), (5, 1, 4000, 1)])
def test_every_in_edge_is_kept_with_probability_k_over_d(d, k, keys, nodes):
    """Per position, chi-square of the inclusion counts.  The indicators of one draw sum to k, so
    their covariance is p(1 - p) d / (d - 1) (I - 11'/d): scaled so, the statistic is chi2(d - 1)."""
    drawn = _draws(d, k, keys, nodes)
    assert (drawn.sum(1) == k).all()
    t, p = drawn.shape[0], k / d
    counts = drawn.sum(0)
    statistic = float(((counts - t * p) ** 2).sum() / (t * p * (1 - p) * d / (d - 1)))
    assert chi2.sf(statistic, d - 1) > 1e-3, (counts, statistic)


def test_every_k_subset_is_equally_likely():
    d, k = 6, 3
    drawn = _draws(d, k, 2000, 10)
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(d), k))}
    index = [subsets[tuple(np.flatnonzero(row))] for row in drawn]
    counts = np.bincount(index, minlength=len(subsets))
    expected = drawn.shape[0] / math.comb(d, k)
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert chi2.sf(statistic, len(subsets) - 1) > 1e-3, counts


def _regular_graph(degree: int, n: int = 400):
    """Every node with exactly ``degree`` in-edges from random sources."""
    from torch_geometric.data import Data
    gen = torch.Generator().manual_seed(degree)
    dst = torch.arange(n).repeat_interleave(degree)
    src = torch.randint(0, n, (n * degree,), generator=gen)
    return Data(x=torch.randn(n, 4, generator=gen), edge_index=torch.stack([src, dst]), num_nodes=n,
                part=torch.zeros(n, dtype=torch.long), num_parts=1)


def test_hashed_items_do_not_grow_with_the_in_degree():
    """The work of a batch in hashed ids: the fanout per frontier node (all in-degrees exceed the
    fanouts here), the same at in-degree 8, 96 and 500; the single-process reference the same."""
    fanouts, seeds = [5, 3], torch.arange(0, 400, 7)
    for degree in (8, 96, 500):
        data = _regular_graph(degree)
        loader = DistributedNeighborLoader(shard(data, rank=0, world_size=1), fanouts, batch_size=len(seeds),
                                           prefetch=0)
        before = hashed_items()
        batch = loader.sample(0, 0, seeds)
        hashed = hashed_items() - before
        frontier = batch.num_sampled_nodes[:len(fanouts)]
        assert hashed == sum(k * f for k, f in zip(fanouts, frontier, strict=True)), degree
        sampling = NeighborSampling(batch_size=10 ** 6, num_neighbors=tuple(fanouts), shuffle=False)
        before = hashed_items()
        (ref,) = global_batches(data.edge_index, data.num_nodes, sampling)
        reference_hashed = hashed_items() - before  # (shuffle=False: batches are runs of the seeds, unhashed)
        assert reference_hashed == sum(k * f for k, f in zip(fanouts, ref.num_sampled_nodes, strict=False))
        assert hashed <= len(seeds) * (5 + 5 * 3)  # a bound without the in-degree


def test_canonical_order_is_by_target_source_and_edge_id():
    rng = np.random.default_rng(2)
    for large_ids in (False, True):  # one combined sort key, or two sorts when it would overflow
        n, m = 30, 400
        dst = np.sort(rng.integers(0, n, m))
        src = rng.integers(0, 12, m) + (2 ** 61 if large_ids else 0)
        edge_id = rng.permutation(m) * 3
        rowptr = torch.from_numpy(np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]))
        order = in_edge_order(rowptr, torch.from_numpy(src), torch.from_numpy(edge_id)).long().numpy()
        assert np.array_equal(order, np.lexsort((edge_id, src, dst)))
        rows = torch.tensor([3, 0, 17])
        kept = sample_in_edges(stream_key(1), -1, rowptr, torch.from_numpy(order), rows, rows).numpy()
        assert sorted(kept.tolist()) == sorted(np.flatnonzero(np.isin(dst, [3, 0, 17])).tolist())


def test_hash_count_counts_every_hashed_id():
    before = randomness.hashed_items()
    randomness.uniform_tensor(stream_key(0), torch.arange(17))
    assert randomness.hashed_items() - before == 17
