r"""How mini-batches are drawn: the rules both the distributed loaders and the stochastic
hypergraph partitioner follow, and a single-process reference of them.

Every random choice is a function of global ids (:mod:`.randomness`), so a batch is the
same whichever rank draws it and whatever the partition:

* **batches of seeds** -- node ``v`` of the input set falls in batch
  :math:`\lfloor u(s, e, v) \cdot B \rfloor` of the :math:`B = \lceil n_{in} / b \rceil`
  batches of an epoch (``b`` = ``batch_size``, ``e`` the epoch), so a batch holds ``b`` seeds on
  average and each rank finds its own seeds without talking; without ``shuffle`` (PyG's
  ``shuffle=False``) batch ``k`` holds the seeds at positions :math:`[kb, (k + 1)b)` of the
  ascending seed list, in order, as PyG's loader cuts ``input_nodes`` (layer-wise inference
  concatenates the batches' seed rows and gets the rows in order);
* **neighbours** (:class:`NeighborSampling`) -- at hop ``h`` every node first reached at
  hop ``h - 1`` keeps ``num_neighbors[h - 1]`` of its in-edges (all of them for ``-1``),
  uniformly without replacement as PyG's ``NeighborLoader``, drawn by Floyd's algorithm from
  hashes of its global id under the key of :math:`(s, e, \text{batch})`
  (:mod:`.in_edge_sample`: O(fanout) per node, whatever its in-degree); its owner holds those
  in-edges;
* **node subsets** (:class:`NodeSubsetSampling`, the sampling of VLDB'23 Fig. 5) -- the
  batch is a uniformly random set of about ``batch_size`` nodes and the subgraph it induces;
  the rows scored are its members in the input set.

Nodes of a neighbour batch are ordered by (hop, global id), so the seeds come first and the
nodes of the last hops are a suffix (PyG's ``trim_to_layer`` layout); in a node-subset batch
the seeds come first, then the other members.
"""
import math
import operator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .in_edge_sample import sample_in_edges
from .randomness import bucket, stream_key, uniform_tensor

_BATCHES, _EDGES = 1, 2  # stream names


@dataclass(frozen=True)
class _Batching:
    batch_size: int
    shuffle: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")

    def num_batches(self, num_inputs: int) -> int:
        """Batches per epoch for ``num_inputs`` candidate nodes (seeds or members)."""
        return max(1, math.ceil(num_inputs / self.batch_size))

    def batch_of(self, epoch: int, node_ids: Tensor, num_batches: int) -> Tensor:
        """The batch of every node of ``node_ids`` (global ids) in ``epoch``."""
        key = stream_key(self.seed, _BATCHES, epoch if self.shuffle else 0)
        return bucket(key, node_ids, num_batches)


@dataclass(frozen=True)
class NeighborSampling(_Batching):
    r"""Seeds in batches of ``batch_size`` (on average), ``num_neighbors[h]`` sampled in-edges per
    node at hop ``h + 1`` (``-1``: all), as PyG's ``NeighborLoader``.

    Without ``shuffle`` the seeds (all ranks', ascending) are cut in order into runs of
    ``batch_size``, as PyG's ``shuffle=False``.  With ``drop_last`` and ``shuffle`` every batch
    holds exactly ``batch_size`` seeds over all ranks, as PyG's ``drop_last=True`` batches do: the
    :math:`n` seeds are put in the random order of :math:`u(s, e, v)` (ties by id) and cut into
    :math:`\lfloor n / b \rfloor` runs of ``batch_size``; the last :math:`n \bmod b` seeds of the
    order are not drawn that epoch.  Every rank needs the whole seed set for both (the loaders
    gather it once).

    Args:
        batch_size (int): seeds per batch (on average; exactly with ``drop_last``).
        shuffle (bool, optional): draw new batches every epoch. (default: :obj:`True`)
        seed (int, optional): the random stream of batches and draws. (default: :obj:`0`)
        num_neighbors (tuple[int, ...], optional): fanout per hop (``-1``: all in-edges).
            (default: :obj:`(10, 5)`)
        drop_last (bool, optional): batches of exactly ``batch_size`` seeds, the rest not drawn that
            epoch. (default: :obj:`False`)
    """
    num_neighbors: tuple[int, ...] = (10, 5)
    drop_last: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        fanouts = tuple(self.num_neighbors)
        if any(isinstance(k, bool) or not _is_integer(k) for k in fanouts):
            raise ValueError(f"num_neighbors must be integer fanouts (-1: all in-edges), got {list(fanouts)}: "
                             f"a fanout is a number of in-edges, e.g. [10, 5]")
        object.__setattr__(self, "num_neighbors", tuple(operator.index(k) for k in fanouts))
        if not self.num_neighbors or any(k < -1 or k == 0 for k in self.num_neighbors):
            raise ValueError(f"num_neighbors must be a non-empty list of positive fanouts or -1 (all), "
                             f"got {list(self.num_neighbors)}")

    @property
    def num_hops(self) -> int:
        return len(self.num_neighbors)

    def num_batches(self, num_inputs: int) -> int:
        """Batches per epoch: ``num_inputs // batch_size`` with ``drop_last`` (0 for fewer seeds than
        ``batch_size``, as PyG), else ``ceil(num_inputs / batch_size)`` (at least 1)."""
        return num_inputs // self.batch_size if self.drop_last else super().num_batches(num_inputs)

    def batch_of(self, epoch: int, node_ids: Tensor, num_batches: int, seeds: Tensor | None = None) -> Tensor:
        """The batch of every seed of ``node_ids`` (global ids) in ``epoch``; with ``drop_last``, ``-1``
        for the seeds not drawn.  ``seeds`` (the sorted global ids of all ranks' seeds, which
        ``node_ids`` must be among) is required with ``drop_last`` or without ``shuffle``."""
        if not self.shuffle:
            return self._in_order(node_ids, num_batches, seeds)
        if not self.drop_last:
            return super().batch_of(epoch, node_ids, num_batches)
        if seeds is None:
            raise ValueError("NeighborSampling(drop_last=True).batch_of needs the whole seed set (seeds=)")
        key = stream_key(self.seed, _BATCHES, epoch if self.shuffle else 0)
        seeds = seeds.to(node_ids.device)
        order = torch.argsort(uniform_tensor(key, seeds), stable=True)  # stable: ties by id (seeds are sorted)
        position = torch.empty_like(order).index_copy_(0, order, torch.arange(order.numel(), device=order.device))
        batch = (position // self.batch_size).masked_fill_(position >= num_batches * self.batch_size, -1)
        return batch.index_select(0, torch.searchsorted(seeds, node_ids))

    def _in_order(self, node_ids: Tensor, num_batches: int, seeds: Tensor | None) -> Tensor:
        """PyG's ``shuffle=False``: batch ``b`` holds the seeds at positions ``b * batch_size ..`` of the
        ascending seed list (``-1`` past the last full batch with ``drop_last``)."""
        if seeds is None:
            raise ValueError("NeighborSampling(shuffle=False).batch_of needs the whole seed set (seeds=)")
        position = torch.searchsorted(seeds.to(node_ids.device), node_ids)
        batch = torch.div(position, self.batch_size, rounding_mode="floor")
        return batch.masked_fill_(batch >= num_batches, -1)

    def draw(self, epoch: int, batch: int, hop: int) -> tuple[np.uint64, int]:
        """``(key, fanout)`` of the in-edges drawn at ``hop`` (1-based) of ``batch``
        (:func:`~.in_edge_sample.sample_in_edges`): every node draws under the batch's key."""
        return stream_key(self.seed, _EDGES, epoch, batch), self.num_neighbors[hop - 1]


def _is_integer(value: object) -> bool:
    """An int, a NumPy integer or an integer 0-d tensor (not a float, even a whole one)."""
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


@dataclass(frozen=True)
class NodeSubsetSampling(_Batching):
    """A uniformly random set of about ``batch_size`` nodes per batch (every node in exactly one
    batch per epoch) and the subgraph it induces.

    Args:
        batch_size (int): nodes per batch, on average.
        shuffle (bool, optional): draw new batches every epoch. (default: :obj:`True`)
        seed (int, optional): the random stream of batches. (default: :obj:`0`)
    """


class GlobalBatch(NamedTuple):
    """One batch of the whole graph (the single-process reference).

    Attributes:
        n_id (torch.Tensor): ``[n]`` global node ids in batch order (seeds first).
        num_seeds (int): seeds (rows to score) at the front of ``n_id``.
        num_sampled_nodes (list[int]): nodes per hop (neighbour batches; ``None`` for node subsets).
        e_id (torch.Tensor): ``[m]`` global ids of the batch's edges, ordered by hop (then target, source).
        num_sampled_edges (list[int]): edges per hop (neighbour batches; ``None`` for node subsets).
    """
    n_id: Tensor
    num_seeds: int
    num_sampled_nodes: list[int] | None
    e_id: Tensor
    num_sampled_edges: list[int] | None


def global_batches(edge_index: Tensor, num_nodes: int, sampling: NeighborSampling | NodeSubsetSampling,
                   input_nodes: Tensor | None = None, epoch: int = 0) -> list[GlobalBatch]:
    r"""Every non-empty batch of ``epoch`` on the whole graph, in one process, by the rules the
    distributed loaders follow (they yield the same batches, split over the ranks).

    Args:
        edge_index (torch.Tensor): ``[2, E]`` global edges (sources first).
        num_nodes (int): ``N``.
        sampling (NeighborSampling or NodeSubsetSampling): the batch rule.
        input_nodes (torch.Tensor, optional): bool mask or index of the seed candidates (default: every node).
        epoch (int, optional): the epoch (matters when ``sampling.shuffle``; neighbour draws always depend on it).
            (default: :obj:`0`)

    Shapes:
        - **input:** edge indices :math:`(2, |\mathcal{E}|)`, seed candidates
          :math:`(|\mathcal{V}|)` (mask) or :math:`(|\mathcal{S}|)` (index) *(optional)*
        - **output:** per batch ``n_id`` :math:`(|\mathcal{V}_b|)` and ``e_id`` :math:`(|\mathcal{E}_b|)`
    """
    inputs = _input_mask(input_nodes, num_nodes)
    src, dst = edge_index.cpu().numpy()
    if isinstance(sampling, NodeSubsetSampling):
        nb = sampling.num_batches(num_nodes)
        member_batch = sampling.batch_of(epoch, torch.arange(num_nodes), nb).numpy()
        batches = [_subset_batch(b, member_batch, inputs, src, dst) for b in range(nb)]
    else:
        nb = sampling.num_batches(int(inputs.sum()))
        seeds = np.flatnonzero(inputs)
        seed_batch = sampling.batch_of(epoch, torch.from_numpy(seeds), nb, torch.from_numpy(seeds)).numpy()
        graph = global_in_edges(src, dst, num_nodes)
        batches = [_neighbor_batch(sampling, epoch, b, seeds[seed_batch == b], src, dst, graph, num_nodes)
                   for b in range(nb)]
    return [b for b in batches if b.num_seeds > 0]


def _input_mask(input_nodes: Tensor | None, num_nodes: int) -> np.ndarray:
    if input_nodes is None:
        return np.ones(num_nodes, dtype=bool)
    if input_nodes.dtype == torch.bool:
        return input_nodes.cpu().numpy()
    mask = np.zeros(num_nodes, dtype=bool)
    mask[input_nodes.cpu().numpy()] = True
    return mask


def _subset_batch(b: int, member_batch: np.ndarray, inputs: np.ndarray, src: np.ndarray,
                  dst: np.ndarray) -> GlobalBatch:
    member = member_batch == b
    nodes = np.flatnonzero(member)
    nodes = nodes[np.lexsort((nodes, ~inputs[nodes]))]  # seeds first, then by id
    e_id = np.flatnonzero(member[src] & member[dst])
    e_id = e_id[np.lexsort((src[e_id], dst[e_id]))]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    return GlobalBatch(t(nodes), int(inputs[nodes].sum()), None, t(e_id), None)


def global_in_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[Tensor, Tensor]:
    """``(rowptr, order)`` of the whole graph's in-edges: edge ids by (target, source, edge id)
    (the canonical order of :mod:`.in_edge_sample`, sorted here on its own)."""
    order = np.lexsort((np.arange(dst.size), src, dst))
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=num_nodes))])
    return torch.from_numpy(rowptr.astype(np.int64)), torch.from_numpy(order.astype(np.int64))


def sampled_edges(key: np.uint64, fanout: int, graph: tuple[Tensor, Tensor], frontier: np.ndarray,
                  src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Global ids of the in-edges the ``frontier`` nodes keep, ordered by (target, source, id)."""
    nodes = torch.from_numpy(frontier.astype(np.int64))
    e = sample_in_edges(key, fanout, graph[0], graph[1], nodes, nodes).numpy()
    return e[np.lexsort((e, src[e], dst[e]))]


def _neighbor_batch(sampling: NeighborSampling, epoch: int, b: int, seeds: np.ndarray, src: np.ndarray,
                    dst: np.ndarray, graph: tuple[Tensor, Tensor], num_nodes: int) -> GlobalBatch:
    hop = np.full(num_nodes, -1, dtype=np.int64)
    hop[seeds] = 0
    frontier, picked_edges, edge_counts = seeds, [], []
    for h in range(1, sampling.num_hops + 1):
        e = sampled_edges(*sampling.draw(epoch, b, h), graph, frontier, src, dst)
        picked_edges.append(e)
        edge_counts.append(e.size)
        new = np.unique(src[e])
        new = new[hop[new] < 0]
        hop[new] = h
        frontier = new
    nodes = np.flatnonzero(hop >= 0)
    nodes = nodes[np.lexsort((nodes, hop[nodes]))]
    node_counts = np.bincount(hop[nodes], minlength=sampling.num_hops + 1).tolist()
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    return GlobalBatch(t(nodes), int(seeds.size), node_counts, t(np.concatenate(picked_edges)), edge_counts)
