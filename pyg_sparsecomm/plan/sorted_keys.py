"""Sets of integer keys kept as sorted arrays: the distinct values of one array, the union of
many arrays given one at a time (the halo pairs of :func:`~pyg_sparsecomm.plan.homogeneous.comm_pattern`, the
neighbours of the ParHiP writer), and the positions of every key of an array (the out-of-core
writer's scratch files, filled group by group).

Both sort in place and keep no more copies than they must: the halo pairs of a random partition of
R-MAT scale 21 into 64 parts are 10.8M keys (86 MB), merged from a few hundred chunks.
"""
from collections.abc import Iterator

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for an array it may sort in place (numpy 2's ``unique`` hashes first:
    several times slower on large integer arrays, and it sorts a copy)."""
    values.sort()
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


class SortedUnion:
    """The sorted distinct values of the arrays given to :meth:`add`, merged when the pending ones
    outgrow the merged ones: O(n log n) time overall, and at most about four times the result
    (the merged and pending arrays, their concatenation sorted in place, the distinct values)."""

    def __init__(self) -> None:
        self.merged = np.empty(0, dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.pending_size = 0

    def add(self, values: np.ndarray) -> None:
        self.pending.append(values)
        self.pending_size += values.size
        if self.pending_size > self.merged.size:
            self.result()

    def result(self) -> np.ndarray:
        if self.pending:
            values = np.concatenate([self.merged, *self.pending])
            self.merged, self.pending, self.pending_size = values[:0], [], 0  # the inputs freed before the sort
            self.merged = sorted_unique(values)
        return self.merged


def key_groups(keys: np.ndarray, num_keys: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(key, positions)`` for every key of ``range(num_keys)`` that occurs in ``keys``, in key
    order, each key's positions ascending (a stable grouping: what the scratch-file writers append
    to each group's region)."""
    order = np.argsort(keys, kind="stable")
    bounds = np.searchsorted(keys[order], np.arange(num_keys + 1))
    for key in np.flatnonzero(np.diff(bounds)):
        yield int(key), order[bounds[key]:bounds[key + 1]]
