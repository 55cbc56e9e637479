"""torch.compile(model) of distributed models, in real gloo runs at P = 2: the compiled model's
outputs, input and parameter gradients equal the eager model's over several training steps, it
compiles during the first step only (no recompiles, no new graphs afterwards), and its graph
breaks are the documented ones (the eager exchange + SpMM regions; PyG's own data-dependent ops)."""
import torch
from layer_specs import F
from test_distribute_layers import make_graph
from torch._dynamo.utils import counters
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from pyg_sparsecomm import DistributedGCNConv, distribute, shard, sync_gradients
from pyg_sparsecomm.testing import launch

C = 4
STEPS = 3


class TwoLayerGCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = DistributedGCNConv(F, 8), DistributedGCNConv(8, C)

    def forward(self, x, adj, edge_weight):
        return self.conv2(self.conv1(x, adj, edge_weight).relu(), adj, edge_weight)


MODELS = {  # name -> (builder, backend, takes edge weights)
    "DistributedGCNConv": (TwoLayerGCN, "inductor", True),
    "distribute(GCN)": (lambda: distribute(GCN(F, 8, 2, C)), "inductor", True),
    "distribute(GraphSAGE)": (lambda: distribute(GraphSAGE(F, 8, 2, C)), "inductor", False),
    # aot_eager: the same capture and guards, without Inductor's minutes of code generation here
    "distribute(GAT)": (lambda: distribute(GAT(F, 8, 2, C, heads=2)), "aot_eager", False),
}


def steps(model, local, weighted):
    """STEPS SGD steps; per step the output, input gradient and parameter gradients, and what
    dynamo compiled during the step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    up = torch.randn(local.num_nodes, C, generator=torch.Generator().manual_seed(3))
    args = (local.edge_weight,) if weighted else ()
    history = []
    for _ in range(STEPS):
        counters.clear()
        opt.zero_grad()
        x = local.x.clone().requires_grad_()
        out = model(x, local.adj, *args)
        (out * up).sum().backward()
        sync_gradients(model)
        opt.step()
        compiled = {"graphs": counters["stats"]["unique_graphs"], "recompiles": sum(counters["recompiles"].values()),
                    "breaks": sum(counters["graph_break"].values())}
        params = getattr(model, "_orig_mod", model).named_parameters()  # without the compiled wrapper's prefix
        history.append((out.detach(), x.grad, {k: p.grad.clone() for k, p in params}, compiled))
    return history


def _worker(rank, world_size):
    data = make_graph(world_size)
    local = shard(data)
    results = {}
    for name, (build, backend, weighted) in MODELS.items():
        torch.manual_seed(0)
        eager = build()
        torch.manual_seed(0)
        compiled = torch.compile(build(), backend=backend)
        torch._dynamo.reset()
        results[name] = steps(eager, local, weighted), steps(compiled, local, weighted)
    return results


def close(a, b):
    """Equal up to float32 summation order (compiled kernels fuse and reorder), on ``b``'s scale."""
    return torch.allclose(a, b, atol=1e-5 * (1 + b.abs().max()), rtol=1e-5)


def test_compiled_equals_eager_and_compiles_once():
    failures = []
    for rank, results in enumerate(launch(_worker, 2, timeout=1200)):
        for name, (eager, compiled) in results.items():
            for step, ((o, gx, grads, _), (co, cgx, cgrads, stats)) in enumerate(zip(eager, compiled, strict=True)):
                if not close(co, o):
                    failures.append(f"rank {rank} {name} step {step}: output")
                if not close(cgx, gx):
                    failures.append(f"rank {rank} {name} step {step}: input gradient")
                failures += [f"rank {rank} {name} step {step}: grad {k}" for k in grads
                             if not close(cgrads[k], grads[k])]
                if step == 0 and not stats["graphs"]:
                    failures.append(f"rank {rank} {name}: nothing compiled")  # the test would not test
                if step > 0 and (stats["graphs"] or stats["recompiles"] or stats["breaks"]):
                    failures.append(f"rank {rank} {name} step {step}: compiled again {stats}")
    assert not failures, "; ".join(failures)
