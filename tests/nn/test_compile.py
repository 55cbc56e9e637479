"""torch.compile(model) of distributed models, in real gloo runs at P = 1, 2, 3 (an empty part at
P = 3): the compiled model's outputs, losses (the training curve), input and parameter gradients
equal the eager model's over several SGD steps, it compiles during the first step only (no
recompiles, no new graphs afterwards), and what it compiles is the documented count.  These models
pass edge weights (an argument, or the ``HaloAdj``'s values), which no steady-state record reproduces
(``nn/runtime/steady_call.py``; ``test_compile_steady.py`` covers the break-free steady state): every
distributed layer call runs eagerly as ONE graph break (``nn.runtime.call.EagerCall``), which dynamo's
counter counts three times (once per inlined frame around the disabled eager call), the
code between layers compiles; PyG's ``BasicGNN`` models loop over their layers, and dynamo runs a
frame with a graph break inside a loop eagerly as a whole (no graph; its first break counted)."""
import warnings

import torch
import torch._inductor.config
import torch.distributed as dist
from layer_specs import F
from test_distribute_layers import make_graph
from torch._dynamo.utils import counters
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from pyg_sparsecomm import DistributedGCNConv, LossNormalisationWarning, distribute, shard, sync_gradients
from pyg_sparsecomm.testing import launch

C = 4
STEPS = 3


class TwoLayerGCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = DistributedGCNConv(F, 8), DistributedGCNConv(8, C)

    def forward(self, x, adj, edge_weight):
        return self.conv2(self.conv1(x, adj, edge_weight).relu(), adj, edge_weight)


class DenseBetween(torch.nn.Module):
    """PyG layers with dense code between and after them: an activation, a residual, a head."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.head = GCNConv(F, 8), SAGEConv(8, 8), torch.nn.Linear(8, C)

    def forward(self, x, adj, edge_weight):
        h = self.conv1(x, adj, edge_weight).relu()
        h = h + 0.5 * self.conv2(h, adj).tanh()
        return self.head(h)


# name -> (builder, backend, takes edge weights, what the first step compiles: graphs, graph breaks)
MODELS = {
    # the relu between the layers is the one graph; a break at each layer call (counted three times)
    "DistributedGCNConv": (TwoLayerGCN, "inductor", True, (1, 6)),
    "distribute(DenseBetween)": (lambda: distribute(DenseBetween()), "inductor", True, (2, 6)),
    # BasicGNN's forward loops over its layers: the whole frame runs eagerly (nothing reaches a
    # backend; aot_eager has the same capture and guards as Inductor, without its code generation)
    "distribute(GCN)": (lambda: distribute(GCN(F, 8, 2, C)), "aot_eager", True, (0, 4)),
    "distribute(GraphSAGE)": (lambda: distribute(GraphSAGE(F, 8, 2, C)), "aot_eager", False, (0, 4)),
    "distribute(GAT)": (lambda: distribute(GAT(F, 8, 2, C, heads=2)), "aot_eager", False, (0, 4)),
}


def steps(model, local, weighted):
    """STEPS SGD steps; per step the whole-graph loss, the output, input gradient and parameter
    gradients, and what dynamo compiled during the step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    up = torch.randn(local.num_nodes, C, generator=torch.Generator().manual_seed(3))
    args = (local.edge_weight,) if weighted else ()
    history = []
    for _ in range(STEPS):
        counters.clear()
        opt.zero_grad()
        x = local.x.clone().requires_grad_()
        out = model(x, local.adj, *args)
        loss = (out * up).sum()
        loss.backward()
        sync_gradients(model)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        compiled = {"graphs": counters["stats"]["unique_graphs"], "recompiles": sum(counters["recompiles"].values()),
                    "breaks": sum(counters["graph_break"].values())}
        params = getattr(model, "_orig_mod", model).named_parameters()  # without the compiled wrapper's prefix
        history.append((total, out.detach(), x.grad, {k: p.grad.clone() for k, p in params}, compiled))
    return history


def _worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # a plain sum on purpose
    # Inductor compiles in this process: its default pool starts fresh interpreters (each importing
    # torch, seconds of CPU) in every rank, and the ranks share two cores
    torch._inductor.config.compile_threads = 1
    local = shard(make_graph(world_size))
    results = {}
    for name, (build, backend, weighted, _) in MODELS.items():
        torch.manual_seed(0)
        eager = build()
        torch.manual_seed(0)
        compiled = torch.compile(build(), backend=backend)
        torch._dynamo.reset()
        results[name] = steps(eager, local, weighted), steps(compiled, local, weighted)
    return results


def close(a, b):
    """Equal up to float32 summation order (compiled kernels fuse and reorder), on ``b``'s scale."""
    scale = float(b.abs().max()) if b.numel() else 0.0  # a rank owning no rows (P = 3) has empty outputs
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-5 * (1 + scale), rtol=1e-5)


def failures_of(world_size, results):
    failures = []
    for rank, by_model in enumerate(results):
        for name, (eager, compiled) in by_model.items():
            where = f"P = {world_size} rank {rank} {name}"
            expected = dict(zip(("graphs", "breaks"), MODELS[name][3], strict=True))
            for step, (e, c) in enumerate(zip(eager, compiled, strict=True)):
                (loss, o, gx, grads, _), (closs, co, cgx, cgrads, stats) = e, c
                checks = {"loss": close(closs, loss), "output": close(co, o), "input gradient": close(cgx, gx)}
                failures += [f"{where} step {step}: {what}" for what, ok in checks.items() if not ok]
                failures += [f"{where} step {step}: grad {k}" for k in grads if not close(cgrads[k], grads[k])]
                got = {k: stats[k] for k in expected}
                if step == 0 and (got != expected or stats["recompiles"]):
                    failures.append(f"{where}: compiled {stats}, documented {expected}")
                if step > 0 and (stats["graphs"] or stats["recompiles"] or stats["breaks"]):
                    failures.append(f"{where} step {step}: compiled again {stats}")
    return failures


def test_compiled_equals_eager_and_compiles_once():
    failures = []
    for world_size in (1, 2, 3):
        failures += failures_of(world_size, launch(_worker, world_size, timeout=1200))
    assert not failures, "; ".join(failures)
