r"""How :class:`~pyg_sparsecomm.loader.DistributedNeighborLoader` samples a homogeneous shard: the
:class:`~pyg_sparsecomm.sampling.NeighborSampling` rule, every row's in-edges in the canonical order
they are drawn from, and one batch's hops (one request exchange each), then its plan."""
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from ..sampling import host_reads
from ..sampling.frontier import frontiers
from ..sampling.in_edge_sample import sample_in_edges, shard_in_edge_order
from ..sampling.row_sets import difference, disjoint_union
from ..sampling.rules import NeighborSampling
from .batch import Sampled, build_batch
from .halo_requests import HaloRequests
from .shards import shard_adj


class HomoNeighborSampler:
    r"""The neighbour sampling of a homogeneous shard (the strategy a ``Data`` shard gets).

    Args:
        local (torch_geometric.data.Data): the rank's shard (``shard(data)`` / ``load_shard``).
        num_neighbors (Sequence[int]): fanout per hop (``-1``: all in-edges).
        input_nodes (torch.Tensor or None): the seed candidates, as :mod:`~.seeds` reads them.
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
        **batching (optional): the rule's ``batch_size``, ``shuffle``, ``seed`` and ``drop_last``.
    """

    def __init__(self, local: Data, num_neighbors: Any, input_nodes: Tensor | None,
                 group: dist.ProcessGroup | None, **batching: Any) -> None:
        if isinstance(num_neighbors, dict):
            raise ValueError("num_neighbors is a dict (per edge type, heterogeneous graphs): pass a HeteroData shard "
                             "(shard(hetero_data)), or one list of fanouts, one per hop")
        if not isinstance(num_neighbors, Sequence) or isinstance(num_neighbors, str):
            raise ValueError(f"num_neighbors must be a list of fanouts, one per hop (e.g. [10, 5]), "
                             f"got {num_neighbors!r}")
        self.sampling = NeighborSampling(num_neighbors=tuple(num_neighbors), **batching)
        self.local, self.input_nodes = local, input_nodes
        self.adj = shard_adj(local, group)
        self.device = self.adj.device
        self.e_id = local.e_id.to(self.device)
        self.seed_n_id, self.num_nodes = self.adj.plan.n_id, int(self.adj.plan.num_nodes)
        # every row's in-edges in the order they are drawn from (:mod:`~pyg_sparsecomm.sampling.in_edge_sample`)
        self.in_order = shard_in_edge_order(self.adj, self.e_id)
        self.degree = self.adj.rowptr.diff()
        self.halo_requests = HaloRequests([self.adj.plan])

    def sample(self, epoch: int, b: int, seeds: Tensor, group: dist.ProcessGroup | None) -> Data:
        """Batch ``b`` of ``epoch`` from this rank's ``seeds`` (shard rows, ascending); collective over ``group``:
        one all-to-all per hop.  On the host every set of rows a hop keeps (its frontier, the rows reached,
        the batch's rows so far) is a sorted tensor of the batch's rows
        (:mod:`~pyg_sparsecomm.sampling.row_sets`): O(batch) memory and work per hop, no mask of the
        shard's rows.  On an accelerator, masks of the shard's rows, read once per hop
        (:mod:`~pyg_sparsecomm.sampling.frontier`): finding a set's size would wait for the device."""
        if host_reads.waits_for_device(self.device):  # (looked up here: tests stand in for a GPU)
            return self._sample_masks(epoch, b, seeds, group)
        adj, num_hops = self.adj, self.sampling.num_hops
        asks, edges, hops = self.halo_requests.batch_sets(group), [], []
        frontier, in_batch, hop_rows = seeds, seeds, [seeds]
        for h in range(1, num_hops + 1):
            key, fanout = self.sampling.draw(epoch, b, h)
            pos = sample_in_edges(key, fanout, adj.rowptr, self.in_order, frontier,
                                  self.seed_n_id.index_select(0, frontier))
            edges.append(pos)
            hops.append(torch.full_like(pos, h))
            (reached,) = asks.hop_rows([[adj.col.index_select(0, pos)]], h)
            frontier = difference(reached, in_batch, adj.num_owned)
            in_batch = disjoint_union(in_batch, frontier)
            hop_rows.append(frontier)
        sampled = Sampled(hop_rows, torch.cat(edges), torch.cat(hops), int(seeds.numel()))
        return build_batch(self.local, adj, sampled, asks.requests(), num_hops, group)

    def _sample_masks(self, epoch: int, b: int, seeds: Tensor, group: dist.ProcessGroup | None) -> Data:
        """:meth:`sample` with masks of the shard's rows (the path an accelerator takes)."""
        adj, num_hops = self.adj, self.sampling.num_hops
        row_hop = torch.full((adj.num_owned,), -1, dtype=torch.long, device=adj.device)
        row_hop.index_fill_(0, seeds, 0)
        newly, asks, edges, hops = row_hop == 0, self.halo_requests.batch(group), [], []
        for h in range(1, num_hops + 1):
            key, fanout = self.sampling.draw(epoch, b, h)
            frontier, sizes = frontiers({0: newly}, {0: (0, self.degree, fanout)})
            pos = sample_in_edges(key, fanout, adj.rowptr, self.in_order, frontier[0],
                                  self.seed_n_id.index_select(0, frontier[0]), sizes[0])
            edges.append(pos)
            hops.append(torch.full_like(pos, h))
            (reached,) = asks.hop([[adj.col.index_select(0, pos)]], h)
            newly = reached.logical_and_(row_hop < 0)
            row_hop.masked_fill_(newly, h)
        sampled = Sampled(row_hop, torch.cat(edges), torch.cat(hops), int(seeds.numel()))
        return build_batch(self.local, adj, sampled, asks.requests(), num_hops, group)
