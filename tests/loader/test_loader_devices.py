"""What a CPU can show of the loaders' device rules (issue 24, items 1, 2 and 4):

* every tensor of a shard's adjacency, its plan, a batch, its ``SampledAdj`` (trimmed or not)
  moves with ``.to(device)`` -- checked on the ``meta`` device, a real device change without a
  GPU, by walking every field of the moved objects;
* the loader's sampling thread runs on the caller's CUDA device (a new thread starts on device
  0; simulated with a per-thread current device);
* the sampling thread's exchanges use a gloo group of their own, never an NCCL communicator
  beside the training thread's."""
import dataclasses
import threading
from collections.abc import Mapping

import torch
from test_loader import make_graph
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch_geometric.data import Data, HeteroData

import pyg_sparsecomm.loader.base as loader_base
from pyg_sparsecomm import shard
from pyg_sparsecomm.comm import group as group_module
from pyg_sparsecomm.comm.group import collective_device
from pyg_sparsecomm.loader import DistributedNeighborLoader, DistributedNodeSubsetLoader
from pyg_sparsecomm.loader.prefetch import PrefetchedBatches
from pyg_sparsecomm.testing import launch


def tensors_off(obj, device_type: str, path: str = "", seen: set | None = None) -> list[str]:
    """Paths of every tensor reachable from ``obj`` (fields of package and PyG objects,
    dataclasses, mappings, sequences) that is not on ``device_type``."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, Tensor):
        return [] if obj.device.type == device_type else [f"{path} on {obj.device}"]
    if isinstance(obj, (int, float, str)):  # numbers of the package's own types too (batch_size's LocalCount)
        return []
    if isinstance(obj, Mapping):
        items = list(obj.items())
    elif isinstance(obj, (list, tuple)):
        items = list(enumerate(obj))
    elif dataclasses.is_dataclass(obj) or type(obj).__module__.startswith(("pyg_sparsecomm", "torch_geometric")):
        items = list(vars(obj).items())
    else:
        return []
    return [p for key, value in items for p in tensors_off(value, device_type, f"{path}.{key}", seen)]


def test_every_tensor_field_moves_to_the_device():
    local = shard(make_graph(1), rank=0, world_size=1)
    neighbor = next(iter(DistributedNeighborLoader(local, [3, 2], batch_size=20, prefetch=0)))
    subset = next(iter(DistributedNodeSubsetLoader(local, batch_size=30, prefetch=0)))
    trimmed = neighbor.adj.trim()
    assert trimmed.halo_hop.numel() >= 0 and neighbor.adj.part_sampled_nodes is not None
    objects = {"shard": local, "shard adj": local.adj, "plan": local.adj.plan, "batch": neighbor,
               "batch adj": neighbor.adj, "trimmed batch adj": trimmed, "subset batch": subset}
    for name, obj in objects.items():
        assert tensors_off(obj, "cpu") == [], name  # the walk sees them on the CPU first
        moved = (obj.clone() if isinstance(obj, Data) else obj).to("meta")  # Data.to moves in place
        assert tensors_off(moved, "meta") == [], name
        assert tensors_off(obj, "cpu") == [], name  # the original stays where it was
    moved = neighbor.adj.to("meta")
    for field in ("halo_hop", "send_hop", "part_sampled_nodes", "rowptr", "col"):
        assert getattr(moved, field).device.type == "meta", field


class _PerThreadCuda:
    """torch.cuda's current device as it behaves: per thread, 0 in a new thread."""

    def __init__(self):
        self.local = threading.local()

    def current_device(self):
        return getattr(self.local, "device", 0)

    def set_device(self, device):
        self.local.device = device.index if isinstance(device, torch.device) else int(device)


def _simulate_nccl_on_gpus(monkeypatch):
    cuda = _PerThreadCuda()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", cuda.current_device)
    monkeypatch.setattr(torch.cuda, "set_device", cuda.set_device)
    monkeypatch.setattr(group_module, "is_distributed", lambda group=None: True)
    monkeypatch.setattr(group_module.dist, "get_backend", lambda group=None: "nccl")
    return cuda


def test_the_sampling_thread_runs_on_the_callers_device(monkeypatch):
    """Issue 24, item 1: on every rank, the prefetching thread's collectives went to cuda:0."""
    local = shard(make_graph(1), rank=0, world_size=1)
    loader = DistributedNeighborLoader(local, [3], batch_size=30, prefetch=1)
    cuda = _simulate_nccl_on_gpus(monkeypatch)
    cuda.set_device(3)  # this rank's GPU, as init_distributed sets it

    def record(epoch, seeds=None):
        for _ in range(3):
            yield (torch.cuda.current_device(), collective_device(), threading.current_thread().name)

    seen = list(PrefetchedBatches(record(0, None), depth=2))
    monkeypatch.setattr(loader, "_batches", record)
    seen += list(loader)
    assert all(thread == "pyg_sparsecomm-prefetch" for *_, thread in seen)
    assert [(d, c) for d, c, _ in seen] == [(3, torch.device("cuda", 3))] * 6


def _sampling_group_worker(rank, world_size):
    calls = []
    real = loader_base.twin_group

    def spy(group=None, **kwargs):
        calls.append(kwargs)
        return real(group, **kwargs)

    loader_base.twin_group = spy
    try:
        local = shard(make_graph(world_size))
        loader = DistributedNeighborLoader(local, [3, 2], batch_size=9, input_nodes=local.train_mask, prefetch=1)
        batches = sum(1 for _ in loader)
    finally:
        loader_base.twin_group = real
    return calls, group_module.dist.get_backend(loader.sample_group), batches


def test_the_sampling_thread_exchanges_on_a_gloo_group_of_its_own():
    """Issue 24, item 4: two threads issuing NCCL collectives on two communicators of one GPU may
    queue them in a different order on different ranks; the sampling thread asks for gloo."""
    for calls, backend, batches in launch(_sampling_group_worker, 2, timeout=120):
        assert calls == [{"backend": "gloo"}] and backend == "gloo" and batches > 0


class _HostPlacements(TorchFunctionMode):
    """Records the tensors a block of code makes without naming a device (a tensor factory called
    without ``device=`` lands on the host whatever the shard's device) and every trip to the host
    (``.numpy()``, ``.cpu()``): the stand-in, on a CPU, for a GPU run in which no tensor of the
    batch's sampling may stay on, or go through, the host."""

    FACTORIES = (torch.arange, torch.full, torch.zeros, torch.ones, torch.empty, torch.tensor, torch.randint,
                 torch.rand, torch.randn)

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FACTORIES and kwargs.get("device") is None:
            self.found.append(f"torch.{func.__name__} without device=")
        if func in (Tensor.numpy, Tensor.cpu):
            self.found.append(f"Tensor.{func.__name__}")
        return func(*args, **kwargs)


def test_sampling_a_batch_keeps_every_tensor_on_the_shards_device():
    """Issue 46, item 2: the seeds' batches, the in-edge draws, the hop loops, the relabelling, the
    batch's plan and its attributes -- every step of a batch of the homogeneous (with and without
    ``drop_last``) and heterogeneous loaders at P = 1, where the exchanges return at once -- place
    every tensor they make on the shard's device and never go through NumPy.  (The epoch's count of
    seeds per batch is host bookkeeping, outside.)"""
    from test_hetero_loader import make_graph as make_hetero

    from pyg_sparsecomm import SparsityAwarePartitioner
    local = shard(make_graph(1), rank=0, world_size=1)
    hetero = shard(SparsityAwarePartitioner(1, method="random", seed=1)(make_hetero()), rank=0, world_size=1)
    loaders = [DistributedNeighborLoader(local, [3, 2], batch_size=20, shuffle=True, prefetch=0, drop_last=True),
               DistributedNeighborLoader(local, [3, -1], batch_size=20, prefetch=0),
               DistributedNeighborLoader(hetero, [3, 2], input_nodes="paper", batch_size=8, prefetch=0)]
    edges = 0
    for loader in loaders:
        ids = loader.seed_n_id[loader.input_rows]
        seeds = torch.arange(loader.num_nodes) if loader.global_seeds is None else loader.global_seeds
        with _HostPlacements() as mode:
            seed_batch = loader.sampling.batch_of(1, ids, loader.num_batches, seeds)
            batches = [loader.sample(1, b, loader.input_rows[seed_batch == b]) for b in range(loader.num_batches)]
        assert mode.found == [], (type(loader).__name__, sorted(set(mode.found)))
        edges += sum(int(e.numel()) for b in batches for e in (b.e_id_dict.values() if isinstance(b, HeteroData)
                                                               else [b.e_id]))
    assert edges > 0
