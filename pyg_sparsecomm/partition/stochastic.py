"""Stochastic hypergraph model for mini-batch training (VLDB'23 §4.3.3, Algorithm 3).

A mini-batch is a sampled subgraph; its column-net hypergraph (a net per used
column ``j`` holding ``j`` and every sampled row ``i`` with an edge
``j -> i``) encodes the volume of that batch's exchange.  Merging the nets of
``b`` random batches and partitioning the merged hypergraph for km1 minimises
the *expected* volume of a random mini-batch.  By Hoeffding's inequality the
mean connectivity of the merged nets is within ``θ`` of the expected
connectivity with probability ``1 - δ`` once there are
``|N| >= (P - 1)^2 / (2 θ^2) · ln(2 / δ)`` nets (the paper's eq. (14)).
"""
import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from .hypergraph import column_net_pins, drop_single_pin_nets, km1, run_backend
from .methods import register, row_nnz

# A sampler maps (src, dst, num_nodes, rng) to the mask of the edges one mini-batch uses.
Sampler = Callable[[np.ndarray, np.ndarray, int, np.random.Generator], np.ndarray]


def hoeffding_num_nets(num_parts: int, theta: float, delta: float) -> int:
    """Smallest number of nets for an estimate of the expected connectivity within ``theta``
    at confidence ``1 - delta`` (VLDB'23 eq. (14))."""
    if not (theta > 0 and 0 < delta < 1):
        raise ValueError("need theta > 0 and 0 < delta < 1")
    return math.ceil((num_parts - 1) ** 2 / (2 * theta ** 2) * math.log(2 / delta))


def node_sampler(batch_size: int) -> Sampler:
    """Uniform batches of target nodes with all their in-edges (one aggregation)."""
    def sample(src, dst, num_nodes, rng):
        batch = np.zeros(num_nodes, dtype=bool)
        batch[rng.choice(num_nodes, size=min(batch_size, num_nodes), replace=False)] = True
        return batch[dst]
    return sample


def neighbor_sampler(batch_size: int, fanouts: Sequence[int]) -> Sampler:
    """``NeighborLoader``-style sampling: uniform seed nodes, then for every hop at most
    ``fanouts[h]`` random in-edges of each frontier node; the batch uses all sampled edges."""
    def sample(src, dst, num_nodes, rng):
        frontier = np.zeros(num_nodes, dtype=bool)
        frontier[rng.choice(num_nodes, size=min(batch_size, num_nodes), replace=False)] = True
        used = np.zeros(src.size, dtype=bool)
        for fanout in fanouts:
            cand = np.flatnonzero(frontier[dst] & ~used)
            order = cand[np.lexsort((rng.random(cand.size), dst[cand]))]  # random order per target
            d = dst[order]
            rank = np.arange(d.size) - np.searchsorted(d, d)
            picked = order[rank < fanout] if fanout >= 0 else order
            used[picked] = True
            frontier = np.zeros(num_nodes, dtype=bool)
            frontier[src[picked]] = True
        return used
    return sample


def stochastic_nets(edge_index: Tensor, num_nodes: int, sampler: Sampler, num_batches: int,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Merged nets of ``num_batches`` sampled mini-batches as CSR ``(net_ptr, pins)``.

    Nets of a single pin are kept (they count in the estimate, with connectivity 1).
    """
    src, dst = edge_index.numpy()
    rng = np.random.default_rng(seed)
    ptrs, all_pins = [np.zeros(1, dtype=np.int64)], []
    offset = 0
    for _ in range(num_batches):
        used = sampler(src, dst, num_nodes, rng)
        batch_src = src[used]  # the batch reads these columns only: they get its nets
        net, pin = column_net_pins(batch_src, dst[used], num_nodes, columns=np.unique(batch_src))
        counts = np.unique(net, return_counts=True)[1]
        ptrs.append(offset + np.cumsum(counts))
        offset += pin.size
        all_pins.append(pin)
    return np.concatenate(ptrs), np.concatenate(all_pins) if all_pins else np.zeros(0, np.int64)


def expected_minibatch_volume(edge_index: Tensor, num_nodes: int, part: Tensor, sampler: Sampler,
                              num_batches: int = 32, seed: int = 1) -> float:
    """Mean rows moved per mini-batch SpMM under ``part``, over ``num_batches`` random batches."""
    net_ptr, pins = stochastic_nets(edge_index, num_nodes, sampler, num_batches, seed)
    if net_ptr.size == 1:
        return 0.0
    return km1(net_ptr, pins, part.numpy().astype(np.int64)) / num_batches


@register("stochastic_hypergraph")
def stochastic_hypergraph_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int,
                                    batch_size: int = 1024, fanouts: Sequence[int] | None = None,
                                    num_batches: int | None = None, theta: float = 0.5,
                                    delta: float = 0.05, coverage: float = 8.0, max_batches: int = 256,
                                    epsilon: float = 0.03,
                                    backend: str = "mtkahypar", preset: str = "deterministic") -> Tensor:
    """Partitions the merged hypergraph of sampled mini-batches for km1.

    Args:
        batch_size: seed nodes per mini-batch.
        fanouts: neighbours sampled per hop (``NeighborLoader`` style); ``None``
            samples nodes with all their in-edges.
        num_batches: mini-batches to merge.  By default enough for every vertex to be
            a seed ``coverage`` times on average (a vertex in no net gives the
            partitioner nothing to optimise), grown until the merged nets satisfy
            Hoeffding's bound for ``theta``/``delta``; at most ``max_batches``.
            ``coverage=8`` because the expected volume is estimated from sampled
            edges: with 2 (about 13 % of the in-edges never sampled) SHP trailed HP
            and METIS on Cora/CiteSeer node sampling; with 8 it has the lowest
            expected volume in 7 of the 8 cases of ``benchmarks/minibatch_volume.py``
            (3 % above HP in the other) for 0.4-4 s of partitioning.
    """
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    sampler = node_sampler(batch_size) if fanouts is None else neighbor_sampler(batch_size, fanouts)
    if num_batches is None:
        # Coverage: every vertex should appear in ~`coverage` batches, or the partitioner has
        # nothing to go on for it; then grow until Hoeffding's bound on the nets is met.
        batches = min(max_batches, max(1, math.ceil(coverage * num_nodes / batch_size)))
        needed = hoeffding_num_nets(num_parts, theta, delta)
        while True:
            net_ptr, pins = stochastic_nets(edge_index, num_nodes, sampler, batches, seed)
            if net_ptr.size - 1 >= needed:
                break
            if batches >= max_batches:
                warnings.warn(f"stochastic_hypergraph: {max_batches} mini-batches (max_batches) give "
                              f"{net_ptr.size - 1} nets, fewer than the {needed} Hoeffding's bound needs for "
                              f"theta={theta}, delta={delta} at P={num_parts}; raise max_batches or theta",
                              stacklevel=2)
                break
            batches = min(2 * batches, max_batches)
    else:
        net_ptr, pins = stochastic_nets(edge_index, num_nodes, sampler, num_batches, seed)
    net_ptr, pins = drop_single_pin_nets(net_ptr, pins)
    part = run_backend(net_ptr, pins, row_nnz(edge_index, num_nodes), num_nodes, num_parts, epsilon, seed,
                       backend, preset)
    return torch.from_numpy(part)
