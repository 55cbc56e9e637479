"""What both distributed loaders share: the shard, the seeds, the epochs, the batch count.

Every rank must iterate the same batches in the same order, because sampling and training
exchange rows within a batch.  The number of batches per epoch comes from the global
number of candidates (one all-reduce when the loader is made) and is the same everywhere;
at the start of each epoch one all-reduce of every batch's seed count lets all ranks skip
the same batches (those with no seed on any rank, only likely for batches of a few nodes).
"""
import zlib
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from ..adj import HaloAdj
from ..comm.device_check import check_devices
from ..comm.group import collective_device, twin_group, world_size
from ..training import global_sum
from .prefetch import PrefetchedBatches
from .sampling import NeighborSampling, NodeSubsetSampling


class DistributedLoader:
    """Base class: iterates the batches of one epoch on this rank's shard (see subclasses)."""

    sampling: NeighborSampling | NodeSubsetSampling

    def __init__(self, local: Data, sampling: NeighborSampling | NodeSubsetSampling,
                 input_nodes: Tensor | None, group: dist.ProcessGroup | None,
                 transform: Callable[[Data], Data] | None = None, prefetch: int = 1) -> None:
        adj = getattr(local, "adj", None)
        if not isinstance(adj, HaloAdj) or getattr(local, "e_id", None) is None:
            raise ValueError("the loader takes a rank's shard: local = shard(data) (or load_shard(...)), "
                             "which carries adj and e_id")
        if getattr(local, "replication", 1) > 1:
            raise ValueError("this shard is a replicated 1.5D block row (shard(data, grid=...)); the mini-batch "
                             "loaders run on 1D shards: partition into P parts and call shard(data)")
        if adj.plan.world_size != world_size(group):
            raise ValueError(f"the shard was made for {adj.plan.world_size} ranks but the process group has "
                             f"{world_size(group)}")
        self.local, self.sampling, self.group, self.transform = local, sampling, group, transform
        self.adj = adj.cpu()  # batches are sampled and planned on the CPU
        self.e_id = local.e_id.cpu()
        self.input_mask = _input_mask(input_nodes, adj.num_owned)
        self.epoch = 0
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be a non-negative integer (batches sampled ahead), got {prefetch!r}")
        self.prefetch = prefetch
        self._check_same_sampling()
        # the sampling thread's exchanges never interleave with the training step's
        self.sample_group = twin_group(group) if prefetch and world_size(group) > 1 else group
        self._running: PrefetchedBatches | None = None

    def _check_same_sampling(self) -> None:
        """Ranks that drew batches by different rules would wait for each other forever in the
        first exchange that differs; one all-reduce at construction turns that into an error."""
        if world_size(self.group) == 1:
            return
        code = zlib.crc32(f"{self.sampling!r}; prefetching={bool(self.prefetch)}".encode())
        both = torch.tensor([code, -code], dtype=torch.long)
        both = both.to(collective_device(self.group) or both.device)
        check_devices("sampling check", self.group, both)
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=self.group)
        if int(both[0]) != -int(both[1]):
            raise ValueError(f"the ranks built {type(self).__name__} with different sampling arguments (this rank: "
                             f"{self.sampling}, prefetch={self.prefetch}); every rank must pass the same "
                             f"num_neighbors, batch_size, shuffle and seed, or they would sample different batches, "
                             f"and prefetch on all or none, or they would exchange on different process groups")

    def set_epoch(self, epoch: int) -> None:
        """Fixes the epoch the next iteration draws (as ``DistributedSampler.set_epoch``); without
        it, every iteration advances the epoch by one."""
        self.epoch = epoch

    def _seed_counts(self, batch_of_input: Tensor, num_batches: int) -> Tensor:
        """Seeds per batch over all ranks (one all-reduce of ``num_batches`` integers)."""
        return global_sum(torch.bincount(batch_of_input, minlength=num_batches), self.sample_group)

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        self.epoch += 1
        batches: Iterator[Data] = self._batches(epoch)
        if self.prefetch:
            if self._running is not None:  # an epoch left early: its thread stops before this one samples
                self._running.close()
            batches = self._running = PrefetchedBatches(batches, self.prefetch)
        if self.transform is None:
            return batches
        return (self.transform(batch) for batch in batches)

    def _batches(self, epoch: int) -> Iterator[Data]:
        raise NotImplementedError


def _input_mask(input_nodes: Tensor | None, num_owned: int) -> Tensor:
    if input_nodes is None:
        return torch.ones(num_owned, dtype=torch.bool)
    input_nodes = input_nodes.cpu()
    if input_nodes.dtype == torch.bool:
        if input_nodes.shape != (num_owned,):
            raise ValueError(f"input_nodes is a mask of shape {list(input_nodes.shape)} but this rank owns "
                             f"{num_owned} rows: pass the shard's own mask (e.g. local.train_mask)")
        return input_nodes
    if input_nodes.dtype != torch.long or input_nodes.dim() != 1:
        raise ValueError(f"input_nodes must be a bool mask or an int64 index of the shard's rows, "
                         f"got dtype {input_nodes.dtype} and shape {list(input_nodes.shape)}")
    if input_nodes.numel() and (int(input_nodes.min()) < 0 or int(input_nodes.max()) >= num_owned):
        raise ValueError(f"input_nodes indexes rows outside [0, {num_owned}): it must index this rank's "
                         f"shard rows (local ids), not global node ids")
    mask = torch.zeros(num_owned, dtype=torch.bool)
    mask[input_nodes] = True
    return mask
