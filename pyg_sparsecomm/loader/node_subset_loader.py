r"""``DistributedNodeSubsetLoader``: random node subsets and the subgraphs they induce."""
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..sampling.rules import NodeSubsetSampling
from .base import DistributedLoader
from .batch import Sampled, build_batch
from .halo_requests import HaloRequests


class DistributedNodeSubsetLoader(DistributedLoader):
    r"""Mini-batches that are random sets of nodes with the subgraph they induce (VLDB'23 Fig. 5).

    Every epoch splits the nodes into ``ceil(N / batch_size)`` random batches (each node falls
    in one uniformly at random, by a hash of its global id, so each rank knows which of its
    own and of its halo nodes a batch holds without talking: sampling needs no
    communication).  The batch's edges are the in-edges of its nodes whose sources are in it
    too.  The rows scored (``batch.seed_mask``, the first ``batch.batch_size`` rows) are the
    members in ``input_nodes``; batches with none on any rank are skipped.  The batch plan
    costs one request exchange (:mod:`.halo_requests`) and one reply.  Every layer runs on the
    whole induced subgraph (no trimming).

    Args:
        local (torch_geometric.data.Data): the rank's shard.
        batch_size (int, optional): nodes per batch, on average. (default: :obj:`1`)
        input_nodes (torch.Tensor, optional): nodes to score, as :class:`~.neighbor_loader.DistributedNeighborLoader`
            takes them: global ids, a bool mask over all nodes or over the shard's rows
            (default: all).
        shuffle (bool, optional): draw new batches every epoch. (default: :obj:`False`)
        seed (int, optional): the random stream shared by all ranks. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the process group. (default: :obj:`None`)
        transform (Callable[[Data], Data], optional): a function applied to every batch (as PyG loaders' ``transform``).
            (default: :obj:`None`)
        prefetch (int, optional): batches prepared ahead on a background thread (``0``: none), as in
            :class:`~.neighbor_loader.DistributedNeighborLoader`. (default: :obj:`None`)
        drop_last (bool, optional): PyG's default ``False`` only: a batch is a random set of about ``batch_size``
            nodes, so there is no short last batch to drop (``DistributedNeighborLoader`` takes
            ``drop_last=True``). (default: :obj:`False`)
        **pyg_options (optional): PyG loader keywords, as in :class:`~.neighbor_loader.DistributedNeighborLoader`.
    """

    sampling: NodeSubsetSampling

    def __init__(self, local: Data, batch_size: int = 1, input_nodes: Tensor | None = None,
                 shuffle: bool | None = False, seed: int = 0, group: dist.ProcessGroup | None = None,
                 transform: Callable[[Data], Data] | None = None, prefetch: int | None = None,
                 drop_last: bool = False, **pyg_options: Any) -> None:
        if isinstance(local, HeteroData):
            raise NotImplementedError(
                "DistributedNodeSubsetLoader does not take a heterogeneous shard yet: for mini-batches of a HeteroData "
                "use DistributedNeighborLoader(shard(hetero_data), num_neighbors, input_nodes=(node_type, mask)) "
                "(-1: every in-edge), or partition and shard data.to_homogeneous() for random node subsets")
        if drop_last:
            raise ValueError("DistributedNodeSubsetLoader(drop_last=True) is not supported: a batch is a random set "
                             "of about batch_size nodes (each node falls in one by a hash of its id), so there is no "
                             "short last batch to drop; DistributedNeighborLoader takes drop_last=True (exactly "
                             "batch_size seeds per batch)")
        sampling = NodeSubsetSampling(batch_size=batch_size, shuffle=bool(shuffle), seed=seed)
        self.num_batches = sampling.num_batches(int(local.global_num_nodes))
        super().__init__(local, sampling, input_nodes, group, transform, prefetch, pyg_options)
        self.halo_requests = HaloRequests([self.adj.plan])

    def _batches(self, epoch: int, global_seeds: Tensor) -> Iterator[Data]:
        plan = self.adj.plan
        row_batch = self.sampling.batch_of(epoch, plan.n_id, self.num_batches)
        halo_batch = self.sampling.batch_of(epoch, plan.halo_n_id, self.num_batches)
        for b in range(self.num_batches):
            if global_seeds[b] == 0:
                continue
            batch = self.sample(row_batch == b, halo_batch == b)
            batch.global_batch_size = int(global_seeds[b])
            yield batch

    def sample(self, member: Tensor, halo_member: Tensor) -> Data:
        """The batch whose members are ``member`` (shard rows) and ``halo_member`` (halo columns);
        collective."""
        adj = self.adj
        row_hop = torch.where(member, torch.where(self.input_mask, 0, 1), -1)
        source_member = torch.cat([member, halo_member])
        pos = torch.nonzero(member.index_select(0, adj.row()) & source_member.index_select(0, adj.col)).view(-1)
        asks = self.halo_requests.batch(self.sample_group)
        asks.hop([[adj.col.index_select(0, pos)]], 1)
        sampled = Sampled(row_hop, pos, torch.ones_like(pos), int((row_hop == 0).sum()))
        return build_batch(self.local, adj, sampled, asks.requests(), None, self.sample_group)
