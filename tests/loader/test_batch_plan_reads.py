"""Issue 56: a mini-batch's plan reads the device a fixed number of times (its counts in one read),
whatever the batch; batches are unchanged (the loaders' other tests compare them with the reference)."""
import torch
from torch_geometric.data import Data

from pyg_sparsecomm import shard
from pyg_sparsecomm.loader import DistributedNeighborLoader, neighbor_sampler


def _graph(num_nodes: int = 300, degree: int = 6) -> Data:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, num_nodes * degree), generator=gen)
    data = Data(x=torch.randn(num_nodes, 4, generator=gen), edge_index=edge_index, num_nodes=num_nodes)
    data.part, data.num_parts = torch.zeros(num_nodes, dtype=torch.long), 1
    return data


def test_build_batch_reads_the_device_once_at_one_rank(monkeypatch):
    local = shard(_graph(), rank=0, world_size=1)
    loader = DistributedNeighborLoader(local, [5, 3], batch_size=64, prefetch=0)
    reads = []
    real_build, real_tolist, real_item, real_bool = (neighbor_sampler.build_batch, torch.Tensor.tolist,
                                                     torch.Tensor.item, torch.Tensor.__bool__)
    counting = [False]

    def build(*args, **kwargs):
        counting[0] = True
        try:
            return real_build(*args, **kwargs)
        finally:
            counting[0] = False

    def counted(real, name):
        def read(self, *args, **kwargs):
            if counting[0]:
                reads.append(name)
            return real(self, *args, **kwargs)
        return read

    monkeypatch.setattr(neighbor_sampler, "build_batch", build)
    monkeypatch.setattr(torch.Tensor, "tolist", counted(real_tolist, "tolist"))
    monkeypatch.setattr(torch.Tensor, "item", counted(real_item, "item"))
    monkeypatch.setattr(torch.Tensor, "__bool__", counted(real_bool, "bool"))
    batches = list(loader)
    assert len(batches) == loader.num_batches > 1
    # one read of all the plan's counts per batch (before issue 56: five tolist() and one bool())
    assert reads == ["tolist"] * len(batches), reads
    for batch in batches:
        assert sum(batch.num_sampled_nodes) == batch.num_nodes
        assert sum(batch.num_sampled_edges) == batch.adj.nnz
