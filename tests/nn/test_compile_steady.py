"""The break-free steady state of ``torch.compile(distribute(model))`` (``nn/runtime/steady_call.py``,
issue 57 item 6), in real gloo runs at P = 1, 2, 3 (a directed graph with self-loops, duplicate edges and,
at P = 3, an empty part):

* after the compiled model's first step, ``torch._dynamo.explain`` finds 0 graph breaks in the forward
  of ``GCN``, ``GraphSAGE`` and ``GAT``;
* over several SGD steps (each from the eager model's parameters) the compiled model's outputs, input
  gradients and parameter gradients equal the eager model's; its first step runs eagerly (no record
  yet), its second compiles the steady state as one graph for the whole forward (``BasicGNN``'s forward,
  broken at the first step inside its layer loop, is traced again once the layers have records:
  ``nn/runtime/outer_frames.py``; so after ``torch._dynamo.reset()`` too), and so does the first whose
  ``x`` needs no gradient (which then reuses its halo, as eager calls do), the others compile nothing;
* the traced call keeps the checks: one rank passing the wrong rows makes every rank raise.
"""
import itertools
import warnings

import pytest
import torch
import torch._dynamo
from layer_specs import F
from test_distribute_layers import make_graph
from torch._dynamo.utils import counters
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from pyg_sparsecomm import LossNormalisationWarning, distribute, shard, sync_gradients
from pyg_sparsecomm.testing import launch

C, STEPS, GRAD_STEPS = 4, 5, 2  # steps from GRAD_STEPS on: x needs no gradient (a static halo)
MODELS = {"GCN": (lambda: GCN(F, 8, 2, C), 0), "GraphSAGE": (lambda: GraphSAGE(F, 8, 2, C), 0),
          "GAT": (lambda: GAT(F, 4, 2, C, heads=2), 0)}  # name -> (builder, steady-state graph breaks)


def _step(model, local, opt, up, grad):
    """One SGD step: the output, input gradient, parameter gradients and the graphs dynamo compiled."""
    counters.clear()
    opt.zero_grad()
    x = local.x.clone().requires_grad_() if grad else local.x  # the same tensor: its halo is reused
    out = model(x, local.adj)
    (out * up).sum().backward()
    sync_gradients(model)
    opt.step()
    params = getattr(model, "_orig_mod", model).named_parameters()
    return out.detach(), x.grad, {k: p.grad.clone() for k, p in params}, counters["stats"]["unique_graphs"]


def _lockstep(eager, compiled, local, reset):
    """STEPS SGD steps of both models, the compiled one starting each from the eager one's parameters
    (compared at equal parameters: float drift does not compound)."""
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (eager, compiled)]
    up = torch.randn(local.num_nodes, C, generator=torch.Generator().manual_seed(3))
    history = []
    for step in range(STEPS):
        with torch.no_grad():
            for p, q in zip(eager.parameters(), compiled.parameters(), strict=True):
                q.copy_(p)
        grad = step < GRAD_STEPS
        history.append((_step(eager, local, opts[0], up, grad), _step(compiled, local, opts[1], up, grad)))
        if reset and step == 0:  # dynamo traces the model's forward again, with the records in place
            torch._dynamo.reset()
    return history


def _graph(world_size):
    """The test graph without edge weights (a ``HaloAdj`` with values runs eagerly: see steady_call)."""
    data = make_graph(world_size)
    del data.edge_weight
    return data


def _worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)
    local = shard(_graph(world_size))
    results = {}
    for (name, (build, _)), reset in itertools.product(MODELS.items(), (False, True)):
        torch.manual_seed(0)
        eager = distribute(build())
        torch.manual_seed(0)
        model = distribute(build())
        torch._dynamo.reset()
        history = _lockstep(eager, torch.compile(model, backend="aot_eager"), local, reset)
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            breaks = torch._dynamo.explain(model)(local.x, local.adj).graph_break_count
        torch._dynamo.reset()
        results[name, reset] = history, breaks
    return results


def _close(a, b):
    scale = float(b.abs().max()) if b.numel() else 0.0
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-5 * (1 + scale), rtol=1e-5)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_steady_state_compiles_without_breaks_and_equals_eager(world_size):
    failures = []
    for rank, by_model in enumerate(launch(_worker, world_size, timeout=1200)):
        for (name, reset), (history, breaks) in by_model.items():
            where = f"P = {world_size} rank {rank} {name}{' (reset)' if reset else ''}"
            if breaks != MODELS[name][1]:
                failures.append(f"{where}: {breaks} graph breaks")
            for step, ((o, gx, grads, _), (co, cgx, cgrads, graphs)) in enumerate(history):
                if not (_close(co, o) and (gx is cgx is None or _close(cgx, gx))):
                    failures.append(f"{where} step {step}: output or input gradient")
                failures += [f"{where} step {step}: grad {k} {(cgrads[k] - grads[k]).abs().max():.2e}"
                             for k in grads if not _close(cgrads[k], grads[k])]
                if step not in (1, GRAD_STEPS) and graphs:  # the steady state, then x without gradient
                    failures.append(f"{where} step {step}: compiled {graphs} graphs")
            graphs = history[1][1][3]  # the steady state, traced at the second step: the whole forward
            if graphs != 1:
                failures.append(f"{where}: compiled {graphs} graphs at the second step")
    assert not failures, "; ".join(failures)


def _bad_rows(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)
    local = shard(_graph(world_size))
    torch.manual_seed(0)
    model = distribute(GraphSAGE(F, 8, 2, C))
    compiled = torch.compile(model, backend="aot_eager")
    for _ in range(3):
        compiled(local.x, local.adj)
    x = local.x[:-1] if rank == 0 else local.x  # rank 0 passes one row too few
    try:
        compiled(x, local.adj)
    except Exception as e:  # dynamo may wrap the op's error
        return str(e)
    return None


def test_traced_steady_call_raises_on_every_rank():
    for rank, error in enumerate(launch(_bad_rows, 2, timeout=600)):
        assert error is not None and "rows but this rank owns" in error, f"rank {rank}: {error}"


def _hooked(rank, world_size):
    """A compiled GCN whose first layer has a user's forward hook: that layer runs eagerly every call."""
    local = shard(_graph(world_size))
    torch.manual_seed(0)
    model = distribute(GCN(F, 8, 2, C))
    seen = []
    model.convs[0].register_forward_hook(lambda *_: seen.append(1))
    compiled = torch.compile(model, backend="aot_eager")
    outs = [compiled(local.x, local.adj) for _ in range(3)]
    eager = model(local.x, local.adj)
    return len(seen), [_close(o, eager) for o in outs], model.convs[1]._sparsecomm.steady is not None


def test_a_layer_with_a_user_hook_runs_eagerly():
    for rank, (calls, equal, recorded) in enumerate(launch(_hooked, 2, timeout=600)):
        assert calls == 4 and all(equal), f"rank {rank}: the hook ran {calls} times, outputs equal {equal}"
        assert recorded, f"rank {rank}: the layer without hooks left no record"
