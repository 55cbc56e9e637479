r"""Degree-capped edge sampling: a smaller input for a graph partitioner on graphs with hubs.

The communication volume of a partition counts, for every node, the parts other than its own
that read its row (:math:`\lambda - 1` of its column net).  A hub's row is read by nearly every
part whatever the partition, and a hub can sit in one part only, so most of its edges tell the
partitioner little; yet they are most of the edges (R-MAT scale 21: the 7.5K nodes of degree
above 1024 hold 64 % of the edge ends), and a multilevel partitioner's time and memory grow
with the edges.  :func:`sample_edges` keeps every edge :math:`\{u, v\}` with probability

.. math::
    p_{uv} = \min\left(1, \frac{\tau}{d_u}\right) \min\left(1, \frac{\tau}{d_v}\right),

:math:`d` the degree in the edge list (its edge ends, self-loops ignored: an edge list holding both
directions of every edge, as PyG's undirected graphs do, counts each neighbour twice), so a node of
degree above :math:`\tau` keeps about :math:`\tau` of its edges to nodes of degree at most
:math:`\tau`, and a graph without such nodes keeps all of them.  The decision is a hash of the unordered pair
and the seed: both directions of an edge, and every chunk of the edge list, agree, and equal
seeds give equal samples.  Unlike :mod:`.reductions` this is not exact: the partitioner
optimises the cut of the sample, the partition is then used for the whole graph.  It pays on
large graphs with hubs far above the number of parts; on a small one it only costs volume (Cora,
maximum degree 336, median of 3 seeds: :math:`\tau` = 64 raised KaMinPar's total volume by 9 % at
P = 4 and 0.5 % at P = 16).
"""
from __future__ import annotations

import numpy as np

from ..plan import id_dtype

#: edges read at once
EDGE_CHUNK = 1 << 22
_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
#: the hash's top bits compared with a probability (float32 holds them exactly)
_BITS = 24


def check_max_degree(value: object, name: str = "max_degree") -> int:
    """``value`` as an ``int``; raises unless it is a positive integer (``bool`` is not)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer (the degree above which a node's edges are "
                         f"sampled), got {value!r}")
    return int(value)


def edge_degrees(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """``int64 [n]``: the edge ends at every node, both directions counted, self-loops not."""
    degree = np.zeros(num_nodes, dtype=np.int64)
    for start in range(0, len(src), EDGE_CHUNK):
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        degree += np.bincount(s, minlength=num_nodes)
        degree += np.bincount(d, minlength=num_nodes)
        loops = s[s == d]
        if len(loops):
            degree -= 2 * np.bincount(loops, minlength=num_nodes)
    return degree


def pair_hash(u: np.ndarray, v: np.ndarray, seed: int) -> np.ndarray:
    """``uint64`` SplitMix64 hash of every unordered pair :math:`\\{u_i, v_i\\}` (ids below
    :math:`2^{32}`) and ``seed``: the same for :math:`(u, v)` and :math:`(v, u)`, whatever the
    order of the pairs."""
    x = np.minimum(u, v).astype(np.uint64)
    x <<= np.uint64(32)
    x |= np.maximum(u, v).astype(np.uint64)
    with np.errstate(over="ignore"):
        x += _GOLDEN * np.uint64(int(seed) % (1 << 64) + 1)
        shifted = x >> np.uint64(30)
        for shift, factor in ((30, _MIX1), (27, _MIX2)):
            np.right_shift(x, np.uint64(shift), out=shifted)
            x ^= shifted
            x *= factor
        np.right_shift(x, np.uint64(31), out=shifted)
        x ^= shifted
    return x


def pair_uniform(u: np.ndarray, v: np.ndarray, seed: int) -> np.ndarray:
    """``float32`` in :math:`[0, 1)` on a grid of :math:`2^{-24}` for every unordered pair (the top
    bits of :func:`pair_hash`)."""
    return (pair_hash(u, v, seed) >> np.uint64(64 - _BITS)).astype(np.float32) * np.float32(2.0 ** -_BITS)


def sample_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, max_degree: int,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r"""The edges kept by the degree-capped sample (see the module's docstring).

    Args:
        src, dst: the edges ``[E]`` (either orientation).
        num_nodes: :math:`n`.
        max_degree: :math:`\tau \ge 1`.
        seed: the sample's seed.

    Returns:
        ``(src, dst)`` of the edges kept, in their order, ``int32`` when the ids fit (a copy:
        the kept edges, 8 bytes each then); self-loops dropped.

    Memory: the degrees ``[n]``, one chunk, and the kept edges (twice while their chunks are joined).
    """
    max_degree = check_max_degree(max_degree)
    n = int(num_nodes)
    share = np.minimum(1.0, max_degree / np.maximum(edge_degrees(src, dst, n), 1)).astype(np.float32)
    dtype = id_dtype(n)
    kept_src, kept_dst = [], []
    for start in range(0, len(src), EDGE_CHUNK):
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        probability = share[s]
        probability *= share[d]
        keep = pair_uniform(s, d, seed) < probability
        keep &= s != d
        kept_src.append(s[keep].astype(dtype))
        kept_dst.append(d[keep].astype(dtype))
    if not kept_src:
        return np.empty(0, dtype=dtype), np.empty(0, dtype=dtype)
    return np.concatenate(kept_src), np.concatenate(kept_dst)
