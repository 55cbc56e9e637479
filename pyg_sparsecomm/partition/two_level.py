r"""Two-level partitions: ``split`` groups first, then every group into its share of the parts.

A k-way partitioner's memory beyond its graph can grow with k (KaMinPar 3.7's: about 0.4 GB at
k = 2, 1.2 GB at 64 and 2.1 GB at 1024 on a 32M-edge graph; ``benchmarks/RESULTS.md``), so a
partition into many parts can need more memory than the machine has while one into fewer does.
Splitting first into :math:`g` groups, then partitioning each group's induced subgraph
(:math:`n/g` nodes) into its :math:`q_i` parts bounds the peak by the larger of a :math:`g`-way
call on the whole graph and a :math:`q_i`-way call on one group.  Group :math:`i` holds parts
:math:`[\sum_{j<i} q_j, \sum_{j \le i} q_j)` (consecutive ids: parts that share a group are
cut apart last, as on a machine's GPUs).

Both levels get the imbalance :math:`\epsilon' = \sqrt{1 + \epsilon} - 1`, so a part's weight
stays within :math:`(1 + \epsilon') w(V_i) / q_i \le (1 + \epsilon) w(V) / k` (up to rounding):

.. math::
    w(V_i) \le (1 + \epsilon') \, w(V) \, q_i / k.

Edges between groups are cut by the first level whatever the second does, so the second sees
only its group's induced subgraph (what recursive bisection does at every level).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from ..plan import owner_rows
from ..sorted_keys import key_groups

#: ``(src, dst, num_nodes, max_block_weights, vertex_weights) -> part`` in ``[0, len(max_block_weights))``
BlockPartition = Callable[[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray], np.ndarray]
#: edges read at once while the induced subgraphs are collected
EDGE_CHUNK = 1 << 22


def check_split(split: int | None, num_parts: int) -> None:
    """Raises unless ``split`` is ``None`` or an integer in ``[2, num_parts)``."""
    if split is None:
        return
    if isinstance(split, bool) or not isinstance(split, int) or not 2 <= split < num_parts:
        raise ValueError(f"split must be an integer from 2 to num_parts - 1 = {num_parts - 1} (the groups "
                         f"partitioned first, each then into its share of the parts), got {split!r}; leave "
                         f"split unset to partition into the {num_parts} parts at once")


def parts_per_group(num_parts: int, split: int) -> np.ndarray:
    """:math:`q_i`, the parts of each of the ``split`` groups: ``num_parts`` dealt as evenly as
    possible (the first ``num_parts % split`` groups get one more)."""
    return np.full(split, num_parts // split, dtype=np.int64) + (np.arange(split) < num_parts % split)


def max_block_weights(total: int, shares: np.ndarray, num_parts: int, epsilon: float) -> np.ndarray:
    r"""Weight bounds :math:`\lceil (1 + \epsilon) \lceil w \, q_i / k \rceil \rceil` of blocks
    holding ``shares`` :math:`q_i` of ``num_parts`` :math:`k` parts of total weight :math:`w`."""
    ideal = -(-int(total) * shares // num_parts)  # exact integer ceil
    return np.ceil((1.0 + epsilon) * ideal).astype(np.int64)


def induced_subgraphs(src: np.ndarray, dst: np.ndarray, group: np.ndarray,
                      num_groups: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """``(g, nodes, src, dst)`` for every group with nodes: its nodes (ascending global ids) and the
    edges with both ends in it, in local ids (positions in ``nodes``, ``int32`` when they fit).

    The edges are read a chunk at a time; the induced edges (at most the graph's, 8 bytes each)
    are collected per group, and each group's are released once it has been yielded.
    """
    sizes, local = owner_rows(group, num_groups)  # a node's local id: its row on its group
    ids = np.int32 if len(group) <= np.iinfo(np.int32).max else np.int64
    pieces: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(num_groups)]
    for start in range(0, len(src), EDGE_CHUNK):
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        gs = group[s]
        inside = np.flatnonzero(gs == group[d])
        s, d, gs = s[inside], d[inside], gs[inside]
        for g, at in key_groups(gs, num_groups):
            pieces[g].append((local[s[at]].astype(ids), local[d[at]].astype(ids)))
    del local
    for g in np.flatnonzero(sizes).tolist():
        edges, pieces[g] = pieces[g], []
        sub_src = np.concatenate([e[0] for e in edges]) if edges else np.empty(0, dtype=ids)
        sub_dst = np.concatenate([e[1] for e in edges]) if edges else np.empty(0, dtype=ids)
        del edges
        yield g, np.flatnonzero(group == g), sub_src, sub_dst


def two_level_partition(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int, split: int,
                        vertex_weights: np.ndarray, epsilon: float, partition: BlockPartition) -> np.ndarray:
    r"""A partition into ``num_parts`` parts: ``partition`` into ``split`` groups, then every group's
    induced subgraph into its :func:`parts_per_group` share, each level with imbalance
    :math:`\sqrt{1 + \epsilon} - 1` of the vertex weights.

    Args:
        src, dst: the graph's edges ``[E]`` (either orientation: partitioners symmetrise).
        num_nodes: :math:`n`.
        num_parts: :math:`k`.
        split: :math:`g`, the groups of the first level (``2 <= split < num_parts``).
        vertex_weights: ``[n]`` positive integers that both levels balance.
        epsilon: the imbalance :math:`\epsilon` allowed overall.
        partition: the block partitioner both levels call.

    Returns:
        ``int64[n]``, the part of every node; group :math:`i` holds consecutive parts.
    """
    check_split(split, num_parts)
    shares = parts_per_group(num_parts, split)
    level_epsilon = math.sqrt(1.0 + epsilon) - 1.0
    weights = np.asarray(vertex_weights, dtype=np.int64)
    caps = max_block_weights(int(weights.sum()), shares, num_parts, level_epsilon)
    group = np.asarray(partition(src, dst, num_nodes, caps, weights), dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(shares)])
    part = np.empty(num_nodes, dtype=np.int64)
    for g, nodes, sub_src, sub_dst in induced_subgraphs(src, dst, group, split):
        q = int(shares[g])
        sub_weights = weights[nodes]
        sub = np.zeros(len(nodes), dtype=np.int64)
        if q > 1:
            caps = max_block_weights(int(sub_weights.sum()), np.ones(q, dtype=np.int64), q, level_epsilon)
            sub = np.asarray(partition(sub_src, sub_dst, len(nodes), caps, sub_weights), dtype=np.int64)
        part[nodes] = first[g] + sub
    return part
