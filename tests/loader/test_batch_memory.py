"""Issue 56 (item 3): a neighbour batch's memory grows with the batch, not with the shard.

Counted, not timed: every tensor a torch function creates while a rank draws one batch of 16 seeds
(fanouts [4, 3], at most 16 + 64 + 192 rows) from a shard of 40,000 rows (P = 1) or 30,000 rows
(P = 2, real gloo), through ``torch.overrides.TorchFunctionMode`` (views of existing tensors, which
allocate nothing, are left out).  Before: the hop of every shard row (``[num_owned]`` int64), a
mask of the shard's rows per hop, of its halo per hop, of its send lists and the batch row of
every shard row, 8 bytes per shard row at the largest; now sorted index sets of the batch's rows
(``sampling/row_sets.py``); the largest tensor left growing with the shard is the request message,
one bit per halo entry per peer.  Likewise a heterogeneous batch (``igbh_like``, 20,000 papers per
rank at P = 2: 160,000 bytes before, 4,736 after).  The batches are the reference's
(``tests/loader/test_loader.py``, ``test_hetero_loader.py``; ``test_loader_devices.py`` compares them
with the mask path an accelerator takes).
"""
import torch
from torch.overrides import TorchFunctionMode
from torch_geometric.data import Data

from pyg_sparsecomm import shard
from pyg_sparsecomm.loader import DistributedNeighborLoader
from pyg_sparsecomm.testing import launch

SEEDS, FANOUTS = 16, [4, 3]


class LargestTensor(TorchFunctionMode):
    """The largest tensor (bytes) any torch function returned that is not a view of its inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.nbytes, self.name = 0, ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        for t in _tensors(out):
            size = t.numel() * t.element_size()
            if size > self.nbytes and t.untyped_storage().data_ptr() not in inputs:
                self.nbytes, self.name = size, getattr(func, "__name__", str(func))
        return out


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _graph(num_nodes: int, world_size: int) -> Data:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, 4 * num_nodes), generator=gen)
    seeds = torch.randperm(num_nodes, generator=gen)[:4 * SEEDS]
    return Data(x=torch.randn(num_nodes, 2, generator=gen), edge_index=edge_index, num_nodes=num_nodes,
                seeds=seeds, part=torch.randint(0, world_size, (num_nodes,), generator=gen), num_parts=world_size)


def _largest(rank, world_size, num_nodes):
    data = _graph(num_nodes, world_size)
    local = shard(data)
    loader = DistributedNeighborLoader(local, FANOUTS, batch_size=SEEDS, input_nodes=data.seeds, shuffle=True,
                                       seed=2, prefetch=0)
    batches = iter(loader)
    next(batches)  # the first batch caches the shard's COO rows (once per shard, not per batch)
    with LargestTensor() as largest:
        batch = next(batches)
    return largest.nbytes, largest.name, local.adj.num_owned, batch.num_nodes


def test_a_batch_allocates_no_tensor_of_the_shards_size_at_one_rank():
    nbytes, name, num_owned, rows = _largest(0, 1, 40_000)
    assert rows <= SEEDS * (1 + 4 + 12)
    # a bool mask of the shard's rows is num_owned bytes; the batch's tensors are a few KiB
    assert nbytes < num_owned // 16, f"{name} made a tensor of {nbytes} bytes (shard rows: {num_owned})"


def test_a_batch_allocates_no_tensor_of_the_shards_size_at_two_ranks():
    for rank, (nbytes, name, num_owned, rows) in enumerate(launch(_largest, 2, 60_000)):
        assert rows <= SEEDS * (1 + 4 + 12)
        # the request message (one bit per halo entry, fewer than the shard's rows) is the largest left
        assert nbytes < num_owned // 4, f"rank {rank}: {name} made a tensor of {nbytes} bytes (rows: {num_owned})"


def _largest_hetero(rank, world_size, num_papers):
    from pyg_sparsecomm import SparsityAwarePartitioner
    from pyg_sparsecomm.graph.datasets import igbh_like
    data = igbh_like(num_papers=num_papers, num_features=2, seed=1)
    seeds = torch.randperm(num_papers, generator=torch.Generator().manual_seed(0))[:4 * SEEDS]
    local = shard(SparsityAwarePartitioner(world_size, method="random", seed=1)(data))
    loader = DistributedNeighborLoader(local, FANOUTS, batch_size=SEEDS, input_nodes=("paper", seeds), shuffle=True,
                                       seed=2, prefetch=0)
    batches = iter(loader)
    next(batches)
    with LargestTensor() as largest:
        next(batches)
    return largest.nbytes, largest.name, int(local["paper"].num_nodes)


def test_a_heterogeneous_batch_allocates_no_tensor_of_the_shards_size():
    for rank, (nbytes, name, papers) in enumerate(launch(_largest_hetero, 2, 40_000)):
        assert nbytes < papers // 4, f"rank {rank}: {name} made a tensor of {nbytes} bytes (papers: {papers})"
