"""Counter-based randomness: a uniform number per (seed, stream, id), the same on every rank.

A loader's random choices (which batch a node falls in, which in-edges a node samples) are
functions of global node and edge ids, never of a generator's state, so every rank draws the
same numbers for the same ids without talking, and the batches do not depend on the partition
or on ``P``.  The mixing function is SplitMix64's finaliser (Steele, Lea & Flood, OOPSLA'14),
applied to the id plus a key derived from ``(seed, *stream)``.
"""
import numpy as np
import torch
from torch import Tensor

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over ``uint64`` arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def stream_key(seed: int, *stream: int) -> np.uint64:
    """The key of one random stream: ``seed`` followed by integers naming the stream."""
    key = np.array([seed], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for s in stream:
            key = _mix(key ^ np.array([s], dtype=np.uint64)) + _GOLDEN
    return np.uint64(_mix(key)[0])


def uniform(key: np.uint64, ids: Tensor | np.ndarray) -> np.ndarray:
    r"""``[n]`` float64 uniforms in :math:`[0, 1)`, one per id: :math:`u = \mathrm{mix}(id \cdot \phi + k) / 2^{64}`
    (the top 53 bits), for non-negative int64 ``ids``."""
    raw = ids.detach().cpu().numpy() if isinstance(ids, Tensor) else np.asarray(ids)
    with np.errstate(over="ignore"):
        z = _mix(raw.astype(np.uint64) * _GOLDEN + key)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def bucket(key: np.uint64, ids: Tensor | np.ndarray, num_buckets: int) -> Tensor:
    """``[n]`` int64 bucket in ``[0, num_buckets)`` of every id, uniform and independent."""
    b = np.minimum((uniform(key, ids) * num_buckets).astype(np.int64), num_buckets - 1)
    return torch.from_numpy(b)
