r"""How :class:`~pyg_sparsecomm.loader.DistributedNeighborLoader` samples a heterogeneous shard (PyG's
``NeighborLoader`` on ``HeteroData``).

The batches are those of :class:`~pyg_sparsecomm.sampling.hetero_rules.HeteroNeighborSampling` on the
whole graph, the same for any partition and ``P``: seeds of one node type, and at hop ``h`` for every
relation :math:`(s, r, d)` at most ``num_neighbors[(s, r, d)][h - 1]`` sampled in-edges of that relation
of every :math:`d` node first reached at hop ``h - 1``.  As on a homogeneous shard each rank samples the
in-edges of its own nodes and asks the owners of new remote sources to sample theirs (one request
exchange per hop for all source types); then one reply per source type fixes that type's batch plan,
shared by every relation reading it.
"""
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..sampling import host_reads
from ..sampling.frontier import frontiers
from ..sampling.hetero_rules import EdgeType, HeteroNeighborSampling
from ..sampling.in_edge_sample import sample_in_edges, shard_in_edge_order
from ..sampling.row_sets import difference, disjoint_union
from .halo_requests import HaloRequests
from .hetero_batch import HeteroSampled, build_hetero_batch
from .shards import hetero_input_nodes, relation_adjs


class HeteroNeighborSampler:
    r"""The neighbour sampling of a heterogeneous shard (the strategy a ``HeteroData`` shard gets; see
    the module docstring).

    Args:
        local (torch_geometric.data.HeteroData): the rank's heterogeneous shard (``shard(hetero_data)``).
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]): fanouts per hop, one list
            for every relation, or a dict ``{edge type: list}`` naming every relation (``-1``: all
            in-edges, ``0``: none).
        input_nodes (str or Tuple[str, torch.Tensor or None]): ``(node type, ids or mask)`` or a node type.
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
        **batching (optional): the rule's ``batch_size``, ``shuffle``, ``seed`` and ``drop_last``.
    """

    def __init__(self, local: HeteroData, num_neighbors: Any, input_nodes: Any,
                 group: dist.ProcessGroup | None, **batching: Any) -> None:
        self.input_type, self.input_nodes = hetero_input_nodes(local, input_nodes)
        relations = tuple((et, _fanouts(num_neighbors, et)) for et in local.edge_types)
        if isinstance(num_neighbors, dict):
            unknown = [et for et in num_neighbors if tuple(et) not in local.edge_types]
            if unknown:
                raise ValueError(f"num_neighbors names edge type(s) {unknown} the graph does not have "
                                 f"(edge types: {local.edge_types})")
        self.sampling = HeteroNeighborSampling(input_type=self.input_type, relations=relations, **batching)
        self.local = local
        self._shard(local, group)

    def _shard(self, local: HeteroData, group: dist.ProcessGroup | None) -> None:
        """Checks the shard; keeps every relation's adjacency, edge ids and canonical in-edge order on the
        shard's device (``self.device``) and every source type's plan; the seeds are rows of the input type."""
        self.adjs = relation_adjs(local, group)
        self.device = next(iter(self.adjs.values())).device
        self.e_ids = {et: local[et].e_id.to(self.device) for et in self.adjs}
        self.in_orders = {et: shard_in_edge_order(a, self.e_ids[et]) for et, a in self.adjs.items()}
        self.degrees = {et: a.rowptr.diff() for et, a in self.adjs.items()}
        self.row_ids = {t: local[t].n_id.to(self.device) for t in local.node_types}
        self.plans = {et[0]: a.plan for et, a in self.adjs.items()}
        self.halo_requests = HaloRequests(list(self.plans.values()))
        self.num_owned = {t: int(local[t].num_nodes) for t in local.node_types}
        self.seed_n_id = self.row_ids[self.input_type]
        self.num_nodes = int(local[self.input_type].global_num_nodes)

    def sample(self, epoch: int, b: int, seeds: Tensor, group: dist.ProcessGroup | None) -> HeteroData:
        """Batch ``b`` of ``epoch`` from this rank's ``seeds`` (rows of the input type); collective over ``group``.
        Reads the device once per hop (:mod:`~pyg_sparsecomm.sampling.frontier`); one all-to-all per
        hop for all source types together."""
        sampled = self.sample_from(epoch, b, {self.input_type: seeds}, group)
        return build_hetero_batch(self.local, self.adjs, sampled, self.input_type, self.sampling.num_hops, group)

    def sample_from(self, epoch: int, b: int, seeds: dict[str, Tensor],
                    group: dist.ProcessGroup | None) -> HeteroSampled:
        """What this rank samples for batch ``b`` of ``epoch`` from its ``seeds`` (shard rows per node
        type, ascending: those of the input type, or the two end types of a link batch); collective.
        On the host the rows of every hop are sorted sets of the batch's rows (O(batch), as
        :meth:`~.neighbor_sampler.HomoNeighborSampler.sample`), on an accelerator masks of the shard's rows."""
        if host_reads.waits_for_device(self.device):
            return self._sample_from_masks(epoch, b, seeds, group)
        empty = torch.zeros(0, dtype=torch.long, device=self.device)
        in_batch = {t: seeds.get(t, empty) for t in self.num_owned}
        hop_rows = {t: [rows] for t, rows in in_batch.items()}
        asks = self.halo_requests.batch_sets(group)
        edges: dict[EdgeType, list[Tensor]] = {et: [] for et in self.adjs}
        hops: dict[EdgeType, list[Tensor]] = {et: [] for et in self.adjs}
        for h in range(1, self.sampling.num_hops + 1):
            frontier = {t: rows[-1] for t, rows in hop_rows.items()}
            reached = self._hop(epoch, b, h, frontier, {et: None for et in self.adjs}, edges, hops, asks.hop_rows)
            for t, rows in hop_rows.items():  # a type that is no relation's source is reached by no edge
                new = difference(reached[t], in_batch[t], self.num_owned[t]) if t in reached else empty
                in_batch[t] = disjoint_union(in_batch[t], new)
                rows.append(new)
        return self._sampled(hop_rows, edges, hops, asks, seeds)

    def _sample_from_masks(self, epoch: int, b: int, seeds: dict[str, Tensor],
                           group: dist.ProcessGroup | None) -> HeteroSampled:
        """:meth:`sample_from` with masks of the shard's rows, read once per hop (an accelerator's path)."""
        row_hop = {t: torch.full((n,), -1, dtype=torch.long, device=self.device) for t, n in self.num_owned.items()}
        for t, rows in seeds.items():
            row_hop[t].index_fill_(0, rows, 0)
        newly = {t: hop == 0 for t, hop in row_hop.items()}
        asks = self.halo_requests.batch(group)
        edges: dict[EdgeType, list[Tensor]] = {et: [] for et in self.adjs}
        hops: dict[EdgeType, list[Tensor]] = {et: [] for et in self.adjs}
        for h in range(1, self.sampling.num_hops + 1):
            keys = {et: self.sampling.draw_relation(epoch, b, h, i) for i, et in enumerate(self.adjs)}
            frontier, sizes = frontiers(newly, {et: (et[2], self.degrees[et], keys[et][1]) for et in self.adjs})
            reached = self._hop(epoch, b, h, frontier, sizes, edges, hops, asks.hop)
            # a type that is no relation's source is reached by no edge: its mask stays empty
            newly = {t: reached.get(t, torch.zeros_like(mask)).logical_and_(row_hop[t] < 0)
                     for t, mask in newly.items()}
            for t, mask in newly.items():
                row_hop[t].masked_fill_(mask, h)
        return self._sampled(row_hop, edges, hops, asks, seeds)

    def _sampled(self, row_hop: dict, edges: dict, hops: dict, asks: Any, seeds: dict[str, Tensor]) -> HeteroSampled:
        requests = {s: asks.requests(i) for i, s in enumerate(self.plans)}
        return HeteroSampled(row_hop, {et: torch.cat(e) for et, e in edges.items()},
                             {et: torch.cat(h) for et, h in hops.items()}, requests,
                             int(seeds[self.input_type].numel()) if self.input_type in seeds else 0)

    def _hop(self, epoch: int, b: int, h: int, frontier: dict[str, Tensor], sizes: dict, edges: dict, hops: dict,
             ask: Callable[[list[list[Tensor]], int], list[Tensor]]) -> dict[str, Tensor]:
        """Hop ``h``: every relation's in-edges of the rows of its target type first reached at hop
        ``h - 1`` (``frontier``, ascending; ``sizes`` of their draws, or ``None``), then one request
        exchange for all source types (``ask``); returns what ``ask`` does per source type (the shard
        rows reached: a mask, or a set)."""
        cols: dict[str, list[Tensor]] = {s: [] for s in self.plans}
        for i, (et, adj) in enumerate(self.adjs.items()):
            rows = frontier[et[2]]
            pos = sample_in_edges(*self.sampling.draw_relation(epoch, b, h, i), adj.rowptr, self.in_orders[et], rows,
                                  self.row_ids[et[2]].index_select(0, rows), sizes[et])
            edges[et].append(pos)
            hops[et].append(torch.full_like(pos, h))
            cols[et[0]].append(adj.col.index_select(0, pos))
        return dict(zip(self.plans, ask(list(cols.values()), h), strict=True))


def _fanouts(num_neighbors: Any, edge_type: EdgeType) -> tuple[int, ...]:
    """The fanouts of ``edge_type`` in PyG's ``num_neighbors`` (a list for all, or a dict per edge type)."""
    if isinstance(num_neighbors, dict):
        by_type = {tuple(k): v for k, v in num_neighbors.items()}
        if edge_type not in by_type:
            raise ValueError(f"num_neighbors has no fanouts for edge type {edge_type}: name every relation "
                             f"(0: sample none of it), or pass one list for all")
        num_neighbors = by_type[edge_type]
    if not isinstance(num_neighbors, Sequence) or isinstance(num_neighbors, str):
        raise ValueError(f"num_neighbors must be a list of fanouts per hop (e.g. [10, 5]) or a dict of such lists "
                         f"per edge type, got {num_neighbors!r}")
    return tuple(num_neighbors)
