"""What the node loaders share, whatever the kind of shard: the seeds, the epochs, the batch count.

Every rank must iterate the same batches in the same order, because sampling and training
exchange rows within a batch.  Every rank knows the global seed set (gathered once when the
loader is made, :mod:`.seeds`), hence every batch's global seed count in every epoch without
talking: all ranks skip the same batches (those without a seed on any rank, only likely for
batches of a few seeds), and ``len(loader)`` -- the batches an epoch yields -- is the same on
every rank, as are ``len(loader.dataset)`` (the global number of seeds) and every batch's
``global_batch_size`` (what a progress bar over seeds adds up).
"""
import inspect
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..comm.group import host_all_reduce, raise_together, twin_group, world_size
from ..comm.host_allocator import keep_host_buffers
from ..sampling.rules import NeighborSampling, NodeSubsetSampling
from .prefetch import PrefetchedBatches
from .pyg_options import prefetch_depth
from .seeds import check_in_order, global_seed_ids, owned_seed_mask, seeds_per_batch


class ShardSampler(Protocol):
    """What a loader's sampling strategy holds, whatever the kind of shard (one strategy per kind: a
    homogeneous shard's, a heterogeneous shard's, chosen by the loader)."""

    @property
    def sampling(self) -> NeighborSampling | NodeSubsetSampling: ...  # the batch rule
    @property
    def local(self) -> Data | HeteroData: ...  # the shard
    @property
    def input_nodes(self) -> Any: ...  # the seed candidates, as :mod:`.seeds` reads them
    @property
    def seed_n_id(self) -> Tensor: ...  # global ids of the rows the seeds are drawn from
    @property
    def num_nodes(self) -> int: ...  # their global number
    @property
    def device(self) -> torch.device: ...  # the shard's, where batches are sampled and planned


class DistributedLoader:
    """Base class: iterates the batches of one epoch on this rank's shard, sampled by a strategy of
    its kind (:class:`ShardSampler`; see the loaders)."""

    sampler: ShardSampler  # the strategy of the shard's kind (the loader picks it)
    sampling: NeighborSampling | NodeSubsetSampling
    num_batches: int  # batches an epoch draws from (set by the subclass; those without seeds are skipped)

    def __init__(self, sampler: ShardSampler, group: dist.ProcessGroup | None,
                 transform: Callable[[Any], Any] | None, prefetch: int | None, pyg_options: dict[str, Any]) -> None:
        keep_host_buffers()  # each batch's buffers reused, not faulted in afresh (comm/host_allocator.py)
        self.sampler, self.local, self.sampling = sampler, sampler.local, sampler.sampling
        self.seed_n_id, self.num_nodes, self.device = sampler.seed_n_id, sampler.num_nodes, sampler.device
        n_id = self.seed_n_id
        self.group, self.transform = group, transform
        self.prefetch = prefetch_depth(prefetch, pyg_options, type(self).__name__,
                                       inspect.signature(type(self).__init__).parameters)
        # a bad input_nodes on one rank raises on every rank (its peers would wait in the next collective)
        input_mask = raise_together(lambda: self._input_mask(sampler.input_nodes, n_id),
                                    f"{type(self).__name__}(input_nodes=...)", group)
        self.global_seeds = global_seed_ids(input_mask, n_id, self.num_nodes, group)  # on the host
        self.input_mask = input_mask.to(self.device)
        self.epoch = 0
        self._check_same_sampling()
        # The sampling thread's exchanges run on a CPU (gloo) group of their own: they never
        # interleave with the training step's exchanges, and never enter an NCCL communicator
        # or a GPU stream, so the order of NCCL collectives on the device is the training
        # thread's program order, the same on every rank (see :mod:`.prefetch`).
        self.sample_group = (twin_group(group, backend="gloo") if self.prefetch and world_size(group) > 1
                             else group)
        self._running: PrefetchedBatches | None = None
        self._counts: tuple[int, Tensor] | None = None  # (epoch key, seeds per batch), cached
        self._iterating: int | None = None  # the epoch being iterated
        self._taken = 0  # batches of that epoch the caller took (with those skipped on resuming)
        self._resume: tuple[int, int] | None = None  # (epoch, batches to skip) of load_state_dict

    def _input_mask(self, input_nodes: Tensor | None, n_id: Tensor) -> Tensor:
        check_in_order(input_nodes, self.sampling, type(self).__name__)
        return owned_seed_mask(input_nodes, n_id, self.num_nodes)

    @property
    def data(self) -> Data | HeteroData:
        """The shard the batches are cut from (PyG's ``loader.data``): attributes deleted from it
        (``del loader.data.x``) or added to it (node-level, one row per shard row) leave or join
        the batches."""
        return self.local

    def _check_same_sampling(self) -> None:
        """Ranks that drew batches by different rules would wait for each other forever in the
        first exchange that differs; one all-reduce at construction turns that into an error."""
        if world_size(self.group) == 1:
            return
        code = zlib.crc32(f"{self.sampling!r}; prefetching={bool(self.prefetch)}".encode())
        largest, minus_smallest = host_all_reduce([code, -code], dist.ReduceOp.MAX, self.group)
        if largest != -minus_smallest:
            raise ValueError(f"the ranks built {type(self).__name__} with different sampling arguments (this rank: "
                             f"{self.sampling}, prefetch={self.prefetch}); every rank must pass the same "
                             f"num_neighbors, batch_size, shuffle and seed, or they would sample different batches, "
                             f"and prefetch on all or none, or they would exchange on different process groups")

    def set_epoch(self, epoch: int) -> None:
        """Fixes the epoch the next iteration draws (as ``DistributedSampler.set_epoch``); without
        it, every iteration advances the epoch by one."""
        self.epoch = epoch

    @property
    def dataset(self) -> range:
        """``range`` of the global number of seeds (PyG's ``len(loader.dataset)``, e.g. a progress
        bar's total; add ``batch.global_batch_size`` per batch), the same on every rank."""
        return range(self.num_nodes if self.global_seeds is None else self.global_seeds.numel())

    def seeds_per_batch(self, epoch: int) -> Tensor:
        """``[num_batches]`` seeds of every batch of ``epoch`` over all ranks (no communication)."""
        key = epoch if self.sampling.shuffle else 0
        if self._counts is None or self._counts[0] != key:
            self._counts = (key, seeds_per_batch(self.sampling, epoch, self.global_seeds, self.num_nodes,
                                                 self.num_batches, self._seed_batch))
        return self._counts[1]

    def _seed_batch(self, epoch: int, node_ids: Tensor, num_batches: int) -> Tensor:
        """The batch of every seed candidate of ``node_ids`` (global ids) in ``epoch``."""
        return self.sampling.batch_of(epoch, node_ids, num_batches)

    def _epoch_batches(self, epoch: int) -> Tensor:
        """:meth:`seeds_per_batch` of ``epoch`` with the batches a resumed epoch skips set to 0."""
        counts = self.seeds_per_batch(epoch)
        if self._resume is None or self._resume[0] != epoch or self._resume[1] == 0:
            return counts
        skipped = torch.nonzero(counts).view(-1)[:self._resume[1]]
        return counts.clone().index_fill_(0, skipped, 0)

    def __len__(self) -> int:
        """Batches of the epoch being iterated (else of the next one): those with a seed on some
        rank, at most ``ceil(len(dataset) / batch_size)`` (in an epoch resumed from a checkpoint,
        those left); the same on every rank."""
        epoch = self.epoch if self._iterating is None else self._iterating
        return int(torch.count_nonzero(self._epoch_batches(epoch)))

    def state_dict(self) -> dict[str, int]:
        """Where the loader stands: the epoch being iterated and the batches of it taken so far
        (between epochs: the next epoch and ``0``).  The same on every rank, and whatever the
        number of ranks (the batches are those of the whole graph, :mod:`~pyg_sparsecomm.sampling`)."""
        if self._iterating is not None:
            return {"epoch": self._iterating, "position": self._taken}
        if self._resume is not None:  # loaded, not iterated yet: where the next iteration starts
            return {"epoch": self._resume[0], "position": self._resume[1]}
        return {"epoch": self.epoch, "position": 0}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continues where :meth:`state_dict` stood: the next iteration draws the saved epoch from
        the batch after the last one taken (the batches before it are skipped without sampling:
        every batch is drawn from its epoch and index alone); later epochs as usual."""
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or position < 0:
            raise ValueError(f"{type(self).__name__}.load_state_dict: epoch and position must be >= 0, got {state}")
        self.epoch, self._resume = epoch, (epoch, position)

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch
        self.epoch += 1
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None  # another epoch was asked for (set_epoch): the resume point is gone
        counts = self._epoch_batches(epoch)
        self._taken = 0 if self._resume is None else self._resume[1]
        batches: Iterator[Any] = self._batches(epoch, counts)
        if self.prefetch:
            if self._running is not None:  # an epoch left early: its thread stops before this one samples
                self._running.close()
            batches = self._running = PrefetchedBatches(batches, self.prefetch, self.device)
        self._iterating = epoch
        return self._epoch(epoch, batches)

    def _epoch(self, epoch: int, batches: Iterator[Any]) -> Iterator[Any]:
        try:
            for batch in batches:
                self._taken += 1
                yield batch if self.transform is None else self.transform(batch)
        finally:
            # the loop ended (exhausted, break, an exception, the iterator dropped): the prefetching
            # thread stops after the batches it was allowed and is joined here (:mod:`.prefetch`)
            if isinstance(batches, PrefetchedBatches):
                batches.close()
                if self._running is batches:
                    self._running = None
            if self._iterating == epoch:
                self._iterating = None
            if self._resume is not None and self._resume[0] == epoch:
                self._resume = None  # resumed once; iterating this epoch again draws all of it

    def _batches(self, epoch: int, global_seeds: Tensor) -> Iterator[Any]:
        """The batches of ``epoch`` whose ``global_seeds`` (per batch) are not 0, in order; collective."""
        raise NotImplementedError

