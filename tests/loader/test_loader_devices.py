"""What a CPU can show of the loaders' device rules (issue 24, items 1, 2 and 4):

* every tensor of a shard's adjacency, its plan, a batch, its ``SampledAdj`` (trimmed or not)
  moves with ``.to(device)`` -- checked on the ``meta`` device, a real device change without a
  GPU, by walking every field of the moved objects;
* the loader's sampling thread runs on the caller's CUDA device (a new thread starts on device
  0; simulated with a per-thread current device);
* the sampling thread's exchanges use a gloo group of their own, never an NCCL communicator
  beside the training thread's;
* (issue 46) sampling a batch at P = 1 and 2 makes every tensor on the shard's device, reads the
  device once per hop on the path a GPU takes, and asks for rows in one all-to-all per hop."""
import dataclasses
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Mapping

import pytest
import torch
import torch.distributed as dist
from device_walk import tensors
from test_loader import make_graph
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch_geometric.data import Data, HeteroData

import pyg_sparsecomm.loader.base as loader_base
from pyg_sparsecomm import shard
from pyg_sparsecomm.comm import group as group_module
from pyg_sparsecomm.comm.group import collective_device
from pyg_sparsecomm.loader import DistributedNeighborLoader, DistributedNodeSubsetLoader
from pyg_sparsecomm.loader.neighbor_loader import seeds_by_batch
from pyg_sparsecomm.loader.prefetch import PrefetchedBatches
from pyg_sparsecomm.sampling import host_reads
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


def _two_rank_worker(rank, world_size):
    """At P = 2: the sampling group the prefetching loader asks for (its thread's exchanges), and
    an epoch of a homogeneous and a heterogeneous loader drawn on the accelerator's path
    (:func:`_sample_epoch`) beside the same epoch on the CPU's."""
    from test_hetero_loader import make_graph as make_hetero

    from pyg_sparsecomm import SparsityAwarePartitioner
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
    hetero = shard(SparsityAwarePartitioner(world_size, method="random", seed=1)(make_hetero()))
    epochs = {}
    for name, sampler in (("homogeneous", DistributedNeighborLoader(local, [3, 2], batch_size=9, prefetch=0)),
                          ("heterogeneous", DistributedNeighborLoader(hetero, [3, 2], input_nodes="paper",
                                                                     batch_size=8, prefetch=0))):
        on_device, mode = _sample_epoch(sampler, accelerator=True)
        on_cpu, _ = _sample_epoch(sampler, accelerator=False)
        epochs[name] = (_differences(on_device, on_cpu), mode.summary(), len(on_device), sampler.sampling.num_hops,
                        len(sampler.sampler.halo_requests.plans))
    return (calls, group_module.dist.get_backend(loader.sample_group), batches), epochs


@pytest.fixture(scope="module")
def two_ranks():
    return launch(_two_rank_worker, 2, timeout=180)


def test_the_sampling_thread_exchanges_on_a_gloo_group_of_its_own(two_ranks):
    """Issue 24, item 4: two threads issuing NCCL collectives on two communicators of one GPU may
    queue them in a different order on different ranks; the sampling thread asks for gloo."""
    for (calls, backend, batches), _ in two_ranks:
        assert calls == [{"backend": "gloo"}] and backend == "gloo" and batches > 0


class _HostPlacements(TorchFunctionMode):
    """Records the tensors a block of code makes without naming a device (a tensor factory called
    without ``device=`` lands on the host whatever the shard's device) and every trip to the host
    (``.numpy()``, ``.cpu()``), and counts per ``phase`` the reads of a tensor's values on the host
    (``.tolist()``, ``int(t)``, ... and the ops whose output's size depends on the data: ``nonzero``,
    ``unique``, ``bincount``, ``t[mask]``, ``repeat_interleave`` without ``output_size``) and the
    all-to-alls (:meth:`counting`): the stand-in, on a CPU, for a GPU run in which no tensor of the
    batch's sampling may stay on, or go through, the host, and each read waits for the device."""

    FACTORIES = (torch.arange, torch.full, torch.zeros, torch.ones, torch.empty, torch.tensor, torch.randint,
                 torch.rand, torch.randn)
    READS = (Tensor.item, Tensor.tolist, Tensor.__int__, Tensor.__bool__, Tensor.__float__, Tensor.__index__,
             torch.nonzero, Tensor.nonzero, torch.unique, Tensor.unique, torch.unique_consecutive,
             torch.masked_select, Tensor.masked_select, torch.bincount, Tensor.bincount)

    def __init__(self):
        super().__init__()
        self.found: list[str] = []
        self.phase = "seeds"
        self.reads: Counter = Counter()
        self.where: Counter = Counter()  # (phase, op, caller) of every read, for the assertions' messages
        self.all_to_all: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FACTORIES and kwargs.get("device") is None:
            self.found.append(f"torch.{func.__name__} without device=")
        if func in (Tensor.numpy, Tensor.cpu):
            self.found.append(f"Tensor.{func.__name__}")
        if self._reads(func, args, kwargs):
            caller = traceback.extract_stack(limit=2)[0]
            self.reads[self.phase] += 1
            self.where[(self.phase, func.__name__, f"{caller.filename.split('/')[-1]}:{caller.lineno}")] += 1
        return func(*args, **kwargs)

    def _reads(self, func, args, kwargs) -> bool:
        if func in self.READS:
            return True
        if func is Tensor.__getitem__:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            return any(isinstance(i, Tensor) and i.dtype == torch.bool for i in index)
        if func in (torch.repeat_interleave, Tensor.repeat_interleave):
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
            return isinstance(repeats, Tensor) and kwargs.get("output_size") is None
        return False

    def in_phase(self, phase, fn):
        """``fn`` counting under ``phase``."""
        def wrapped(*args, **kwargs):
            previous, self.phase = self.phase, phase
            try:
                return fn(*args, **kwargs)
            finally:
                self.phase = previous
        return wrapped

    def counting(self, fn):
        """``fn`` (an all-to-all) counted under the current phase."""
        def wrapped(*args, **kwargs):
            self.all_to_all[self.phase] += 1
            return fn(*args, **kwargs)
        return wrapped

    def summary(self) -> dict:
        return {"found": sorted(set(self.found)), "reads": dict(self.reads), "all_to_all": dict(self.all_to_all),
                "where": dict(self.where)}


def _sample_epoch(loader, accelerator: bool, epoch: int = 1):
    """Every batch of ``epoch`` drawn by ``loader.sample`` under a :class:`_HostPlacements` mode, its
    phases the seeds' batches (``seeds``), the hops (``sampling``) and ``build_batch`` (``plan``);
    ``accelerator``: on the path the samplers take on a GPU (counts read together, index sets made at
    known sizes: ``host_reads.waits_for_device`` answers yes)."""
    mode = _HostPlacements()
    module = sys.modules[type(loader.sampler).sample.__module__]  # the strategy of the shard's kind builds it
    build = "build_hetero_batch" if hasattr(module, "build_hetero_batch") else "build_batch"
    saved = getattr(module, build), dist.all_to_all_single, host_reads.waits_for_device
    setattr(module, build, mode.in_phase("plan", saved[0]))
    dist.all_to_all_single = mode.counting(saved[1])
    if accelerator:
        host_reads.waits_for_device = lambda device: True
    try:
        with mode:
            ids = loader.seed_n_id.index_select(0, loader.input_rows)
            seeds = loader.global_seeds
            if seeds is None:
                seeds = torch.arange(loader.num_nodes, device=loader.device)
            batch = loader.sampling.batch_of(epoch, ids, loader.num_batches, seeds)
            rows = seeds_by_batch(loader.input_rows, batch, loader.num_batches)
            mode.phase = "sampling"
            batches = [loader.sample(epoch, b, seed_rows) for b, seed_rows in enumerate(rows)]
    finally:
        setattr(module, build, saved[0])
        dist.all_to_all_single, host_reads.waits_for_device = saved[1], saved[2]
    return batches, mode


def _differences(batches, others) -> list[str]:
    """Paths of the tensors that differ between two lists of batches (every tensor they hold)."""
    out = []
    for i, (a, b) in enumerate(zip(batches, others, strict=True)):
        mine, theirs = dict(tensors(a, f"batch {i}")), dict(tensors(b, f"batch {i}"))
        out += [p for p in mine.keys() | theirs.keys()
                if p not in mine or p not in theirs or not torch.equal(mine[p], theirs[p])]
    return sorted(out)


def test_sampling_a_batch_keeps_every_tensor_on_the_shards_device():
    """Issue 46, item 2: the seeds' batches, the in-edge draws, the hop loops, the relabelling, the
    batch's plan and its attributes -- every step of a batch of the homogeneous (with and without
    ``drop_last``) and heterogeneous loaders at P = 1 -- place every tensor they make on the shard's
    device and never go through NumPy, on the path a GPU takes, whose batches equal the CPU path's;
    the hops read the device once each (the frontier's and its draws' sizes together), plus once per
    batch and source type (the rows peers asked for).  P = 2: :func:`test_sampling_at_two_ranks`.
    (The epoch's count of seeds per batch is host bookkeeping, outside.)"""
    from test_hetero_loader import make_graph as make_hetero

    from pyg_sparsecomm import SparsityAwarePartitioner
    local = shard(make_graph(1), rank=0, world_size=1)
    hetero = shard(SparsityAwarePartitioner(1, method="random", seed=1)(make_hetero()), rank=0, world_size=1)
    loaders = [DistributedNeighborLoader(local, [3, 2], batch_size=20, shuffle=True, prefetch=0, drop_last=True),
               DistributedNeighborLoader(local, [3, -1], batch_size=20, prefetch=0),
               DistributedNeighborLoader(hetero, [3, 2], input_nodes="paper", batch_size=8, prefetch=0)]
    edges = 0
    for loader in loaders:
        batches, mode = _sample_epoch(loader, accelerator=True)
        name = type(loader).__name__
        assert mode.found == [], (name, sorted(set(mode.found)))
        assert _differences(batches, _sample_epoch(loader, accelerator=False)[0]) == [], name
        per_batch = loader.sampling.num_hops + len(loader.sampler.halo_requests.plans)
        assert mode.reads["sampling"] == len(batches) * per_batch, (name, mode.summary()["where"])
        assert mode.reads["seeds"] == 1, (name, mode.summary()["where"])  # seeds_by_batch, once per epoch
        edges += sum(int(e.numel()) for b in batches for e in (b.e_id_dict.values() if isinstance(b, HeteroData)
                                                               else [b.e_id]))
    assert edges > 0


def test_sampling_at_two_ranks(two_ranks):
    """Issue 46, item 2 at P = 2 (gloo): on the accelerator's path no tensor of a batch stays on the
    host, its batches equal the CPU path's, the hops read the device once each (plus once per batch and
    source type), and a distributed batch's requests cost one all-to-all per hop, whatever the number
    of source types (they cost two per hop and source type: the counts, then the ids), and its plan one
    reply per source type."""
    for _, epochs in two_ranks:
        for name, (differences, summary, batches, hops, sources) in epochs.items():
            assert batches > 0 and differences == [], name
            assert summary["found"] == [], (name, summary["found"])
            assert summary["reads"]["sampling"] == batches * (hops + sources), (name, summary["where"])
            assert summary["all_to_all"] == {"sampling": batches * hops, "plan": batches * sources}, name
