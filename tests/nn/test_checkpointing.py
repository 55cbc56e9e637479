"""Activation checkpointing around distributed layers == single-process PyG (issue 54 item 4), in real
gloo runs at P = 1..4: torch.utils.checkpoint (reentrant and not) around GCNConv layers, and a 28-layer
DeepGCN as PyG's ogbn_proteins_deepgcn.py builds it (DeepGCNLayer(GENConv, LayerNorm, ReLU, "res+",
ckpt_grad=True), reentrant checkpoints whose forward runs again inside backward, halo exchanges
included).  Before: use_reentrant=True ended in a bare AssertionError in nn/gradient_sync.py, or (the
last layer checkpointed) a LossNormalisationWarning for a loss that did go through distributed_loss and
gradients summed in pieces.  The warning fires when the loss really is a plain local mean; a backward
that raised midway (after a nested backward ran) leaves nothing behind for the next step."""
import warnings

import pytest
import torch
import torch.nn.functional as Fn
from layer_specs import F
from test_distribute_layers import make_graph
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import GCNConv, GENConv
from torch_geometric.nn.models import DeepGCNLayer

from pyg_sparsecomm import LossNormalisationWarning, distribute, distributed_loss, shard
from pyg_sparsecomm.testing import launch

C, H = 4, 8


class DeeperGCN(torch.nn.Module):
    """PyG's ogbn_proteins_deepgcn.py model (its edge encoder dropped: the graph has no edge features)."""

    def __init__(self, num_layers: int, ckpt_grad: bool) -> None:
        super().__init__()
        self.node_encoder = torch.nn.Linear(F, H)
        self.layers = torch.nn.ModuleList()
        for _ in range(num_layers):
            conv = GENConv(H, H, aggr="softmax", t=1.0, learn_t=True, num_layers=2, norm="layer")
            norm = torch.nn.LayerNorm(H, elementwise_affine=True)
            self.layers.append(DeepGCNLayer(conv, norm, torch.nn.ReLU(inplace=True), block="res+", dropout=0.0,
                                            ckpt_grad=ckpt_grad))
        self.lin = torch.nn.Linear(H, C)

    def forward(self, x, edge_index):
        x = self.node_encoder(x)
        x = self.layers[0].conv(x, edge_index)
        for layer in self.layers[1:]:
            x = layer(x, edge_index)
        x = self.layers[0].act(self.layers[0].norm(x))
        return self.lin(x)


class CheckpointedGCN(torch.nn.Module):
    """Three GCNConv layers, each under torch.utils.checkpoint (the last one too)."""

    def __init__(self, use_reentrant: bool) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList([GCNConv(F, H), GCNConv(H, H), GCNConv(H, C)])
        self.use_reentrant = use_reentrant

    def forward(self, x, edge_index):
        x = x.requires_grad_() if self.use_reentrant else x  # reentrant checkpoints need an input needing grad
        for i, conv in enumerate(self.convs):
            x = checkpoint(conv, x, edge_index, use_reentrant=self.use_reentrant)
            x = x.relu() if i < len(self.convs) - 1 else x
        return x


MODELS = {
    "DeepGCN(28 layers, ckpt_grad=True)": lambda: DeeperGCN(28, ckpt_grad=True),
    "checkpoint(GCNConv, use_reentrant=True)": lambda: CheckpointedGCN(use_reentrant=True),
    "checkpoint(GCNConv, use_reentrant=False)": lambda: CheckpointedGCN(use_reentrant=False),
}


def labelled(world_size: int):
    data = make_graph(world_size)
    gen = torch.Generator().manual_seed(9)
    data.y = torch.randint(0, C, (data.num_nodes,), generator=gen)
    data.train_mask = torch.rand(data.num_nodes, generator=gen) < 0.6
    return data


def step(build, data, edge_index, distributed: bool, plain_mean: bool = False):
    """Output, loss and parameter gradients of one training step (two backwards: the second checks
    that gradients accumulate once each)."""
    torch.manual_seed(0)
    model = build()
    if distributed:
        distribute(model)
    model.train()
    grads = []
    for _ in range(2):
        out = model(data.x, edge_index)
        mask = data.train_mask
        if distributed and not plain_mean:
            loss = distributed_loss(Fn.cross_entropy, out[mask], data.y[mask])
        else:
            loss = Fn.cross_entropy(out[mask], data.y[mask])
        loss.backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
    return out.detach(), grads


class _Stop(Exception):
    pass


class FailingGCN(CheckpointedGCN):
    """CheckpointedGCN whose backward raises (while ``fail``) after the last checkpoint's nested backward."""

    def __init__(self) -> None:
        super().__init__(use_reentrant=True)
        self.fail = True

    def forward(self, x, edge_index):
        x = x.requires_grad_()
        for i, conv in enumerate(self.convs):
            if i == len(self.convs) - 1 and self.fail:
                x.register_hook(self._stop)
            x = checkpoint(conv, x, edge_index, use_reentrant=True)
            x = x.relu() if i < len(self.convs) - 1 else x
        return x

    @staticmethod
    def _stop(grad):
        raise _Stop


def _after_failed_backward(local, adj):
    """The gradients of a normal step after a backward that raised once a nested backward had run."""
    torch.manual_seed(0)
    model = distribute(FailingGCN())
    mask = local.train_mask
    with pytest.raises(_Stop):
        distributed_loss(Fn.cross_entropy, model(local.x, adj)[mask], local.y[mask]).backward()
    model.fail = False
    model.zero_grad()
    distributed_loss(Fn.cross_entropy, model(local.x, adj)[mask], local.y[mask]).backward()
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def _worker(rank, world_size):
    local = shard(labelled(world_size))
    adj = local.adj.with_value(None)  # compared with PyG called on edge_index alone
    with warnings.catch_warnings():
        warnings.simplefilter("error", LossNormalisationWarning)  # the losses go through distributed_loss
        results = {name: step(build, local, adj, distributed=True) for name, build in MODELS.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LossNormalisationWarning)
        step(MODELS["checkpoint(GCNConv, use_reentrant=True)"], local, adj, distributed=True, plain_mean=True)
    warned = any(issubclass(w.category, LossNormalisationWarning) for w in caught)
    return local.n_id, results, warned, _after_failed_backward(local, adj)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_checkpointed_layers_match_pyg(world_size):
    per_rank = launch(_worker, world_size, timeout=900)
    data = labelled(world_size)
    failures = []
    for name, build in MODELS.items():
        ref_out, ref_grads = step(build, data, data.edge_index, distributed=False)
        out = torch.zeros_like(ref_out)
        for rank, (n_id, results, _, _) in enumerate(per_rank):
            o, grads = results[name]
            out[n_id] = o
            for i, (got, ref) in enumerate(zip(grads, ref_grads, strict=True)):
                assert set(got) == set(ref), f"{name} rank {rank}: parameters with a gradient differ"
                failures += [f"{name} rank {rank} backward {i}: grad {k}" for k, r in ref.items()
                             if not torch.allclose(got[k], r, atol=1e-5, rtol=1e-4)]
        failures += [f"{name}: output"] if not torch.allclose(out, ref_out, atol=1e-5, rtol=1e-4) else []
    assert not failures, f"P={world_size}: " + ", ".join(failures)
    if world_size > 1:  # one process: no gradient sum, no warning
        assert all(warned for _, _, warned, _ in per_rank), "a plain local mean loss must warn on every rank"
    _, ref_grads = step(MODELS["checkpoint(GCNConv, use_reentrant=True)"], data, data.edge_index, distributed=False)
    for rank, (_, _, _, grads) in enumerate(per_rank):
        assert set(grads) == set(ref_grads[0]), f"rank {rank}: a step after a failed backward lost gradients"
        for k, r in ref_grads[0].items():
            torch.testing.assert_close(grads[k], r, atol=1e-5, rtol=1e-4,
                                       msg=lambda m: f"rank {rank}, a step after a failed backward, {k}: {m}")
