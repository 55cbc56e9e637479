r"""``DistributedNodeSubsetLoader``: random node subsets and the subgraphs they induce."""
import math
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
    whole induced subgraph (no trimming).  A ``HeteroData`` shard gets
    :class:`~.hetero_subset_loader.DistributedHeteroNodeSubsetLoader` (nodes of every type, seeds of
    ``input_nodes=(node_type, mask)``), as PyG's loaders take both.

    Args:
        local (torch_geometric.data.Data or torch_geometric.data.HeteroData): the rank's shard.
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
        num_parts (int, optional): batches per epoch instead of ``batch_size``, as PyG's ``RandomNodeLoader(data,
            num_parts)``: ``batch_size = ceil(N / num_parts)`` (``RandomNodeLoader`` ports in one line:
            ``DistributedNodeSubsetLoader(data, num_parts=..., shuffle=True)``). (default: :obj:`None`)
        **pyg_options (optional): PyG loader keywords, as in :class:`~.neighbor_loader.DistributedNeighborLoader`.
    """

    sampling: NodeSubsetSampling
    #: the subclass a heterogeneous shard gets (:mod:`.hetero_subset_loader` registers itself)
    _heterogeneous: type["DistributedNodeSubsetLoader"] | None = None

    def __init_subclass__(cls, heterogeneous: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if heterogeneous:
            DistributedNodeSubsetLoader._heterogeneous = cls

    def __new__(cls, local: Any = None, *args: Any, **kwargs: Any) -> "DistributedNodeSubsetLoader":
        """A ``HeteroData`` shard gets the heterogeneous loader, as PyG's loaders take both."""
        if isinstance(local, HeteroData) and cls is DistributedNodeSubsetLoader and cls._heterogeneous is not None:
            return object.__new__(cls._heterogeneous)
        return object.__new__(cls)

    def __init__(self, local: Data, batch_size: int | None = None, input_nodes: Tensor | None = None,
                 shuffle: bool | None = False, seed: int = 0, group: dist.ProcessGroup | None = None,
                 transform: Callable[[Data], Data] | None = None, prefetch: int | None = None,
                 drop_last: bool = False, num_parts: int | None = None, **pyg_options: Any) -> None:
        batch_size = self._batch_size(local, batch_size, num_parts)
        if drop_last:
            raise ValueError("DistributedNodeSubsetLoader(drop_last=True) is not supported: a batch is a random set "
                             "of about batch_size nodes (each node falls in one by a hash of its id), so there is no "
                             "short last batch to drop; DistributedNeighborLoader takes drop_last=True (exactly "
                             "batch_size seeds per batch)")
        sampling, input_nodes = self._rule(local, input_nodes, group, batch_size=batch_size, shuffle=bool(shuffle),
                                           seed=seed)
        super().__init__(local, sampling, input_nodes, group, transform, prefetch, pyg_options)
        self.num_batches = sampling.num_batches(self._num_members(local))

    def _batch_size(self, local: Data, batch_size: int | None, num_parts: int | None) -> int:
        """``batch_size``, or the nodes per batch of PyG's ``RandomNodeLoader(data, num_parts)``:
        ``ceil(N / num_parts)`` of the ``N`` nodes the batches split."""
        if num_parts is None:
            return 1 if batch_size is None else batch_size
        if batch_size is not None:
            raise ValueError(f"{type(self).__name__} got batch_size={batch_size} and num_parts={num_parts}: pass one "
                             f"(num_parts, as PyG's RandomNodeLoader, sets batch_size = ceil(num_nodes / num_parts))")
        if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
            raise ValueError(f"num_parts must be a positive integer (batches per epoch), got {num_parts!r}")
        return max(1, math.ceil(self._num_members(local) / num_parts))

    def _rule(self, local: Data, input_nodes: Any, group: dist.ProcessGroup | None,
              **batching: Any) -> tuple[NodeSubsetSampling, Any]:
        """The batch rule of the arguments, and the seed candidates as :mod:`~.seeds` reads them."""
        return NodeSubsetSampling(**batching), input_nodes

    def _num_members(self, local: Data) -> int:
        """The nodes the epoch's batches split: the graph's."""
        return int(local.global_num_nodes)

    def _seed_rows(self, local: Data, group: dist.ProcessGroup | None) -> tuple[Tensor, int]:
        """As the base class; also makes the request layout of the shard's plan."""
        seed_n_id, num_nodes = super()._seed_rows(local, group)
        self.halo_requests = HaloRequests([self.adj.plan])
        return seed_n_id, num_nodes

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

