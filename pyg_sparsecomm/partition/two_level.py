r"""Two-level partitions: ``split`` groups first, then every group into its share of the parts.

A k-way partitioner's memory beyond its graph can grow with k (KaMinPar 3.7's: about 0.4 GB at
k = 2, 1.2 GB at 64 and 2.1 GB at 1024 on a 32M-edge graph; ``benchmarks/RESULTS.md``), so a
partition into many parts can need more memory than the machine has while one into fewer does.
Splitting first into :math:`g` groups, then partitioning each group's induced subgraph
(:math:`n/g` nodes) into its :math:`q_i` parts bounds the peak by the larger of a :math:`g`-way
call on the whole graph and a :math:`q_i`-way call on one group.  Group :math:`i` holds parts
:math:`[\sum_{j<i} q_j, \sum_{j \le i} q_j)` (consecutive ids: parts that share a group are
cut apart last, as on a machine's GPUs).

The first level gets the imbalance :math:`\epsilon' = \sqrt{1 + \epsilon} - 1`, so a group
weighs

.. math::
    w(V_i) \le (1 + \epsilon') \, w(V) \, q_i / k,

and the second whatever the overall bound :math:`(1 + \epsilon) w(V) / k` leaves a part of that
group: :math:`\epsilon_i = (1 + \epsilon) w(V) q_i / (k \, w(V_i)) - 1 \ge \epsilon'`, more for a
group that came out lighter.  A list ``split = [g_1, g_2, ...]`` adds levels: every group is split
again by :math:`[g_2, ...]` before the last level, the first level then getting
:math:`(1 + \epsilon)^{1/L} - 1` of :math:`L` levels.

Edges between groups are cut by the first level whatever the second does, so the second sees
only its group's induced subgraph (what recursive bisection does at every level).
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence

import numpy as np

from ..plan.homogeneous import id_dtype, owner_rows
from ..plan.sorted_keys import key_groups

#: ``(edges, num_nodes, max_block_weights, vertex_weights) -> part`` in ``[0, len(max_block_weights))``;
#: ``edges`` is the list ``[src, dst]``, which the partitioner may empty: a group's edges are then freed
#: once it has read them (arguments held by the caller would stay in memory until it returns)
BlockPartition = Callable[[list[np.ndarray], int, np.ndarray, np.ndarray], np.ndarray]
#: edges read at once while the induced subgraphs are written
EDGE_CHUNK = 1 << 22


def check_split(split: int | Sequence[int] | None, num_parts: int) -> tuple[int, ...] | None:
    """``split`` as a tuple of the groups of every level above the last (``None`` stays ``None``);
    raises unless it is an integer or a sequence of integers, each at least 2, the first below
    ``num_parts``."""
    if split is None:
        return None
    groups = tuple(split) if isinstance(split, (list, tuple)) else (split,)
    if not groups or any(isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 2 for g in groups) \
            or not groups[0] < num_parts:
        raise ValueError(f"split must be an integer from 2 to num_parts - 1 = {num_parts - 1} (the groups "
                         f"partitioned first, each then into its share of the parts), or a list of such "
                         f"integers, one per level above the last (e.g. [2, 2]: halves, then quarters, then "
                         f"each quarter into its parts), got {split!r}; leave split unset to partition into "
                         f"the {num_parts} parts at once")
    return tuple(int(g) for g in groups)


def parts_per_group(num_parts: int, split: int) -> np.ndarray:
    """:math:`q_i`, the parts of each of the ``split`` groups: ``num_parts`` dealt as evenly as
    possible (the first ``num_parts % split`` groups get one more)."""
    return np.full(split, num_parts // split, dtype=np.int64) + (np.arange(split) < num_parts % split)


def max_block_weights(total: int, shares: np.ndarray, num_parts: int, epsilon: float) -> np.ndarray:
    r"""Weight bounds :math:`\lceil (1 + \epsilon) \lceil w \, q_i / k \rceil \rceil` of blocks
    holding ``shares`` :math:`q_i` of ``num_parts`` :math:`k` parts of total weight :math:`w`."""
    ideal = -(-int(total) * shares // num_parts)  # exact integer ceil
    return np.ceil((1.0 + epsilon) * ideal).astype(np.int64)


def write_induced_edges(src: np.ndarray, dst: np.ndarray, group: np.ndarray, num_groups: int,
                        scratch: str) -> np.ndarray:
    """Appends every group's induced edges (both ends in it), in local ids (positions among the
    group's nodes in ascending order), to its files in the directory ``scratch``; returns the
    groups' sizes.  Reads the edges a chunk at a time: besides them, one chunk is in memory."""
    sizes, local = owner_rows(group, num_groups)  # a node's local id: its row on its group
    ids = id_dtype(len(group))
    for start in range(0, len(src), EDGE_CHUNK):
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        gs = group[s]
        inside = np.flatnonzero(gs == group[d])
        s, d, gs = s[inside], d[inside], gs[inside]
        for g, at in key_groups(gs, num_groups):
            for path, ends in zip(_edge_files(scratch, g), (s, d), strict=True):
                with open(path, "ab") as f:
                    f.write(local[ends[at]].astype(ids).tobytes())
    return sizes


def read_induced_edges(scratch: str, g: int, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Group ``g``'s induced edges from :func:`write_induced_edges`' files (deleted once read) of
    a graph of ``num_nodes`` nodes."""
    dtype = id_dtype(num_nodes)
    ends: list[np.ndarray] = [np.fromfile(path, dtype=dtype) if os.path.exists(path) else np.empty(0, dtype=dtype)
                              for path in _edge_files(scratch, g)]
    remove_induced_edges(scratch, g)
    return ends[0], ends[1]


def remove_induced_edges(scratch: str, g: int) -> None:
    """Deletes group ``g``'s files of :func:`write_induced_edges` (if it has any)."""
    for path in _edge_files(scratch, g):
        if os.path.exists(path):
            os.remove(path)


def _edge_files(scratch: str, g: int) -> tuple[str, str]:
    return os.path.join(scratch, f"{g}.src"), os.path.join(scratch, f"{g}.dst")


def _rest_epsilon(epsilon: float, total: int, num_parts: int, group_weight: int, share: int) -> float:
    r"""The imbalance left to the levels below for a group of weight :math:`w_g` holding
    :math:`q` of :math:`k` parts: its parts may weigh what the overall bound
    :math:`(1 + \epsilon) w / k` allows, so :math:`\epsilon_g = (1 + \epsilon) w q / (k w_g) - 1`
    (at least :math:`(1 + \epsilon)^{(L-1)/L} - 1` when the level above kept its bound; more when
    the group came out lighter).  Never below 0.1 %, for a group heavier than its bound."""
    return max((1.0 + epsilon) * total * share / (num_parts * max(group_weight, 1)) - 1.0, 1e-3)


def two_level_partition(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int,
                        split: int | Sequence[int], vertex_weights: np.ndarray, epsilon: float,
                        partition: BlockPartition) -> np.ndarray:
    r"""A partition into ``num_parts`` parts: ``split`` groups, then every group's induced subgraph
    into its :func:`parts_per_group` share; ``split`` a list :math:`[g_1, g_2, \dots]`: :math:`g_1`
    groups, then every group the same way with :math:`[g_2, \dots]` (directly into its share once
    the list is used up or the share is at most the next :math:`g`).

    The first of the :math:`L` levels (``len(split) + 1``) gets the imbalance
    :math:`(1 + \epsilon)^{1/L} - 1` of the vertex weights (two levels: :math:`\sqrt{1 + \epsilon} - 1`),
    and every group the rest of the overall bound its weight leaves (:func:`_rest_epsilon`), so a
    part never weighs more than :math:`(1 + \epsilon) w / k` (up to rounding) and a group that came
    out lighter gives its parts more room.
    The groups' induced edges go through scratch files, so a level holds one group's edges, not
    the levels' above it.

    Args:
        src (np.ndarray): the graph's edges' sources ``[E]`` (either orientation: partitioners symmetrise).
        dst (np.ndarray): the edges' targets ``[E]``.
        num_nodes (int): :math:`n`.
        num_parts (int): :math:`k`.
        split (int or Sequence[int]): :math:`g`, the groups of the first level (``2 <= split < num_parts``), or the
            groups of every level above the last.
        vertex_weights (np.ndarray): ``[n]`` positive integers that every level balances.
        epsilon (float): the imbalance :math:`\epsilon` allowed overall.
        partition (BlockPartition): the block partitioner every level calls.

    Returns:
        ``int64[n]``, the part of every node; group :math:`i` holds consecutive parts.
    """
    return _levels([src, dst], num_nodes, num_parts, split, vertex_weights, epsilon, partition)


def _levels(edges: list[np.ndarray], num_nodes: int, num_parts: int, split: int | Sequence[int],
            vertex_weights: np.ndarray, epsilon: float, partition: BlockPartition) -> np.ndarray:
    """:func:`two_level_partition` of the edges ``[src, dst]`` (the list emptied: a group's edges
    are freed once its induced subgraphs are written)."""
    src, dst = edges
    edges.clear()
    groups = check_split(split, num_parts)
    assert groups is not None
    split, below = groups[0], groups[1:]
    shares = parts_per_group(num_parts, split)
    depth = len(groups) + 1
    level_epsilon = (1.0 + epsilon) ** (1.0 / depth) - 1.0
    weights = np.asarray(vertex_weights, dtype=np.int64)
    total = int(weights.sum())
    caps = max_block_weights(total, shares, num_parts, level_epsilon)
    group = np.asarray(partition([src, dst], num_nodes, caps, weights)).astype(np.int32)
    first = np.concatenate([[0], np.cumsum(shares)])
    part = np.empty(num_nodes, dtype=np.int64)
    with tempfile.TemporaryDirectory(prefix="pyg_sparsecomm_groups_") as scratch:
        sizes = write_induced_edges(src, dst, group, split, scratch)
        del src, dst  # a group's edges are read back when its turn comes; the caller may hold these
        for g in np.flatnonzero(sizes).tolist():
            nodes = np.flatnonzero(group == g)
            q, sub_weights = int(shares[g]), weights[nodes]
            rest_epsilon = _rest_epsilon(epsilon, total, num_parts, int(sub_weights.sum()), q)
            if q == 1:
                remove_induced_edges(scratch, g)
                part[nodes] = first[g]
            elif below and q > below[0]:  # the edges go to the callee in a list it empties: freed once read
                part[nodes] = first[g] + _levels(list(read_induced_edges(scratch, g, num_nodes)), len(nodes), q,
                                                 below, sub_weights, rest_epsilon, partition)
            else:
                caps = max_block_weights(int(sub_weights.sum()), np.ones(q, dtype=np.int64), q, rest_epsilon)
                part[nodes] = first[g] + np.asarray(partition(list(read_induced_edges(scratch, g, num_nodes)),
                                                              len(nodes), caps, sub_weights), dtype=np.int64)
    return part
