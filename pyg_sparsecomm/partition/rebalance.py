r"""Every part within its weight bound: a cheap pass after a partitioner that may overshoot it.

KaMinPar balances by heuristics (with several threads its result depends on their timing), and a
two-level partition rounds at every level, so a part can come out a few nodes above the bound
:math:`\lceil (1 + \epsilon) \lceil w / k \rceil \rceil` the package documents (issue 55: 1,038
against 1,024 on an R-MAT graph into 16 parts).  :func:`enforce_block_weights` moves nodes out
of every part above its bound until none is:

1. **boundary moves**: a node of an overweight part with neighbours in parts that have room goes
   to the one of those holding most of its neighbours, the nodes that cut the fewest edges by
   moving (neighbours there minus neighbours at home) first, while its part is over and the
   target has room for it;
2. **any node** (a part still over: no boundary node left that fits): the part's lightest nodes
   go to the part with the most room, as long as one holds them.

Only a node heavier than every other part's room can leave a part over its bound (a warning says
so).  Free when every part is within its bound (one ``bincount``); else one pass over the edges in
chunks, holding the (node, neighbour's part) pairs of the overweight parts' nodes.  Deterministic.
"""
from __future__ import annotations

import warnings

import numpy as np

from ._sorting import run_starts, stable_sort
from .two_level import EDGE_CHUNK, max_block_weights

#: rounds of boundary moves at most (each one pass over the edges) before any node may move
BOUNDARY_ROUNDS = 3


def enforce_balance(src: np.ndarray, dst: np.ndarray, part: np.ndarray, vertex_weights: np.ndarray | None,
                    num_parts: int, epsilon: float) -> np.ndarray:
    r""":func:`enforce_block_weights` with every one of the ``num_parts`` :math:`k` parts bounded by
    :math:`\lceil (1 + \epsilon) \lceil w / k \rceil \rceil` (:math:`w`: the total weight)."""
    weights = np.ones(len(part), dtype=np.int64) if vertex_weights is None else vertex_weights
    total = int(np.sum(weights, dtype=np.int64))
    return enforce_block_weights(src, dst, part, weights,
                                 max_block_weights(total, np.ones(num_parts, dtype=np.int64), num_parts, epsilon))


def enforce_block_weights(src: np.ndarray, dst: np.ndarray, part: np.ndarray,
                          vertex_weights: np.ndarray | None, max_block_weights: np.ndarray) -> np.ndarray:
    """``part``, or a copy with nodes moved out of the parts heavier than ``max_block_weights``
    until none is (see the module's docstring for which nodes move where).

    Args:
        src (np.ndarray): the graph's edges' sources ``[E]`` (either orientation: both ends count as neighbours).
        dst (np.ndarray): the edges' targets ``[E]``.
        part (np.ndarray): ``[n]`` the part of every node, in ``[0, k)``.
        vertex_weights (np.ndarray or None): ``[n]`` non-negative integers (``None``: unit weights).
        max_block_weights (np.ndarray): ``[k]`` the largest weight every part may have.

    Returns:
        ``int64[n]``, every part within its bound unless a node fits no other part's room.
    """
    part = np.asarray(part, dtype=np.int64)
    bounds = np.asarray(max_block_weights, dtype=np.int64)
    weights = np.ones(len(part), dtype=np.int64) if vertex_weights is None else \
        np.asarray(vertex_weights, dtype=np.int64)
    loads = np.bincount(part, weights=weights, minlength=len(bounds)).astype(np.int64)
    if (loads <= bounds).all():
        return part
    part = part.copy()
    for _ in range(BOUNDARY_ROUNDS):  # a round's targets may fill up: the next finds others
        node, target = boundary_moves(src, dst, part, loads, bounds)
        if not _take_moves(part, loads, bounds, weights, node, target):
            break
    for a in np.flatnonzero(loads > bounds).tolist():
        _move_lightest(part, loads, bounds, weights, a)
    over = np.flatnonzero(loads > bounds)
    if len(over):
        warnings.warn(f"parts {over.tolist()} weigh {loads[over].tolist()}, above their bounds "
                      f"{bounds[over].tolist()}: none of their nodes fits in another part's room", stacklevel=2)
    return part


def boundary_moves(src: np.ndarray, dst: np.ndarray, part: np.ndarray, loads: np.ndarray,
                   bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The boundary moves of the overweight parts' nodes, best first: ``(node, target part)``, the
    target the part with room holding most of the node's neighbours (ties: the lower part), best =
    fewest cut edges added (neighbours at home minus neighbours in the target; ties: lower id)."""
    k = len(bounds)
    over, room = loads > bounds, loads < bounds
    keys = []
    for start in range(0, len(src), EDGE_CHUNK):
        s, d = src[start:start + EDGE_CHUNK], dst[start:start + EDGE_CHUNK]
        for a, b in ((s, d), (d, s)):
            mine = over[part[a]] & (a != b)
            keys.append(a[mine].astype(np.int64) * k + part[b[mine]])
    if not keys:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    key = stable_sort(np.concatenate(keys))[0]
    starts = run_starts(key)[:len(key)]  # an empty key array has no run
    count = np.diff(np.r_[starts, len(key)])
    node, where = key[starts] // k, key[starts] % k
    home = np.zeros(len(part), dtype=np.int64)
    at_home = where == part[node]
    home[node[at_home]] = count[at_home]
    fits = ~at_home & room[where]
    node, where, count = node[fits], where[fits], count[fits]
    best = np.lexsort((where, -count, node))  # per node: most neighbours, then the lower part
    first = best[np.r_[True, node[best][1:] != node[best][:-1]]] if len(best) else best
    node, where, count = node[first], where[first], count[first]
    order = np.lexsort((node, home[node] - count))
    return node[order], where[order]


def _take_moves(part: np.ndarray, loads: np.ndarray, bounds: np.ndarray, weights: np.ndarray,
                node: np.ndarray, target: np.ndarray) -> bool:
    """Applies the moves in order (``part`` and ``loads`` in place), each only while its node's
    part is over and the target has room for it; returns whether another round may help: a node
    moved and a part is still over."""
    over, moved = int((loads > bounds).sum()), False
    for v, b in zip(node.tolist(), target.tolist(), strict=True):
        a, w = int(part[v]), int(weights[v])
        if loads[a] <= bounds[a] or loads[b] + w > bounds[b] or w == 0:
            continue
        part[v], loads[a], loads[b], moved = b, loads[a] - w, loads[b] + w, True
        if loads[a] <= bounds[a]:
            over -= 1
            if not over:
                return False
    return moved


def _move_lightest(part: np.ndarray, loads: np.ndarray, bounds: np.ndarray, weights: np.ndarray, a: int) -> None:
    """Moves part ``a``'s lightest nodes, one at a time, to the part with the most room, until
    ``a`` is within its bound or the roomiest part cannot hold the next one."""
    members = np.flatnonzero(part == a)
    for v in members[np.argsort(weights[members], kind="stable")].tolist():
        if loads[a] <= bounds[a]:
            return
        room = bounds - loads
        room[a] = np.iinfo(np.int64).min
        b, w = int(np.argmax(room)), int(weights[v])
        if w == 0:
            continue  # moves nothing
        if room[b] < w:
            return
        part[v], loads[a], loads[b] = b, loads[a] - w, loads[b] + w
