"""The node-wise classes of torch_geometric.nn.models the verdict table (nn/models/verdicts.py) calls exact,
under distribute() == single-process PyG in real gloo runs at P = 1..4 (outputs, input and parameter
gradients, buffers): MLP with BatchNorm, JumpingKnowledge (cat, max, lstm) after GCNConv layers,
HeteroJumpingKnowledge, GroupAddRev (PyG's RevGNN: its backward inverts its blocks, halo exchanges
included), PMLP in training (node-wise, its BatchNorm over all ranks) and evaluation (its SimpleConv),
LINKX (its SparseLinear's weight rows read by global id; with and without node features, weighted;
before: refused by the default exchange, the weight not a node tensor of the shard), GPSENodeEncoder,
and RECT_L's forward, embed and get_semantic_labels (its class centres over all ranks: before, each
rank's own centres)."""
import warnings

import pytest
import torch
from layer_specs import F
from test_distribute_layers import N, make_graph
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.nn.models import (
    LINKX,
    MLP,
    PMLP,
    RECT_L,
    GPSENodeEncoder,
    GroupAddRev,
    HeteroJumpingKnowledge,
    JumpingKnowledge,
)

from pyg_sparsecomm import LossNormalisationWarning, distribute, shard
from pyg_sparsecomm.testing import launch

C = 4


class JKNet(torch.nn.Module):
    """Two GCNConv layers combined by JumpingKnowledge (PyG's JK-Net)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList([GCNConv(F, 8), GCNConv(8, 8)])
        self.jk = JumpingKnowledge(mode, channels=8, num_layers=2)
        self.lin = torch.nn.Linear(16 if mode == "cat" else 8, C)

    def forward(self, x, edge_index):
        xs = []
        for conv in self.convs:
            x = conv(x, edge_index).relu()
            xs.append(x)
        return self.lin(self.jk(xs))


class HeteroJK(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(F, F)
        self.jk = HeteroJumpingKnowledge(["paper", "author"], "lstm", channels=F, num_layers=2)

    def forward(self, x, edge_index):
        h = self.lin(x)
        out = self.jk({"paper": [x, h], "author": [h, 2 * x]})
        return torch.cat([out["paper"], out["author"]], dim=1)


class RevBlock(torch.nn.Module):
    """The block of PyG's rev_gnn.py (LayerNorm, ReLU, SAGEConv)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(channels)
        self.conv = SAGEConv(channels, channels)

    def forward(self, x, edge_index):
        return self.conv(self.norm(x).relu(), edge_index)


class RevGNN(torch.nn.Module):
    """PyG's RevGNN: reversible GroupAddRev layers, whose backward inverts them (their halo exchanges again)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(F, 8)
        self.revs = torch.nn.ModuleList([GroupAddRev(RevBlock(4), num_groups=2) for _ in range(3)])
        self.out = torch.nn.Linear(8, C)

    def forward(self, x, edge_index):
        x = self.lin(x)
        for rev in self.revs:
            x = rev(x, edge_index)
        return self.out(x)


def _pmlp_eval(model, data, edge_index):
    model.eval()
    return model(data.x, edge_index)


def _rect_labels(model, data, edge_index):
    return _scatter_rows(model.get_semantic_labels(data.x, data.y, data.train_mask), data.train_mask)


def _scatter_rows(centres, mask):
    """The centres of the masked rows, placed at their rows (zeros elsewhere), so shards compare by row."""
    out = centres.new_zeros(mask.numel(), centres.size(1))
    out[mask] = centres
    return out


#: name -> (build, call(model, data, edge_index) -> node output)
MODELS = {
    "MLP+batch_norm": (lambda: MLP([F, 8, C], norm="batch_norm"), lambda m, d, e: m(d.x)),
    "JumpingKnowledge(cat)": (lambda: JKNet("cat"), lambda m, d, e: m(d.x, e)),
    "JumpingKnowledge(max)": (lambda: JKNet("max"), lambda m, d, e: m(d.x, e)),
    "JumpingKnowledge(lstm)": (lambda: JKNet("lstm"), lambda m, d, e: m(d.x, e)),
    "HeteroJumpingKnowledge": (HeteroJK, lambda m, d, e: m(d.x, e)),
    "PMLP train": (lambda: PMLP(F, 8, C, num_layers=3), lambda m, d, e: m(d.x, e)),
    "PMLP eval": (lambda: PMLP(F, 8, C, num_layers=3), _pmlp_eval),
    "GPSENodeEncoder": (lambda: GPSENodeEncoder(12, F, 4, F, expand_x=True, dropout_be=0.0, dropout_ae=0.0),
                        lambda m, d, e: m(d.x, d.x.flip(1))),
    "LINKX": (lambda: LINKX(N, F, 8, C, num_layers=2, num_edge_layers=2), lambda m, d, e: m(d.x, e)),
    "LINKX without x, weighted": (lambda: LINKX(N, F, 8, C, num_layers=1),
                                  lambda m, d, e: m(None, e, d.edge_weight)),
    "GroupAddRev (RevGNN)": (RevGNN, lambda m, d, e: m(d.x, e)),
    "RECT_L forward": (lambda: RECT_L(F, 8, dropout=0.0), lambda m, d, e: m(d.x, e)),
    "RECT_L embed": (lambda: RECT_L(F, 8, dropout=0.0), lambda m, d, e: m.embed(d.x, e)),
    "RECT_L get_semantic_labels": (lambda: RECT_L(F, 8), _rect_labels),
}


def labelled(world_size: int):
    data = make_graph(world_size)
    gen = torch.Generator().manual_seed(9)
    data.y = torch.randint(0, C, (data.num_nodes,), generator=gen)
    data.train_mask = torch.rand(data.num_nodes, generator=gen) < 0.6
    return data


def run(build, call, data, edge_index, rows=None):
    torch.manual_seed(0)
    model = build()
    if rows is not None:
        distribute(model)
    model.train()
    data = data.clone()
    data.x = data.x.clone().requires_grad_()
    out = call(model, data, edge_index)
    if out.requires_grad:
        up = torch.randn(labelled(1).num_nodes, out.size(1), generator=torch.Generator().manual_seed(3))
        (out * (up if rows is None else up[rows])).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    buffers = {k: b.clone() for k, b in model.named_buffers()}
    gx = data.x.grad if data.x.grad is not None else torch.zeros_like(data.x)
    return out.detach(), gx, grads, buffers


def _worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum
    local = shard(labelled(world_size))
    adj = local.adj.with_value(None)
    return local.n_id, {name: run(build, call, local, adj, local.n_id) for name, (build, call) in MODELS.items()}


def close(a, b):
    return torch.allclose(a, b, atol=1e-5 * (1 + b.abs().max()), rtol=1e-4)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_node_models_match_pyg(world_size):
    per_rank = launch(_worker, world_size, timeout=600)
    data = labelled(world_size)
    failures = []
    for name, (build, call) in MODELS.items():
        ref_out, ref_gx, ref_grads, ref_buffers = run(build, call, data, data.edge_index)
        out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
        for n_id, results in per_rank:
            o, g, grads, buffers = results[name]
            out[n_id], gx[n_id] = o, g
            failures += [f"{name}: parameters with a gradient"] if set(grads) != set(ref_grads) else []
            failures += [f"{name}: grad {k}" for k, r in ref_grads.items() if k in grads and not close(grads[k], r)]
            failures += [f"{name}: buffer {k}" for k, r in ref_buffers.items()
                         if not close(buffers[k].double(), r.double())]
        failures += [f"{name}: output"] if not close(out, ref_out) else []
        failures += [f"{name}: input gradient"] if not close(gx, ref_gx) else []
    assert not failures, f"P={world_size}: " + ", ".join(dict.fromkeys(failures))
