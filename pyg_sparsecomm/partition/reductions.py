r"""Leaf folding: the reductions a graph partitioner's input can take without losing a cut.

Two kinds of nodes of the symmetrised graph (self-loops ignored) constrain no cut:

* an **isolated** node (no neighbour) is cut from nothing wherever it goes, so it only fills
  parts up to their balance bound after the others are placed;
* a **leaf** (exactly one neighbour :math:`v`) cuts its one edge unless it joins :math:`v`'s
  part, so it is folded into :math:`v`: its vertex weight is added to :math:`v`'s and it takes
  :math:`v`'s part (of an isolated edge, two leaves, the smaller id stands for both).

The partitioner then sees :math:`n'` nodes instead of :math:`n` (R-MAT scale 21: 0.97M of 2.1M:
41 % isolated, 13 % leaves) with the same edges bar the leaves'; its memory and time shrink with
its node count, and every partition of the folded graph unfolds into one of the whole graph with
the same cut and the same part weights plus the isolated nodes'.  The communication volume a
leaf causes (its row read across parts) is zero too, since it shares its neighbour's part.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..plan.homogeneous import id_dtype

#: edges read at once
EDGE_CHUNK = 1 << 22


@dataclass(frozen=True)
class LeafFolding:
    """A graph with its isolated unit-weight nodes left out and its leaves folded.

    Attributes:
        node_map (np.ndarray): ``[n]`` every node's id in the folded graph (a leaf's: its neighbour's), ``-1``
            for a node left out (isolated, vertex weight 1: placed by :meth:`unfold`).
        weights (np.ndarray): ``int64 [n']`` vertex weights of the folded graph (leaves' added).
        left_out (np.ndarray): ``int64`` ids of the nodes left out, ascending.
    """

    node_map: np.ndarray
    weights: np.ndarray
    left_out: np.ndarray

    @property
    def num_nodes(self) -> int:
        """:math:`n'`, the folded graph's nodes."""
        return len(self.weights)

    def unfold(self, folded_part: np.ndarray, max_block_weights: np.ndarray,
               vertex_weights: np.ndarray | None) -> np.ndarray:
        """The part (``int64 [n]``) of every node: a folded node's part from ``folded_part``
        (``[n']``), the nodes left out (weight 1 each) spread over the parts by
        :func:`fill_parts` under ``max_block_weights`` (``[k]``)."""
        kept = self.node_map >= 0
        part = np.empty(len(self.node_map), dtype=np.int64)
        part[kept] = np.asarray(folded_part, dtype=np.int64)[self.node_map[kept]]
        weights = np.ones(len(part), dtype=np.int64) if vertex_weights is None else vertex_weights
        loads = np.bincount(part[kept], weights=weights[kept], minlength=len(max_block_weights))
        part[self.left_out] = fill_parts(loads.astype(np.int64), max_block_weights, len(self.left_out))
        return part


def neighbour_range(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The smallest and largest neighbour of every node in the symmetrised graph, self-loops
    ignored (``num_nodes`` and ``-1`` for a node without neighbours); ``int32`` when they fit."""
    dtype = id_dtype(num_nodes)  # num_nodes itself marks 'no neighbour'
    low: np.ndarray = np.full(num_nodes, num_nodes, dtype=dtype)
    high: np.ndarray = np.full(num_nodes, -1, dtype=dtype)
    for start in range(0, len(src), EDGE_CHUNK):
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        off_loop = s != d
        s, d = s[off_loop], d[off_loop]
        for a, b in ((s, d), (d, s)):
            np.minimum.at(low, a, b.astype(dtype, copy=False))
            np.maximum.at(high, a, b.astype(dtype, copy=False))
    return low, high


def fold_leaves(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                vertex_weights: np.ndarray | None = None) -> LeafFolding:
    r"""The :class:`LeafFolding` of the graph of the edges ``src -> dst``.

    Args:
        src (np.ndarray): the edges' sources ``[E]`` (either orientation: the symmetrised graph is what
            counts).
        dst (np.ndarray): the edges' targets ``[E]``.
        num_nodes (int): :math:`n`.
        vertex_weights (np.ndarray, optional): ``[n]`` positive integers (``None``: 1 each).  Only isolated nodes of
            weight 1 are left out (an isolated node of more stays in, as a node without edges). (default: :obj:`None`)

    Memory: a few ``[n]`` arrays and one chunk of edges; the edges are read twice.
    """
    n = int(num_nodes)
    low, high = neighbour_range(src, dst, n)
    ids = np.arange(n, dtype=low.dtype)
    leaf = low == high  # one distinct neighbour (isolated: low = n > high = -1)
    neighbour = np.where(leaf, low, ids)
    del high
    # a leaf joins its neighbour unless that is a leaf of a larger id (then the leaf stands for both)
    folded = leaf & (~leaf[neighbour] | (neighbour < ids))
    weights = np.ones(n, dtype=np.int64) if vertex_weights is None else np.asarray(vertex_weights, np.int64)
    left_out = np.flatnonzero((low == n) & (weights == 1))
    del low, leaf
    stays = ~folded
    stays[left_out] = False
    new_id = np.cumsum(stays, dtype=np.int64) - 1
    node_map = new_id[np.where(folded, neighbour, ids)].astype(ids.dtype, copy=False)
    node_map[left_out] = -1
    kept = node_map >= 0
    folded_weights = np.bincount(node_map[kept], weights=weights[kept], minlength=int(stays.sum()))
    return LeafFolding(node_map, np.rint(folded_weights).astype(np.int64), left_out)


def fill_parts(loads: np.ndarray, max_block_weights: np.ndarray, count: int) -> np.ndarray:
    r"""Parts for ``count`` nodes of weight 1, so that the parts' room left
    :math:`c_b - w_b` (``max_block_weights - loads``) ends as even as possible: the roomiest parts
    are filled first, down to a common room :math:`R` (below 0 only if the rooms do not hold
    ``count``).

    Returns:
        ``int64 [count]``, part ids in ascending order.
    """
    room = np.asarray(max_block_weights, dtype=np.int64) - np.asarray(loads, dtype=np.int64)
    if count == 0:
        return np.empty(0, dtype=np.int64)
    # the largest R with sum(max(0, room - R)) >= count, by bisection on [min(room) - count, max(room)]
    low, high = int(room.min()) - count, int(room.max())
    while low < high:
        mid = (low + high + 1) // 2
        if int(np.maximum(room - mid, 0).sum()) >= count:
            low = mid
        else:
            high = mid - 1
    take = np.maximum(room - low, 0)
    surplus = int(take.sum()) - count  # fewer than the parts above R (low + 1 would not hold count)
    if surplus:
        tightest = np.flatnonzero(take)[np.argsort(room[take > 0], kind="stable")][:surplus]
        take[tightest] -= 1
    return np.repeat(np.arange(len(room), dtype=np.int64), take)
