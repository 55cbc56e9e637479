"""distribute(model) == single-process PyG for whole models: BasicGNN models with BatchNorm
(and the other whole-graph norms) and jumping knowledge, torch_geometric.nn.Sequential, and
20-epoch training curves of GraphSAGE and GAT, in real gloo runs at P = 1..4."""
import warnings

import pytest
import torch
import torch.nn.functional as Fn
from layer_specs import D, F
from test_distribute_layers import make_graph, pna_degree
from torch_geometric.nn import GCNConv, SAGEConv, Sequential
from torch_geometric.nn.models import GAT, GCN, GIN, PNA, EdgeCNN, GraphSAGE

from pyg_sparsecomm import LossNormalisationWarning, distribute, distributed_loss, shard, sync_gradients
from pyg_sparsecomm.testing import launch

C = 4  # classes


def models(deg):
    aggr = ["mean", "min", "max", "std"]
    return {
        "GCN+batch_norm+jk=cat": (lambda: GCN(F, 8, 2, C, norm="batch_norm", jk="cat"), False),
        "GraphSAGE+batch_norm+jk=cat": (lambda: GraphSAGE(F, 8, 2, C, norm="batch_norm", jk="cat"), False),
        "GIN+jk=max": (lambda: GIN(F, 8, 2, C, jk="max"), False),
        "GAT(edge_dim)+layer_norm": (lambda: GAT(F, 8, 2, C, heads=2, edge_dim=D, norm="layer_norm"), True),
        "GATv2+graph_norm+jk=lstm": (lambda: GAT(F, 8, 2, C, v2=True, heads=2, norm="graph_norm", jk="lstm"), False),
        "GCN+instance_norm": (lambda: GCN(F, 8, 3, C, norm="instance_norm"), False),
        "PNA": (lambda: PNA(F, 8, 2, C, aggregators=aggr, scalers=["identity", "amplification"], deg=deg,
                            edge_dim=D, norm="batch_norm"), True),
        "EdgeCNN": (lambda: EdgeCNN(F, 8, 2, C), False),
        "Sequential": (lambda: Sequential("x, edge_index", [
            (GCNConv(F, 8), "x, edge_index -> x"), torch.nn.ReLU(), torch.nn.BatchNorm1d(8),
            (SAGEConv(8, C, aggr="max"), "x, edge_index -> x")]), False),
    }


def run_model(build, with_attr, data, edge_index, rows=None):
    torch.manual_seed(0)
    model = build()
    if rows is not None:
        distribute(model)
    x = data.x.clone().requires_grad_()
    kwargs = {"edge_attr": data.edge_attr} if with_attr else {}
    out = model(x, edge_index, **kwargs)
    up = torch.randn(make_graph(1).num_nodes, C, generator=torch.Generator().manual_seed(3))
    (out * (up if rows is None else up[rows])).sum().backward()
    if rows is not None:
        sync_gradients(model)
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    buffers = {k: b.clone() for k, b in model.named_buffers()}
    return out.detach(), x.grad, grads, buffers


def _model_worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    data = make_graph(world_size)
    local = shard(data)
    unweighted = local.adj.with_value(None)  # the models are compared with PyG called on edge_index alone
    return local.n_id, {name: run_model(build, attr, local, unweighted, local.n_id)
                        for name, (build, attr) in models(pna_degree(data)).items()}


def close(a, b):
    return torch.allclose(a, b, atol=1e-4 * (1 + b.abs().max()), rtol=1e-4)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_models_match_pyg(world_size):
    per_rank = launch(_model_worker, world_size, timeout=600)
    data = make_graph(world_size)
    failures = []
    for name, (build, attr) in models(pna_degree(data)).items():
        ref_out, ref_gx, ref_grads, ref_buffers = run_model(build, attr, data, data.edge_index)
        out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
        for n_id, results in per_rank:
            o, g, grads, buffers = results[name]
            out[n_id], gx[n_id] = o, g
            failures += [f"{name}: grad {k}" for k, r in ref_grads.items() if not close(grads[k], r)]
            failures += [f"{name}: buffer {k}" for k, r in ref_buffers.items()
                         if not close(buffers[k].double(), r.double())]
        failures += [f"{name}: output"] if not close(out, ref_out) else []
        failures += [f"{name}: input gradient"] if not close(gx, ref_gx) else []
    assert not failures, f"P={world_size}: " + ", ".join(dict.fromkeys(failures))


def curve(build, data, edge_index, epochs=20, distributed=False):
    torch.manual_seed(0)
    model = build()
    if distributed:
        distribute(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        out = model(data.x, edge_index)
        mask = data.train_mask
        if distributed:
            loss = distributed_loss(Fn.cross_entropy, out[mask], data.y[mask])
        else:
            loss = Fn.cross_entropy(out[mask], data.y[mask])
        loss.backward()
        if distributed:
            sync_gradients(model)
        opt.step()
        losses.append(float(loss))
    return losses


CURVE_MODELS = {
    "GraphSAGE": lambda: GraphSAGE(F, 16, 2, C, norm="batch_norm"),
    "GAT": lambda: GAT(F, 8, 2, C, heads=2),
}


def labelled(data):
    gen = torch.Generator().manual_seed(9)
    data.y = torch.randint(0, C, (data.num_nodes,), generator=gen)
    data.train_mask = torch.rand(data.num_nodes, generator=gen) < 0.6
    return data


def _curve_worker(rank, world_size):
    local = shard(labelled(make_graph(world_size)))
    return {name: curve(build, local, local.adj, distributed=True) for name, build in CURVE_MODELS.items()}


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_training_curves_match_pyg(world_size):
    per_rank = launch(_curve_worker, world_size, timeout=600)
    data = labelled(make_graph(world_size))
    for name, build in CURVE_MODELS.items():
        ref = curve(build, data, data.edge_index)
        assert ref[-1] < 0.8 * ref[0], f"{name}: the reference does not learn"
        for r in range(world_size):
            torch.testing.assert_close(torch.tensor(per_rank[r][name]), torch.tensor(ref), atol=1e-4, rtol=1e-4,
                                       msg=lambda m: f"{name} P={world_size} rank {r}: {m}")
