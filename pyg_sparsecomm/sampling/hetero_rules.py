r"""How heterogeneous mini-batches are drawn: PyG's ``NeighborLoader`` on ``HeteroData``, by the
counter-based rules of :mod:`.rules`, and a single-process reference of them.

The seeds are nodes of one type (``input_nodes=(node_type, ...)``), put in batches as
:class:`~.rules.NeighborSampling` puts them.  At hop ``h``, for every relation
:math:`(s, r, d)` of fanout :math:`k_h` (``num_neighbors[(s, r, d)][h - 1]``; ``-1``: all,
``0``: none), every node of type :math:`d` first reached at hop ``h - 1`` keeps :math:`k_h` of its
in-edges of that relation, uniformly without replacement, drawn by :mod:`.in_edge_sample` under
the key of :math:`(s, e, \text{batch}, \rho)` (:math:`\rho` the relation's position in the
graph's edge types, so relations draw independently); their sources of type :math:`s` not
reached before are reached at hop ``h``.
Every choice is a function of global ids: a batch is the same for any partition and any ``P``.
Nodes of every type are ordered by (hop, global id), edges of every relation by (hop,
target, source), as in the homogeneous batches.
"""
import operator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .randomness import stream_key
from .rules import _EDGES, NeighborSampling, _input_mask, _is_integer, global_in_edges, sampled_edges

EdgeType = tuple[str, str, str]


@dataclass(frozen=True)
class HeteroNeighborSampling(NeighborSampling):
    r"""Seeds of ``input_type`` in batches of ``batch_size`` (on average; exactly with
    ``drop_last``), ``relations[i] = (edge type, fanouts per hop)`` sampled per relation.

    ``num_neighbors`` is derived: per hop the largest fanout of any relation (``-1`` if one
    takes all), which only fixes the number of hops.

    Args:
        batch_size (int): seeds per batch (on average; exactly with ``drop_last``).
        shuffle (bool, optional): draw new batches every epoch. (default: :obj:`True`)
        seed (int, optional): the random stream of batches and draws. (default: :obj:`0`)
        num_neighbors (tuple[int, ...], optional): derived from ``relations`` (a value given is
            replaced). (default: :obj:`(10, 5)`)
        drop_last (bool, optional): batches of exactly ``batch_size`` seeds. (default: :obj:`False`)
        input_type (str, optional): the seeds' node type. (default: :obj:`""`)
        relations (tuple[tuple[EdgeType, tuple[int, ...]], ...], optional): every relation sampled and
            its fanouts per hop. (default: :obj:`()`)
    """
    input_type: str = ""
    relations: tuple[tuple[EdgeType, tuple[int, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not self.relations:
            raise ValueError("HeteroNeighborSampling needs the fanouts of at least one relation")
        relations = tuple((tuple(et), tuple(f)) for et, f in self.relations)
        for edge_type, fanout in relations:
            if not fanout or any(isinstance(k, bool) or not _is_integer(k) or int(k) < -1 for k in fanout):
                raise ValueError(f"num_neighbors[{edge_type}] must be a non-empty list of fanouts (-1: all in-edges, "
                                 f"0: none), got {list(fanout)}")
        if len({len(f) for _, f in relations}) != 1:
            raise ValueError(f"every relation needs the same number of hops in num_neighbors, got "
                             f"{ {et: list(f) for et, f in relations} }")
        relations = tuple((et, tuple(operator.index(k) for k in f)) for et, f in relations)
        object.__setattr__(self, "relations", relations)
        widest = tuple(-1 if -1 in hop else max(hop) for hop in zip(*(f for _, f in relations), strict=True))
        if 0 in widest:
            raise ValueError(f"hop {widest.index(0) + 1} samples no relation (every fanout is 0): drop the hop")
        object.__setattr__(self, "num_neighbors", widest)
        super().__post_init__()

    @property
    def edge_types(self) -> list[EdgeType]:
        return [et for et, _ in self.relations]

    def draw_relation(self, epoch: int, batch: int, hop: int, relation: int) -> tuple[np.uint64, int]:
        """``(key, fanout)`` of the in-edges of relation ``relation`` (its position in
        :attr:`relations`) drawn at ``hop`` (1-based) of ``batch``."""
        return stream_key(self.seed, _EDGES, epoch, batch, relation), self.relations[relation][1][hop - 1]


class HeteroGlobalBatch(NamedTuple):
    """One heterogeneous batch of the whole graph (the single-process reference).

    Attributes:
        n_id (dict[str, torch.Tensor]): per node type, ``[n_t]`` global ids ordered by (hop, id); the
            seeds lead ``n_id[input_type]``.
        num_seeds (int): seeds at the front of ``n_id[input_type]``.
        num_sampled_nodes (dict[str, list[int]]): per node type, nodes per hop ``0 .. L`` (``None`` for
            node subsets).
        e_id (dict[EdgeType, torch.Tensor]): per relation, ``[m_r]`` global edge ids ordered by
            (hop, target, source).
        num_sampled_edges (dict[EdgeType, list[int]]): per relation, edges per hop ``1 .. L`` (``None``
            for node subsets).
    """
    n_id: dict[str, Tensor]
    num_seeds: int
    num_sampled_nodes: dict[str, list[int]] | None
    e_id: dict[EdgeType, Tensor]
    num_sampled_edges: dict[EdgeType, list[int]] | None


def hetero_global_batches(data, sampling: HeteroNeighborSampling, input_nodes: Tensor | None = None,
                          epoch: int = 0) -> list[HeteroGlobalBatch]:
    """Every non-empty batch of ``epoch`` on the whole ``HeteroData`` ``data``, in one process, by the
    rules the distributed loader follows (it yields the same batches, split over the ranks).

    Args:
        data (torch_geometric.data.HeteroData): the heterogeneous graph (``edge_index`` per relation of
            ``sampling.relations``).
        sampling (HeteroNeighborSampling): the batch rule.
        input_nodes (torch.Tensor, optional): bool mask or index over the nodes of ``sampling.input_type`` (default:
            all).
        epoch (int, optional): the epoch. (default: :obj:`0`)
    """
    sizes = {t: int(data[t].num_nodes) for t in data.node_types}
    inputs = _input_mask(input_nodes, sizes[sampling.input_type])
    nb = sampling.num_batches(int(inputs.sum()))
    seeds = np.flatnonzero(inputs)
    seed_batch = sampling.batch_of(epoch, torch.from_numpy(seeds), nb, torch.from_numpy(seeds)).numpy()
    graphs = relation_graphs(data, sampling)
    batches = [seeded_batch(sampling, epoch, b, {sampling.input_type: seeds[seed_batch == b]}, graphs, sizes)
               for b in range(nb)]
    return [b for b in batches if b.num_seeds > 0]


def relation_graphs(data, sampling: HeteroNeighborSampling) -> list[tuple[np.ndarray, np.ndarray, tuple]]:
    """``(src, dst, in-edges)`` of every relation of ``sampling`` in ``data``: what :func:`seeded_batch`
    samples from."""
    sizes = {t: int(data[t].num_nodes) for t in data.node_types}
    graphs = []
    for edge_type in sampling.edge_types:
        src, dst = data[edge_type].edge_index.cpu().numpy()
        graphs.append((src, dst, global_in_edges(src, dst, sizes[edge_type[2]])))
    return graphs


def seeded_batch(sampling: HeteroNeighborSampling, epoch: int, b: int, seeds: dict[str, np.ndarray], graphs: list,
                 sizes: dict[str, int]) -> HeteroGlobalBatch:
    """Batch ``b`` of ``epoch`` sampled from ``seeds`` (sorted global ids per node type) over ``graphs``
    (:func:`relation_graphs`) of nodes ``sizes`` per type, in one process; ``num_seeds``: all seeds."""
    hop = {t: np.full(n, -1, dtype=np.int64) for t, n in sizes.items()}
    frontier = {t: np.zeros(0, dtype=np.int64) for t in sizes}
    for t, ids in seeds.items():
        hop[t][ids] = 0
        frontier[t] = ids
    picked: dict[EdgeType, list[np.ndarray]] = {et: [] for et in sampling.edge_types}
    for h in range(1, sampling.num_hops + 1):
        reached: dict[str, list[np.ndarray]] = {t: [] for t in sizes}
        for i, (edge_type, (src, dst, graph)) in enumerate(zip(sampling.edge_types, graphs, strict=True)):
            e = sampled_edges(*sampling.draw_relation(epoch, b, h, i), graph, frontier[edge_type[2]], src, dst)
            picked[edge_type].append(e)
            reached[edge_type[0]].append(src[e])
        for t in sizes:
            new = np.unique(np.concatenate(reached[t] or [np.zeros(0, dtype=np.int64)]))
            frontier[t] = new[hop[t][new] < 0]
            hop[t][frontier[t]] = h
    t64 = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    n_id, node_counts = {}, {}
    for t in sizes:
        nodes = np.flatnonzero(hop[t] >= 0)
        n_id[t] = t64(nodes[np.lexsort((nodes, hop[t][nodes]))])
        node_counts[t] = np.bincount(hop[t][nodes], minlength=sampling.num_hops + 1).tolist()
    e_id = {et: t64(np.concatenate(p)) for et, p in picked.items()}
    edge_counts = {et: [int(x.size) for x in p] for et, p in picked.items()}
    return HeteroGlobalBatch(n_id, sum(int(ids.size) for ids in seeds.values()), node_counts, e_id, edge_counts)
