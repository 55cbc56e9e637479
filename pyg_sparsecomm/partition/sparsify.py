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
optimises the cut of the sample, the partition is then used for the whole graph.  A node the
sample leaves without an edge (all of them to hubs, say) would be placed by balance alone, so
:class:`StrandedNodes` moves it to the part holding most of its neighbours afterwards (R-MAT scale
21, :math:`\tau` = 512: 160K such nodes; 0.4 % less total volume).  It pays on
large graphs with hubs far above the number of parts; on a small one it only costs volume (Cora,
maximum degree 336, median of 3 seeds: :math:`\tau` = 64 raised KaMinPar's total volume by 9 % at
P = 4 and 0.5 % at P = 16).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..plan.homogeneous import id_dtype
from ._threads import ordered_in_threads

#: edges read at once (:data:`._threads.WORKERS` chunks at a time)
EDGE_CHUNK = 1 << 20
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
    def ends(start: int) -> np.ndarray:
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        count = np.bincount(s, minlength=num_nodes)
        count += np.bincount(d, minlength=num_nodes)
        loops = s[s == d]
        if len(loops):
            count -= 2 * np.bincount(loops, minlength=num_nodes)
        return count

    degree = np.zeros(num_nodes, dtype=np.int64)
    for count in ordered_in_threads(ends, range(0, len(src), EDGE_CHUNK)):
        degree += count
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
        shifted = np.empty_like(x)
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


def sample_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, max_degree: int, seed: int = 0,
                 degree: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""The edges kept by the degree-capped sample (see the module's docstring).

    Args:
        src (np.ndarray): the edges' sources ``[E]`` (either orientation).
        dst (np.ndarray): the edges' targets ``[E]``.
        num_nodes (int): :math:`n`.
        max_degree (int): :math:`\tau \ge 1`.
        seed (int, optional): the sample's seed. (default: :obj:`0`)
        degree (np.ndarray, optional): :func:`edge_degrees` of the edges, if the caller has them. (default: :obj:`None`)

    Returns:
        ``(src, dst)`` of the edges kept, in their order, ``int32`` when the ids fit (a copy:
        the kept edges, 8 bytes each then); self-loops dropped.

    Memory: the degrees ``[n]``, two chunks, and the kept edges (twice while their chunks
    are joined).
    """
    max_degree = check_max_degree(max_degree)
    n = int(num_nodes)
    degree = edge_degrees(src, dst, n) if degree is None else degree
    share = np.minimum(1.0, max_degree / np.maximum(degree, 1)).astype(np.float32)
    dtype = id_dtype(n)

    def kept(start: int) -> tuple[np.ndarray, np.ndarray]:
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        probability = share[s]
        probability *= share[d]
        keep = pair_uniform(s, d, seed) < probability
        keep &= s != d
        return s[keep].astype(dtype), d[keep].astype(dtype)

    chunks = list(ordered_in_threads(kept, range(0, len(src), EDGE_CHUNK)))
    if not chunks:
        return np.empty(0, dtype=dtype), np.empty(0, dtype=dtype)
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


@dataclass(frozen=True)
class StrandedNodes:
    """Nodes with edges in the graph but none in its sample: the partitioner of the sample places
    them blindly (by balance alone), so :meth:`place` moves each to the part holding most of its
    neighbours.

    Attributes:
        nodes (np.ndarray): ``int64`` their ids, ascending.
        pair_node (np.ndarray): their edges (both directions, self-loops left out): the position in
            ``nodes`` of one end.
        pair_neighbour (np.ndarray): the id of the edge's other end.
    """

    nodes: np.ndarray
    pair_node: np.ndarray
    pair_neighbour: np.ndarray

    def place(self, part: np.ndarray, vertex_weights: np.ndarray | None,
              max_block_weights: np.ndarray) -> np.ndarray:
        """``part`` (``int64 [n]``, a copy) with every stranded node in the part where most of its
        neighbours are (ties: the lower part), as far as the parts' bounds ``max_block_weights``
        (``[k]``) allow: a part takes the nodes that count most of their neighbours in it first;
        the others fill the roomiest parts."""
        part = np.array(part, dtype=np.int64)
        if not len(self.nodes):
            return part
        k = len(max_block_weights)
        weights = np.ones(len(part), dtype=np.int64) if vertex_weights is None else np.asarray(vertex_weights)
        weight = weights[self.nodes].astype(np.int64)
        room = np.asarray(max_block_weights, dtype=np.int64) - np.bincount(
            part, weights=weights, minlength=k).astype(np.int64) + np.bincount(
            part[self.nodes], weights=weight, minlength=k).astype(np.int64)
        node, best, count = _most_common_part(self.pair_node, part[self.pair_neighbour], k)
        order = np.lexsort((node, -count, best))  # by part, strongest first
        node, best = node[order], best[order]
        taken = _cumsum_by_group(weight[node], best)
        fits = taken <= room[best]
        part[self.nodes[node[fits]]] = best[fits]
        room -= np.bincount(best[fits], weights=weight[node[fits]], minlength=k).astype(np.int64)
        rest = node[~fits]
        part[self.nodes[rest]] = _fill_by_room(room, weight[rest])
        return part


def _fill_by_room(room: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Parts for nodes of ``weight``, in their order: the roomiest part takes the longest run of
    them its room holds, then the next roomiest the following run, and so on (every part within
    its room); what no room holds goes to the roomiest part."""
    part = np.full(len(weight), int(np.argmax(room)) if len(room) else 0, dtype=np.int64)
    ends = np.cumsum(weight)
    start = 0
    for p in np.argsort(-room, kind="stable").tolist():
        if start == len(weight) or room[p] <= 0:
            break
        before = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, before + int(room[p]), side="right"))
        part[start:stop] = p
        start = stop
    return part


def _most_common_part(pair_node: np.ndarray, pair_part: np.ndarray,
                      k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every node of ``pair_node`` (positions, each with at least one pair): the part most of
    its pairs have (ties: the lower) and how many do; as ``(node, part, count)``, by node."""
    key = pair_node.astype(np.int64) * k + pair_part
    key.sort()
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.r_[starts, len(key)])
    key = key[starts]
    node, part = key // k, key % k
    order = np.lexsort((part, -counts, node))
    first = order[np.r_[True, node[order][1:] != node[order][:-1]]]
    return node[first], part[first], counts[first]


def _cumsum_by_group(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running sums of ``values`` restarting at every change of ``group`` (sorted)."""
    total = np.cumsum(values)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    before = np.repeat(total[starts] - values[starts], np.diff(np.r_[starts, len(values)]))
    return total - before


def stranded_nodes(src: np.ndarray, dst: np.ndarray, degree: np.ndarray, kept_degree: np.ndarray) -> StrandedNodes:
    """The :class:`StrandedNodes` of a sample: nodes of ``degree > 0`` and ``kept_degree == 0``
    (:func:`edge_degrees` of the edges and of the sample), with their edges from ``src -> dst``."""
    nodes = np.flatnonzero((degree > 0) & (kept_degree == 0))
    position: np.ndarray = np.full(len(degree), -1, dtype=id_dtype(len(nodes)))
    position[nodes] = np.arange(len(nodes), dtype=position.dtype)

    def pairs(start: int) -> list[tuple[np.ndarray, np.ndarray]]:
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        out = []
        for a, b in ((s, d), (d, s)):
            at = position[a]
            mine = (at >= 0) & (a != b)
            out.append((at[mine], b[mine].astype(np.int64)))
        return out

    found = [p for chunk in ordered_in_threads(pairs, range(0, len(src) if len(nodes) else 0, EDGE_CHUNK))
             for p in chunk]
    pair_node, pair_neighbour = [p[0] for p in found], [p[1] for p in found]
    if not pair_node:
        return StrandedNodes(nodes, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    return StrandedNodes(nodes, np.concatenate(pair_node).astype(np.int64), np.concatenate(pair_neighbour))


def sample_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int, max_degree: int, seed: int = 0,
                 degree: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, StrandedNodes]:
    """:func:`sample_edges` and the :class:`StrandedNodes` of the sample (``degree``: the edges'
    :func:`edge_degrees`, if the caller has them)."""
    degree = edge_degrees(src, dst, int(num_nodes)) if degree is None else degree
    kept_src, kept_dst = sample_edges(src, dst, num_nodes, max_degree, seed, degree)
    stranded = stranded_nodes(src, dst, degree, edge_degrees(kept_src, kept_dst, int(num_nodes)))
    return kept_src, kept_dst, stranded
