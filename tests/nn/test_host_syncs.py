"""No host-device synchronisation in a training step's hot paths (issue 24, defect 8).

On CUDA, ``Tensor.item()``, ``bool(t)``, ``float(t)`` and ``int(t)`` wait for the device; the CPU
suite cannot see the wait, so it counts the calls instead: after a first step (which may set
things up), a whole training step (forward through every layer, ``distributed_loss``, backward,
``sync_gradients``, optimizer step) of distributed models, including the reused static halo of the
input features (GraphSAGE's first layer) and int8/fp16 compressed halos (an encode per exchange,
forward and backward), makes none.  Host-side integers read through numpy (which refuses device
tensors) are not counted: they cannot wait for a device.  Real gloo run at P = 2.
"""
import traceback
from collections import Counter

import torch
import torch.nn.functional as Fn
from layer_specs import F
from test_distribute_layers import make_graph
from torch_geometric.nn.models import GCN, GraphSAGE

from pyg_sparsecomm import DistributedGCNConv, distribute, distributed_loss, shard, sync_gradients
from pyg_sparsecomm.testing import launch

C = 4
SYNCING = ("item", "__bool__", "__float__", "__int__")


class TwoLayerGCN(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.conv1, self.conv2 = DistributedGCNConv(F, 8, **kwargs), DistributedGCNConv(8, C, **kwargs)

    def forward(self, x, adj):
        return self.conv2(self.conv1(x, adj).relu(), adj)


MODELS = {
    "distribute(GCN)": lambda: distribute(GCN(F, 8, 2, C)),
    "distribute(GraphSAGE)": lambda: distribute(GraphSAGE(F, 8, 2, C)),
    "distribute(GraphSAGE, int8)": lambda: distribute(GraphSAGE(F, 8, 2, C), halo_precision="int8"),
    "DistributedGCNConv(fp16)": lambda: TwoLayerGCN(halo_precision="fp16"),
}


class SyncCounter:
    """Counts (with the calling line) the Tensor methods that read a value on the host."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()
        self.originals = {name: getattr(torch.Tensor, name) for name in SYNCING}

    def __enter__(self):
        for name, original in self.originals.items():
            setattr(torch.Tensor, name, self._counting(name, original))
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self.originals.items():
            setattr(torch.Tensor, name, original)

    def _counting(self, name, original):
        def counted(tensor, *args, **kwargs):
            caller = traceback.extract_stack(limit=3)[0]
            self.calls[f"{name} at {caller.filename.split('/')[-1]}:{caller.lineno}"] += 1
            return original(tensor, *args, **kwargs)
        return counted


def step(model, local, y, mask, opt):
    opt.zero_grad()
    out = model(local.x, local.adj)
    distributed_loss(Fn.cross_entropy, out[mask], y[mask]).backward()
    sync_gradients(model)
    opt.step()


def _worker(rank, world_size):
    local = shard(make_graph(world_size))
    gen = torch.Generator().manual_seed(4)
    y, mask = torch.randint(0, C, (local.num_nodes,), generator=gen), torch.arange(local.num_nodes) % 2 == 0
    syncs = {}
    for name, build in MODELS.items():
        torch.manual_seed(0)
        model = build()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step(model, local, y, mask, opt)  # the first step sets up (algorithm choice, caches)
        with SyncCounter() as counter:
            step(model, local, y, mask, opt)
        syncs[name] = dict(counter.calls)
    return syncs


def test_no_host_device_syncs_per_step():
    failures = [f"rank {rank} {name}: {calls}" for rank, syncs in enumerate(launch(_worker, 2, timeout=600))
                for name, calls in syncs.items() if calls]
    assert not failures, "; ".join(failures)


def test_sync_counter_counts():
    """The counter sees the calls it is meant to see (else the test above could not fail)."""
    t = torch.ones(2)
    with SyncCounter() as counter:
        t.sum().item(), bool(t.all()), float(t[0]), int(t[1])
    assert sum(counter.calls.values()) == 4
