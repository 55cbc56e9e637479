"""NeighborSampling.pick's selection without a sort keeps exactly the in-edges the sort keeps."""
import numpy as np

from pyg_sparsecomm.sampling.randomness import stream_key, uniform
from pyg_sparsecomm.sampling.rules import NeighborSampling, _smallest_by_sorting, _smallest_in_runs


def test_selection_equals_sorting_with_ties_and_unsorted_targets():
    rng = np.random.default_rng(0)
    used_fast = 0
    for trial in range(60):
        sizes = rng.integers(0, 30, rng.integers(1, 100))
        target = np.repeat(np.sort(rng.choice(10_000, sizes.size, replace=False)), sizes)
        edge_id = rng.permutation(100_000)[:target.size]
        k = int(rng.integers(1, 12))
        priority = uniform(stream_key(trial, 2), edge_id)
        if trial % 3 == 0:
            priority = np.round(priority * 8) / 8  # ties: edge ids decide, as the sort does
        fast = _smallest_in_runs(target, priority, k)
        if fast is not None:
            used_fast += 1
            assert np.array_equal(fast, _smallest_by_sorting(target, priority, edge_id, k)), trial
        spec = NeighborSampling(batch_size=4, num_neighbors=(k,))
        for perm in (np.arange(target.size), rng.permutation(target.size)):  # unsorted: the sort
            t, e = target[perm], edge_id[perm]
            expected = _smallest_by_sorting(t, uniform(stream_key(0, 2, 0, trial), e), e, k)
            assert np.array_equal(spec.pick(0, trial, 1, t, e), expected), trial
    assert used_fast > 30
    assert _smallest_in_runs(np.array([3, 1]), np.array([0.1, 0.2]), 1) is None
    assert _smallest_in_runs(np.zeros(40, dtype=np.int64), np.linspace(0, 0.9, 40), 33) is None
