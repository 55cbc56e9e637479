r"""Stochastic hypergraph model for mini-batch training (VLDB'23 §4.3.3, Algorithm 3).

A mini-batch is a sampled subgraph; one layer's exchange for it moves the rows of the
column-net hypergraph of its edges: a net per column ``j`` the batch reads, holding ``j``
and every batch row ``i`` with a batch edge ``j -> i``, so the batch's volume is the km1 of
those nets (exactly what the distributed loaders' per-batch plans move).  Merging the nets
of many batches and partitioning the merged hypergraph for km1 minimises the *expected*
volume of a batch (eq. (12)-(13)).

The batches are those the loaders train: :func:`~pyg_sparsecomm.loader.global_batches`
with the loader's rule (:class:`~pyg_sparsecomm.loader.NeighborSampling` or
:class:`~pyg_sparsecomm.loader.NodeSubsetSampling`, the same ``batch_size``, ``shuffle`` and
``seed``) and its seed candidates (``input_nodes``), epoch after epoch from epoch 0.  By
Hoeffding's inequality the mean connectivity of the merged nets is within ``θ`` of its
expectation with probability at least ``1 - δ`` once there are
``|N| >= (P - 1)^2 / (2 θ^2) · ln(2 / δ)`` nets (eq. (14)).
"""
import math
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..sampling.rules import NeighborSampling, NodeSubsetSampling, global_batches
from .hypergraph import column_net_pins, drop_single_pin_nets, km1, merge_identical_nets, run_backend
from .methods import register, row_nnz

Sampling = NeighborSampling | NodeSubsetSampling

#: First epoch :func:`expected_minibatch_volume` draws by default: far from the epochs
#: (0, 1, ...) the partitioner's sample merges, so the estimate is held out.
HELD_OUT_EPOCH = 1_000_000


def hoeffding_num_nets(num_parts: int, theta: float, delta: float) -> int:
    """Smallest number of nets for an estimate of the expected connectivity within ``theta``
    at confidence ``1 - delta`` (VLDB'23 eq. (14))."""
    if not (theta > 0 and 0 < delta < 1):
        raise ValueError(f"need theta > 0 and 0 < delta < 1, got theta={theta!r}, delta={delta!r}")
    return math.ceil((num_parts - 1) ** 2 / (2 * theta ** 2) * math.log(2 / delta))


def sampling_spec(sampling: Sampling | None = None, batch_size: int | None = None,
                  fanouts: Sequence[int] | None = None) -> Sampling:
    """The batch rule: ``sampling`` itself, or the shorthand ``batch_size``/``fanouts``.

    ``fanouts=[10, 5]`` is ``NeighborSampling(batch_size=batch_size, num_neighbors=(10, 5))``
    (``DistributedNeighborLoader``'s rule; ``fanouts=[-1]``: every in-edge of the seeds, one
    hop); no ``fanouts`` is ``NodeSubsetSampling(batch_size=batch_size)``, a random set of
    about ``batch_size`` nodes and the subgraph it induces (``DistributedNodeSubsetLoader``'s
    rule).  Both shuffle with seed 0, the spec's defaults; ``batch_size`` defaults to 1024.
    """
    if sampling is not None:
        if batch_size is not None or fanouts is not None:
            raise ValueError("give either sampling=NeighborSampling(...)/NodeSubsetSampling(...) or the shorthand "
                             "batch_size=/fanouts=, not both")
        if not isinstance(sampling, (NeighborSampling, NodeSubsetSampling)):
            raise TypeError(f"sampling must be a pyg_sparsecomm.loader.NeighborSampling or NodeSubsetSampling "
                            f"(the loader's batch rule), got {type(sampling).__name__}")
        return sampling
    batch_size = 1024 if batch_size is None else batch_size
    if fanouts is None:
        return NodeSubsetSampling(batch_size=batch_size)
    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence):
        raise ValueError(f"fanouts must be a list of fanouts per hop (e.g. [10, 5]), got {fanouts!r}")
    return NeighborSampling(batch_size=batch_size, num_neighbors=tuple(fanouts))


def batch_nets(src: np.ndarray, dst: np.ndarray, e_id: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The column nets of one batch's edges ``e_id`` (of the graph ``src -> dst``) as CSR
    ``(net_ptr, pins)``: a net per source column ``j`` with pins ``j`` and the targets of the
    batch edges reading ``j``; their km1 is the rows one layer's exchange moves for the batch."""
    batch_src = src[e_id]
    net_of_pin, pins = column_net_pins(batch_src, dst[e_id], num_nodes, columns=np.unique(batch_src))
    starts = np.flatnonzero(np.diff(net_of_pin, prepend=-1))
    return np.append(starts, net_of_pin.size).astype(np.int64), pins.astype(np.int64)


class StochasticNets(NamedTuple):
    """The merged nets of the batches drawn, as CSR ``(net_ptr, pins)`` (one-pin nets included)."""
    net_ptr: np.ndarray
    pins: np.ndarray
    num_batches: int  # batches merged
    num_epochs: int   # complete epochs among them
    num_edges: int    # sampled edges in them, with repeats


def stochastic_nets(edge_index: Tensor, num_nodes: int, sampling: Sampling, input_nodes: Tensor | None = None,
                    num_batches: int | None = None, min_nets: int = 0, max_batches: int | None = None,
                    min_edges: int = 0) -> StochasticNets:
    """Merged column nets (:func:`batch_nets`) of the loader's batches, from epoch 0 on.

    With ``num_batches``: exactly the first ``num_batches`` batches (those of
    ``global_batches(..., epoch=0)``, then of epoch 1, ...).  Without it: every batch of epoch 0,
    then more, batch by batch, until the merged nets number ``min_nets`` and the batches hold
    ``min_edges`` sampled edges (counted with repeats) -- at most ``max_batches`` batches in all
    (which may cut even epoch 0 short).
    """
    for name, value in (("num_batches", num_batches), ("max_batches", max_batches)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    _check_input_nodes(input_nodes, num_nodes)
    src, dst = edge_index.cpu().numpy()
    limit = num_batches if num_batches is not None else max_batches
    ptrs, all_pins = [np.zeros(1, dtype=np.int64)], []
    offset = nets = drawn = epochs = edges = 0

    def enough() -> bool:
        if limit is not None and drawn >= limit:
            return True
        return num_batches is None and epochs >= 1 and nets >= min_nets and edges >= min_edges

    epoch = 0
    while not enough():
        batches = global_batches(edge_index, num_nodes, sampling, input_nodes, epoch)
        if not batches:
            raise ValueError(f"epoch {epoch} has no batch: input_nodes selects no node")
        for batch in batches:
            if enough():
                break
            net_ptr, pins = batch_nets(src, dst, batch.e_id.numpy(), num_nodes)
            ptrs.append(offset + net_ptr[1:])
            all_pins.append(pins)
            offset, nets, drawn = offset + pins.size, nets + net_ptr.size - 1, drawn + 1
            edges += batch.e_id.numel()
        else:
            epochs += 1
        epoch += 1
    return StochasticNets(np.concatenate(ptrs), np.concatenate(all_pins) if all_pins else np.zeros(0, np.int64),
                          drawn, epochs, edges)


def minibatch_volumes(edge_index: Tensor, num_nodes: int, part: Tensor, sampling: Sampling,
                      input_nodes: Tensor | None = None, num_batches: int = 64, epoch: int = HELD_OUT_EPOCH,
                      hops: int | None = None) -> np.ndarray:
    """Rows one layer's exchange moves for each of ``num_batches`` batches under ``part``: the
    km1 of every batch's column nets, batches of ``epoch``, ``epoch + 1``, ... (held out from
    the partitioner's sample by default).

    ``hops`` keeps only a neighbour batch's edges sampled at hops ``1 .. hops`` (a trimmed
    layer of a ``BasicGNN``: layer ``l`` of ``L`` reads the edges of hops ``1 .. L - l``);
    ``None``: every edge (the first layer, or every layer of a node-subset batch).
    """
    if not isinstance(num_batches, int) or num_batches < 1:
        raise ValueError(f"num_batches must be a positive integer, got {num_batches!r}")
    _check_input_nodes(input_nodes, num_nodes)
    if hops is not None and not isinstance(sampling, NeighborSampling):
        raise ValueError("hops= trims neighbour batches; a node-subset batch has no hops")
    src, dst = edge_index.cpu().numpy()
    owner = part.cpu().numpy().astype(np.int64)
    volumes: list[int] = []
    while len(volumes) < num_batches:
        batches = global_batches(edge_index, num_nodes, sampling, input_nodes, epoch)
        if not batches:
            raise ValueError(f"epoch {epoch} has no batch: input_nodes selects no node")
        for batch in batches[:num_batches - len(volumes)]:
            e_id = batch.e_id.numpy()
            if hops is not None:
                assert batch.num_sampled_edges is not None
                e_id = e_id[:sum(batch.num_sampled_edges[:hops])]
            volumes.append(km1(*batch_nets(src, dst, e_id, num_nodes), owner))
        epoch += 1
    return np.asarray(volumes, dtype=np.int64)


def expected_minibatch_volume(edge_index: Tensor, num_nodes: int, part: Tensor, sampling: Sampling,
                              input_nodes: Tensor | None = None, num_batches: int = 64,
                              epoch: int = HELD_OUT_EPOCH) -> float:
    """Mean rows one layer's exchange moves per batch under ``part`` (:func:`minibatch_volumes`:
    ``num_batches`` batches of the loader's rule ``sampling`` from ``epoch`` on, every edge)."""
    return float(minibatch_volumes(edge_index, num_nodes, part, sampling, input_nodes, num_batches, epoch).mean())


@register("stochastic_hypergraph")
def stochastic_hypergraph_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int,
                                    sampling: Sampling | None = None, input_nodes: Tensor | None = None,
                                    batch_size: int | None = None, fanouts: Sequence[int] | None = None,
                                    num_batches: int | None = None, theta: float = 0.1, delta: float = 0.5,
                                    edge_coverage: float = 4.0, max_batches: int = 1024, epsilon: float = 0.03,
                                    backend: str = "mtkahypar", preset: str = "deterministic") -> Tensor:
    r"""Partitions the merged column nets of the loader's mini-batches for km1 (SHP).

    Args:
        sampling (Sampling, optional): the loader's batch rule, ``NeighborSampling(...)`` or ``NodeSubsetSampling(...)``
            with the loader's ``batch_size``, ``num_neighbors``, ``shuffle`` and ``seed``. (default: :obj:`None`)
        input_nodes (torch.Tensor, optional): the loader's seed candidates as global ids or a mask over all nodes
            (e.g. ``data.train_mask``). (default: every node)
        batch_size (int, optional): shorthand for ``sampling`` (see :func:`sampling_spec`): the batch
            size. (default: :obj:`None`)
        fanouts (Sequence[int], optional): shorthand for ``sampling``: ``fanouts=[10, 5]`` is neighbour
            sampling, none is node subsets. (default: :obj:`None`)
        num_batches (int, optional): merge exactly the first ``num_batches`` batches.  By default: every batch
            of epoch 0 (so every edge training samples in an epoch is in a net), then more until
            the merged nets meet eq. (14), ``hoeffding_num_nets(num_parts, theta, delta)``, at
            most ``max_batches`` (a warning says when that stops the draw early) -- and until
            the batches sampled ``edge_coverage`` times as many edges as the graph has.
            (default: :obj:`None`)
        edge_coverage (float, optional): eq. (14) bounds the error of the expected connectivity of *one*
            partition; to optimise it, the partitioner must also see the edges: an edge the
            sample never drew leaves its endpoints in no net together.  Neighbour batches (1024
            seeds, fanouts [10, 5]) sample about 2 |E| edges per epoch, node subsets only
            ``|E| * batch_size / N`` (an edge is in a batch when both ends are).  Node subsets of
            256 nodes, 64 held-out batches, rows per batch (HP / METIS: Cora 5.1 / 5.3 at P = 4,
            12.7 / 12.3 at P = 16; CiteSeer 1.2 / 1.2, 4.5 / 4.5): with the bound alone
            (``edge_coverage=0``, one epoch) SHP gave Cora 54.7 and 14.0, CiteSeer 36.1 and 7.2;
            with 1: 12.3, 14.0, 8.4, 7.2; with 4: 5.4, 12.9, 1.6, 5.4; with 16: 5.4, 11.7, 1.6, 4.5.
            (default: :obj:`4.0`)
        theta (float, optional): eq. (14)'s accuracy :math:`\theta`. (default: :obj:`0.1`)
        delta (float, optional): eq. (14)'s confidence :math:`\delta`. (default: :obj:`0.5`)
        epsilon (float, optional): allowed imbalance, as ``method="hypergraph"``. (default: :obj:`0.03`)
        backend (str, optional): the hypergraph partitioner, as ``method="hypergraph"``.
            (default: :obj:`"mtkahypar"`)
        preset (str, optional): its preset, as ``method="hypergraph"``. (default: :obj:`"deterministic"`)

    The partition's ``seed`` seeds the partitioner only; the batches follow ``sampling.seed``.
    Identical nets are merged into one weighted net (the same km1, a smaller input).
    """
    spec = sampling_spec(sampling, batch_size, fanouts)
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    needed = hoeffding_num_nets(num_parts, theta, delta)
    if edge_coverage < 0:
        raise ValueError(f"edge_coverage must be >= 0, got {edge_coverage!r}")
    min_edges = math.ceil(edge_coverage * edge_index.size(1))
    nets = stochastic_nets(edge_index, num_nodes, spec, input_nodes, num_batches, needed, max_batches, min_edges)
    if num_batches is None and nets.num_epochs < 1:
        warnings.warn(f"stochastic_hypergraph: {max_batches} mini-batches (max_batches) give not even epoch 0's "
                      f"batches; raise max_batches", stacklevel=2)
    elif num_batches is None and nets.net_ptr.size - 1 < needed:
        warnings.warn(f"stochastic_hypergraph: {max_batches} mini-batches (max_batches) give {nets.net_ptr.size - 1} "
                      f"nets, fewer than the {needed} eq. (14) needs for theta={theta}, delta={delta} at "
                      f"P={num_parts}; raise max_batches or theta", stacklevel=2)
    elif num_batches is None and nets.num_edges < min_edges:
        warnings.warn(f"stochastic_hypergraph: {max_batches} mini-batches (max_batches) sample "
                      f"{nets.num_edges / max(edge_index.size(1), 1):.2f} |E| edges, less than edge_coverage="
                      f"{edge_coverage}; raise max_batches or lower edge_coverage", stacklevel=2)
    net_ptr, pins = drop_single_pin_nets(nets.net_ptr, nets.pins)
    net_ptr, pins, weights = merge_identical_nets(net_ptr, pins)
    part = run_backend(net_ptr, pins, row_nnz(edge_index, num_nodes), num_nodes, num_parts, epsilon, seed,
                       backend, preset, net_weights=weights)
    return torch.from_numpy(part)


def _check_input_nodes(input_nodes: Tensor | None, num_nodes: int) -> None:
    if input_nodes is None:
        return
    if not isinstance(input_nodes, Tensor):
        raise TypeError(f"input_nodes must be a bool mask or an int64 index of global node ids (e.g. "
                        f"data.train_mask), got {type(input_nodes).__name__}")
    if input_nodes.dtype == torch.bool:
        if input_nodes.shape != (num_nodes,):
            raise ValueError(f"input_nodes is a mask of shape {list(input_nodes.shape)} but the graph has "
                             f"{num_nodes} nodes: pass a mask over all nodes (e.g. data.train_mask)")
    elif input_nodes.dtype != torch.long or input_nodes.dim() != 1:
        raise ValueError(f"input_nodes must be a bool mask or an int64 index of global node ids, got dtype "
                         f"{input_nodes.dtype} and shape {list(input_nodes.shape)}")
    elif input_nodes.numel() and (int(input_nodes.min()) < 0 or int(input_nodes.max()) >= num_nodes):
        raise ValueError(f"input_nodes indexes nodes outside [0, {num_nodes})")
