"""torch.autocast("cpu", bfloat16) over distributed models (DistributedGCNConv with the "1d", "1d_overlap"
and "oblivious" SpMMs, distribute(GCN / GraphSAGE / GAT)) == single-process PyG under the same
autocast, to bfloat16's tolerance: outputs (and their dtype), input and parameter gradients, and a
short training curve, in real gloo runs at P = 2 and 4 on the directed test graph with isolated
nodes, self-loops, duplicate edges and (P = 4) an empty part."""
import warnings

import pytest
import torch
import torch.nn.functional as Fn
from layer_specs import F
from test_distribute_layers import make_graph
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from pyg_sparsecomm import (
    DistributedGCNConv,
    LossNormalisationWarning,
    distribute,
    distributed_loss,
    shard,
    sync_gradients,
)
from pyg_sparsecomm.testing import launch

C = 4  # classes
STEPS = 5


def models():
    """name -> (single-process builder, distributed builder); both start from the same parameters.
    The GCNs take the graph's edge weights."""
    def gcn_conv():
        torch.manual_seed(0)
        return GCNConv(F, C)

    def distributed_gcn_conv(algorithm="1d"):
        def make():
            conv = DistributedGCNConv(F, C, algorithm=algorithm)
            conv.load_state_dict(gcn_conv().state_dict())
            return conv
        return make

    def seeded(build):
        def make():
            torch.manual_seed(0)
            return build()
        return make

    return {
        "DistributedGCNConv": (gcn_conv, distributed_gcn_conv()),
        "DistributedGCNConv(1d_overlap)": (gcn_conv, distributed_gcn_conv("1d_overlap")),
        "DistributedGCNConv(oblivious)": (gcn_conv, distributed_gcn_conv("oblivious")),
        "GCN": (seeded(lambda: GCN(F, 8, 2, C)),) * 2,
        "GraphSAGE": (seeded(lambda: GraphSAGE(F, 8, 2, C)),) * 2,
        "GAT": (seeded(lambda: GAT(F, 8, 2, C, heads=2)),) * 2,
    }


def labels(num_nodes):
    gen = torch.Generator().manual_seed(4)
    return torch.randint(0, C, (num_nodes,), generator=gen), torch.rand(num_nodes, generator=gen) < 0.6


WEIGHTED = ("DistributedGCNConv", "DistributedGCNConv(1d_overlap)", "DistributedGCNConv(oblivious)", "GCN")


def run(name, model, data, edge_index, rows=None):
    """One forward/backward under autocast, then STEPS Adam steps; outputs, gradients, loss curve."""
    args = (data.edge_weight,) if name in WEIGHTED else ()
    y, mask = labels(make_graph(1).num_nodes)
    if rows is not None:
        y, mask = y[rows], mask[rows]
    up = torch.randn(make_graph(1).num_nodes, C, generator=torch.Generator().manual_seed(3))
    x = data.x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x, edge_index, *args)
    (out.float() * (up if rows is None else up[rows])).sum().backward()
    if rows is not None:
        sync_gradients(model)
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    curve = []
    for _ in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(data.x, edge_index, *args)
        if rows is None:
            loss = Fn.cross_entropy(logits[mask].float(), y[mask])
        else:
            loss = distributed_loss(Fn.cross_entropy, logits[mask].float(), y[mask])
        loss.backward()
        if rows is not None:
            sync_gradients(model)
        opt.step()
        curve.append(float(loss.detach()))
    return out.detach(), x.grad, grads, torch.tensor(curve)


def _worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the probe: a plain sum on purpose
    data = make_graph(world_size)
    local = shard(data)
    results = {}
    for name, (_, build) in models().items():
        model = build()
        if not name.startswith("DistributedGCNConv"):
            distribute(model)
        results[name] = run(name, model, local, local.adj, local.n_id)
    return local.n_id, results


def close(a, b, tol=1.6e-2):
    """bfloat16's tolerance (torch.testing's rtol for it), the same dtype."""
    return a.dtype == b.dtype and torch.allclose(a.float(), b.float(), atol=tol * (1 + b.abs().max()), rtol=tol)


@pytest.mark.parametrize("world_size", [2, 4])
def test_autocast_bf16_matches_pyg(world_size):
    per_rank = launch(_worker, world_size, timeout=600)
    data = make_graph(world_size)
    failures = []
    for name, (build, _) in models().items():
        ref_out, ref_gx, ref_grads, ref_curve = run(name, build(), data, data.edge_index)
        out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
        for n_id, results in per_rank:
            o, g, grads, curve = results[name]
            failures += [f"{name}: output dtype {o.dtype} != {ref_out.dtype}"] if o.dtype != ref_out.dtype else []
            out[n_id], gx[n_id] = o.to(out.dtype), g
            failures += [f"{name}: grad {k}" for k, r in ref_grads.items() if not close(grads[k], r)]
            failures += [f"{name}: loss curve {curve.tolist()} != {ref_curve.tolist()}"] \
                if not close(curve, ref_curve) else []
        failures += [f"{name}: output"] if not close(out, ref_out) else []
        failures += [f"{name}: input gradient"] if not close(gx, ref_gx) else []
    assert not failures, f"P={world_size}: " + "; ".join(dict.fromkeys(failures))
