"""Integer sorts of the balancing hot paths: the same results as numpy's, several times faster.

The refinement sorts millions of (net, part) keys per round.  Packing the keys
and the element index into one ``int64`` turns a stable ``argsort``,
``lexsort`` or ``unique(return_inverse=True)`` into one plain sort of unique
values, whose order is the stable one; when the bits do not fit, numpy's own
routine runs instead.
"""
import numpy as np


def stable_sort(values: np.ndarray):
    """``(sorted values, stable argsort)`` of non-negative ``int64`` values.

    When value and index fit in 63 bits together, one plain sort of
    ``value << bits | index`` (unique, so its order is the stable one) gives
    both, several times faster than a stable ``argsort`` or ``lexsort``.
    """
    n = values.size
    idx_bits = max(n - 1, 0).bit_length()
    if n == 0 or int(values.max()).bit_length() + idx_bits > 63:
        order = np.argsort(values, kind="stable")
        return values[order], order
    packed = np.sort((values << idx_bits) | np.arange(n, dtype=np.int64))
    return packed >> idx_bits, packed & ((1 << idx_bits) - 1)


def run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values begins in ``sorted_values`` (``[0]`` for an empty array)."""
    return np.flatnonzero(np.concatenate([[True], sorted_values[1:] != sorted_values[:-1]]))


def unique_inverse(values: np.ndarray):
    """``np.unique(values, return_inverse=True)`` for non-negative ``int64`` values, via :func:`stable_sort`."""
    sorted_values, order = stable_sort(values)
    starts = run_starts(sorted_values)[:values.size]  # an empty input has no run
    group = np.zeros(values.size, dtype=np.int64)
    group[starts[1:]] = 1
    inverse = np.empty(values.size, dtype=np.int64)
    inverse[order] = np.cumsum(group)
    return sorted_values[starts], inverse


def lexsort(keys) -> np.ndarray:
    """``np.lexsort(keys)`` (last key primary, ties by index) for integer keys.

    Packs the keys, shifted to start at 0, into one ``int64`` when they fit
    (then :func:`stable_sort`, about 4x faster than ``lexsort``).
    """
    n = keys[0].size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lows = [int(k.min()) for k in keys]
    widths = [(int(k.max()) - lo).bit_length() for k, lo in zip(keys, lows, strict=False)]
    if sum(widths) > 62:
        return np.lexsort(keys)
    packed = np.zeros(n, dtype=np.int64)
    for k, lo, width in reversed(list(zip(keys, lows, widths, strict=False))):  # primary key in the high bits
        packed = (packed << width) | (k - lo).astype(np.int64)
    return stable_sort(packed)[1]
