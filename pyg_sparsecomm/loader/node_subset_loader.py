r"""``DistributedNodeSubsetLoader``: random node subsets and the subgraphs they induce, on a homogeneous
(``Data``) or heterogeneous (``HeteroData``) shard."""
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..sampling.rules import NodeSubsetSampling
from .base import DistributedLoader
from .hetero_subset_sampler import HeteroSubsetSampler
from .subset_sampler import HomoSubsetSampler


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

    A ``HeteroData`` shard (``shard(hetero_data)``) is sampled by
    :class:`~.hetero_subset_sampler.HeteroSubsetSampler`, as PyG's loaders take both: nodes of every type
    fall in the batches (by their ids in ``data.to_homogeneous()``), a batch's edges are every relation's
    edges among them, and its seeds its members of ``input_nodes=(node_type, mask or ids)``.  A yielded
    batch is this rank's ``HeteroData`` (``batch.x_dict``, ``batch.adj_dict`` -- the model's
    ``edge_index_dict`` --, ``n_id`` per type); score ``out[input_type][:batch[input_type].batch_size]``.

    Args:
        local (torch_geometric.data.Data or torch_geometric.data.HeteroData): the rank's shard.
        batch_size (int, optional): nodes per batch (of all types), on average. (default: :obj:`1`)
        input_nodes (torch.Tensor or str or Tuple[str, torch.Tensor or None], optional): nodes to score, as
            :class:`~.neighbor_loader.DistributedNeighborLoader` takes them: global ids, a bool mask over all
            nodes or over the shard's rows; on a heterogeneous shard ``(node type, ids or mask)`` or a node
            type, required (without it the loader raises, naming these forms). (default: all)
        shuffle (bool, optional): draw new batches every epoch. (default: :obj:`False`)
        seed (int, optional): the random stream shared by all ranks. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the process group. (default: :obj:`None`)
        transform (Callable[[Data], Data], optional): a function applied to every batch (as PyG loaders' ``transform``;
            ``HeteroData`` batches on a heterogeneous shard). (default: :obj:`None`)
        prefetch (int, optional): batches prepared ahead on a background thread (``0``: none), as in
            :class:`~.neighbor_loader.DistributedNeighborLoader`. (default: :obj:`None`)
        drop_last (bool, optional): PyG's default ``False`` only: a batch is a random set of about ``batch_size``
            nodes, so there is no short last batch to drop (``DistributedNeighborLoader`` takes
            ``drop_last=True``). (default: :obj:`False`)
        num_parts (int, optional): batches per epoch instead of ``batch_size``, as PyG's ``RandomNodeLoader(data,
            num_parts)``: ``batch_size = ceil(N / num_parts)``, ``N`` the nodes of every type (``RandomNodeLoader``
            ports in one line: ``DistributedNodeSubsetLoader(data, num_parts=..., shuffle=True)``).
            (default: :obj:`None`)
        **pyg_options (optional): PyG loader keywords, as in :class:`~.neighbor_loader.DistributedNeighborLoader`.

    Shapes:
        - **input:** a shard of :math:`|\mathcal{V}_r|` rows (per node type on a heterogeneous shard),
          ``input_nodes`` :math:`(|\mathcal{V}_{in}|)` ids or :math:`(|\mathcal{V}|)` or :math:`(|\mathcal{V}_r|)`
          a mask *(optional)*
        - **output:** batches of :math:`|\mathcal{V}_b|` rows of this rank (``batch.x``
          :math:`(|\mathcal{V}_b|, F)`, ``x_dict`` per type), the first ``batch.batch_size`` the seeds
    """

    sampling: NodeSubsetSampling
    sampler: HomoSubsetSampler | HeteroSubsetSampler  # the strategy of the shard's kind

    def __init__(self, local: Data | HeteroData, batch_size: int | None = None, input_nodes: Any = None,
                 shuffle: bool | None = False, seed: int = 0, group: dist.ProcessGroup | None = None,
                 transform: Callable[[Any], Any] | None = None, prefetch: int | None = None,
                 drop_last: bool = False, num_parts: int | None = None, **pyg_options: Any) -> None:
        kind = HeteroSubsetSampler if isinstance(local, HeteroData) else HomoSubsetSampler
        batch_size = self._batch_size(lambda: kind.num_members(local), batch_size, num_parts)
        if drop_last:
            raise ValueError("DistributedNodeSubsetLoader(drop_last=True) is not supported: a batch is a random set "
                             "of about batch_size nodes (each node falls in one by a hash of its id), so there is no "
                             "short last batch to drop; DistributedNeighborLoader takes drop_last=True (exactly "
                             "batch_size seeds per batch)")
        super().__init__(kind(local, input_nodes, group, batch_size=batch_size, shuffle=bool(shuffle), seed=seed),
                         group, transform, prefetch, pyg_options)
        self.num_batches = self.sampling.num_batches(kind.num_members(local))

    def _batch_size(self, num_members: Callable[[], int], batch_size: int | None, num_parts: int | None) -> int:
        """``batch_size``, or the nodes per batch of PyG's ``RandomNodeLoader(data, num_parts)``:
        ``ceil(N / num_parts)`` of the ``N`` nodes the batches split (``num_members()``)."""
        if num_parts is None:
            return 1 if batch_size is None else batch_size
        if batch_size is not None:
            raise ValueError(f"{type(self).__name__} got batch_size={batch_size} and num_parts={num_parts}: pass one "
                             f"(num_parts, as PyG's RandomNodeLoader, sets batch_size = ceil(num_nodes / num_parts))")
        if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
            raise ValueError(f"num_parts must be a positive integer (batches per epoch), got {num_parts!r}")
        return max(1, math.ceil(num_members() / num_parts))

    def _seed_batch(self, epoch: int, node_ids: Tensor, num_batches: int) -> Tensor:
        return self.sampler.seed_batch(epoch, node_ids, num_batches)

    def _batches(self, epoch: int, global_seeds: Tensor) -> Iterator[Any]:
        batches = self.sampler.member_batches(epoch, self.num_batches)
        for b in range(self.num_batches):
            if global_seeds[b] == 0:
                continue
            batch = self.sample(*self.sampler.members(batches, b))  # type: ignore[arg-type]
            batch.global_batch_size = int(global_seeds[b])
            yield batch

    def sample(self, member: Any, halo_member: Any) -> Any:
        """The batch whose members are ``member`` (shard rows; per node type on a heterogeneous shard) and
        ``halo_member`` (halo columns; per source type); collective (the strategy's ``sample``).

        Args:
            member (torch.Tensor or Dict[str, torch.Tensor]): bool masks of the batch's rows.
            halo_member (torch.Tensor or Dict[str, torch.Tensor]): bool masks of the batch's halo columns.
        """
        return self.sampler.sample(member, halo_member, self.input_mask, self.sample_group)
