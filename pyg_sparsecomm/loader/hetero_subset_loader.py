r"""``DistributedNodeSubsetLoader`` on a heterogeneous shard: random node subsets of a ``HeteroData``."""
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..comm.group import raise_together
from ..sampling.hetero_rules import EdgeType
from ..sampling.hetero_subset_rules import HeteroNodeSubsetSampling
from .halo_requests import HaloRequests
from .hetero_batch import HeteroSampled, build_hetero_batch
from .hetero_neighbor_loader import hetero_input_nodes, relation_adjs
from .node_subset_loader import DistributedNodeSubsetLoader


class DistributedHeteroNodeSubsetLoader(DistributedNodeSubsetLoader, heterogeneous=True):
    r"""Mini-batches that are random sets of nodes of every type with the subgraph they induce in
    every relation, drawn by all ranks from their ``HeteroData`` shards
    (``DistributedNodeSubsetLoader(shard(hetero_data), ...)`` makes one).

    The batches are those of :class:`~pyg_sparsecomm.sampling.hetero_subset_rules.HeteroNodeSubsetSampling`
    on the whole graph, the same for any partition and ``P``: node :math:`v` of type :math:`t` falls
    in one of :math:`\lceil N / b \rceil` batches (:math:`N` the nodes of every type) by a hash of
    its id in ``data.to_homogeneous()`` (:math:`v` plus the nodes of the types before :math:`t`), so a
    batch is the homogeneous loader's batch of ``data.to_homogeneous()`` split by type
    (:func:`~pyg_sparsecomm.sampling.hetero_subset_rules.hetero_subset_global_batches` is the
    single-process reference).  A batch's edges are every relation's edges whose two ends are in it;
    its seeds are its members of the input type in ``input_nodes``.  Sampling needs no
    communication (each rank knows which of its rows and halo columns a batch holds); the batch plan
    costs one request exchange for all source types and one reply per source type.  A yielded batch is
    this rank's ``HeteroData``, as the heterogeneous neighbour loader's: ``batch.x_dict``,
    ``batch.adj_dict`` (the model's ``edge_index_dict``), ``n_id`` per type, and on the input type the
    seeds first: score ``out[input_type][:batch[input_type].batch_size]``.  Every layer runs on the
    whole induced subgraph (no hops to trim).

    Args:
        local (torch_geometric.data.HeteroData): the rank's heterogeneous shard (``shard(hetero_data)``).
        batch_size (int, optional): nodes (of all types) per batch, on average. (default: :obj:`1`)
        input_nodes (str or Tuple[str, torch.Tensor or None], optional): ``(node type, ids or mask)`` as
            PyG takes it (ids: global ids of that type; masks over that type's nodes or the shard's rows
            of it; ``None``: every node of the type), or a node type alone; required: without it the
            loader raises, naming these forms. (default: :obj:`None`)
        shuffle (bool, optional): draw new batches every epoch. (default: :obj:`False`)
        seed (int, optional): the random stream shared by all ranks. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the process group. (default: the default group)
        transform (Callable[[HeteroData], HeteroData], optional): a function applied to every batch.
            (default: :obj:`None`)
        prefetch (int, optional): batches prepared ahead on a background thread (``0``: none).
            (default: :obj:`1`, or PyG's ``num_workers``)
        drop_last (bool, optional): PyG's default ``False`` only, as in
            :class:`~.node_subset_loader.DistributedNodeSubsetLoader`. (default: :obj:`False`)
        num_parts (int, optional): batches per epoch instead of ``batch_size`` (``ceil(N / num_parts)`` nodes of
            all types per batch), as PyG's ``RandomNodeLoader``. (default: :obj:`None`)
        **pyg_options (optional): PyG loader keywords, as in
            :class:`~.neighbor_loader.DistributedNeighborLoader`.
    """

    sampling: HeteroNodeSubsetSampling

    def _rule(self, local: Any, input_nodes: Any, group: dist.ProcessGroup | None,
              **batching: Any) -> tuple[HeteroNodeSubsetSampling, Any]:
        # a bad input_nodes on one rank raises on every rank (its peers would wait in the next collective)
        self.input_type, ids = raise_together(lambda: _input_nodes(local, input_nodes),
                                              "DistributedNodeSubsetLoader(input_nodes=...)", group, flag_first=True)
        node_types = tuple((t, int(local[t].global_num_nodes)) for t in local.node_types)
        return HeteroNodeSubsetSampling(input_type=self.input_type, node_types=node_types, **batching), ids

    def _num_members(self, local: Any) -> int:
        """The nodes the epoch's batches split: the graph's, of every type."""
        return sum(int(local[t].global_num_nodes) for t in local.node_types)

    def _seed_rows(self, local: Any, group: dist.ProcessGroup | None) -> tuple[Tensor, int]:
        """Checks the shard; keeps every relation's adjacency, every node type's global ids and every
        source type's plan on the shard's device (``self.device``); returns the input type's global
        ids and number of nodes."""
        self.adjs = relation_adjs(local, group)
        self.device = next(iter(self.adjs.values())).device
        self.row_ids = {t: local[t].n_id.to(self.device) for t in local.node_types}
        self.plans = {et[0]: a.plan for et, a in self.adjs.items()}
        self.halo_requests = HaloRequests(list(self.plans.values()))
        return self.row_ids[self.input_type], int(local[self.input_type].global_num_nodes)

    def seeds_per_batch(self, epoch: int) -> Tensor:
        """``[num_batches]`` seeds of every batch of ``epoch`` over all ranks (no communication)."""
        key = epoch if self.sampling.shuffle else 0
        if self._counts is None or self._counts[0] != key:
            seeds = torch.arange(self.num_nodes) if self.global_seeds is None else self.global_seeds
            batch = self.sampling.member_batch(epoch, self.input_type, seeds, self.num_batches)
            self._counts = (key, torch.bincount(batch, minlength=self.num_batches))
        return self._counts[1]

    def _batches(self, epoch: int, global_seeds: Tensor) -> Iterator[HeteroData]:
        rule, nb = self.sampling, self.num_batches
        row_batch = {t: rule.member_batch(epoch, t, ids, nb) for t, ids in self.row_ids.items()}
        halo_batch = {s: rule.member_batch(epoch, s, plan.halo_n_id, nb) for s, plan in self.plans.items()}
        for b in range(nb):
            if global_seeds[b] == 0:
                continue
            batch = self.sample({t: r == b for t, r in row_batch.items()}, {s: h == b for s, h in halo_batch.items()})
            batch.global_batch_size = int(global_seeds[b])
            yield batch

    def sample(self, member: dict[str, Tensor], halo_member: dict[str, Tensor]) -> HeteroData:  # type: ignore[override]
        """The batch whose members are ``member`` (shard rows per node type) and ``halo_member`` (halo
        columns per source type); collective."""
        row_hop = {t: torch.where(m, 1, -1) for t, m in member.items()}
        row_hop[self.input_type] = torch.where(member[self.input_type], torch.where(self.input_mask, 0, 1), -1)
        edges: dict[EdgeType, Tensor] = {}
        cols: dict[str, list[Tensor]] = {s: [] for s in self.plans}
        for et, adj in self.adjs.items():
            source = torch.cat([member[et[0]], halo_member[et[0]]])
            pos = torch.nonzero(member[et[2]].index_select(0, adj.row()) & source.index_select(0, adj.col)).view(-1)
            edges[et] = pos
            cols[et[0]].append(adj.col.index_select(0, pos))
        asks = self.halo_requests.batch(self.sample_group)
        asks.hop(list(cols.values()), 1)
        requests = {s: asks.requests(i) for i, s in enumerate(self.plans)}
        sampled = HeteroSampled(row_hop, edges, {et: torch.ones_like(p) for et, p in edges.items()}, requests,
                                int((row_hop[self.input_type] == 0).sum()))
        batch = build_hetero_batch(self.local, self.adjs, sampled, self.input_type, 1, self.sample_group)
        for store in batch.node_stores:  # one level, no hops to trim (as the homogeneous subset batch)
            del store["num_sampled_nodes"]
        for store in batch.edge_stores:
            del store["num_sampled_edges"]
        return batch


def _input_nodes(local: Any, input_nodes: Any) -> tuple[str, Any]:
    """``(node type, ids or mask)`` of ``input_nodes``, which a heterogeneous subset loader needs."""
    if not isinstance(local, HeteroData):
        raise ValueError("DistributedHeteroNodeSubsetLoader takes a heterogeneous shard: shard(hetero_data)")
    if input_nodes is None:
        raise ValueError(f"DistributedNodeSubsetLoader on a heterogeneous graph needs the seeds' node type: pass "
                         f"input_nodes=(node_type, mask or ids) or input_nodes=node_type, as PyG's loaders take it "
                         f"(node types: {local.node_types})")
    return hetero_input_nodes(local, input_nodes)
