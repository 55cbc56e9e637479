"""distribute(): the SpMM algorithms on linear aggregations, 1.5D layouts, and bytes on the wire.

* ``algorithm=`` ("1d", "1d_overlap", "1d_overlap_p2p", "oblivious", "auto") for GCNConv,
  SAGEConv(mean), GINConv and GraphConv equals single-process PyG;
* ``"1.5d"`` / ``"1.5d_oblivious"`` with ``replication=2`` at P = 4 equal PyG for those
  layers, and a non-linear layer (GATConv) runs on the same grid through its column group;
* the bytes every exchange records equal the plan's prediction for the widths each layer moves
  (after its own transform), with the number of all-to-allv calls per layer;
* the input's halo is fetched once while the input (and the weight a narrowing ``Linear``
  multiplies it by before the exchange) is unchanged, and again after either changes; under
  ``torch.inference_mode()`` (tensors without a version counter) every call equals PyG.
"""
import warnings

import pytest
import torch
from layer_specs import OUT, D, F, _mlp
from test_distribute_layers import make_graph
from torch.nn import Linear, ReLU, Sequential
from torch_geometric.nn import ChebConv, EdgeConv, GATConv, GCNConv, GINConv, GraphConv, SAGEConv, TransformerConv

from pyg_sparsecomm import LossNormalisationWarning, comm_counter, distribute, shard, sync_gradients
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.nn import summary
from pyg_sparsecomm.testing import launch

LINEAR = {
    "GCNConv": (lambda: GCNConv(F, OUT), True),
    "SAGEConv(mean)": (lambda: SAGEConv(F, OUT), False),
    "GINConv": (lambda: GINConv(_mlp(F, OUT), train_eps=True), False),
    "GraphConv": (lambda: GraphConv(F, OUT), True),
}
ALGORITHMS_1D = ["1d", "1d_overlap", "1d_overlap_p2p", "oblivious", "auto"]


def run(build, weighted, data, edge_index, algorithm=None, rows=None, owner_mask=None, **kwargs):
    torch.manual_seed(0)
    layer = build()
    if algorithm is not None:
        distribute(layer, algorithm=algorithm, **kwargs)
    x = data.x.clone().requires_grad_()
    out = layer(x, edge_index, data.edge_weight) if weighted else layer(x, edge_index)
    up = torch.randn(40, out.size(1), generator=torch.Generator().manual_seed(2))
    up = up if rows is None else up[rows]
    if owner_mask is not None:
        up = up * owner_mask.view(-1, 1)
    (out * up).sum().backward()
    if algorithm is not None:
        sync_gradients(layer)
    return out.detach(), x.grad, {k: p.grad.clone() for k, p in layer.named_parameters()}


def _worker_1d(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    local = shard(make_graph(world_size))
    return local.n_id, {(name, algo): run(build, w, local, local.adj, algo, local.n_id)
                        for name, (build, w) in LINEAR.items() for algo in ALGORITHMS_1D}


def compare(per_rank, data, layers, algorithms):
    for name, (build, weighted) in layers.items():
        ref_out, ref_gx, ref_grads = run(build, weighted, data, data.edge_index)
        for algo in algorithms:
            out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
            for result in per_rank:
                n_id, results = result[0], result[-1]
                o, g, grads = results[(name, algo)]
                out[n_id] = o          # replicas compute the same rows
                gx[n_id] += g          # and hold shares of the input gradient
                for k, r in ref_grads.items():
                    torch.testing.assert_close(grads[k], r, atol=1e-4, rtol=1e-4,
                                               msg=lambda m: f"{name}/{algo} {k}: {m}")
            torch.testing.assert_close(out, ref_out, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name}/{algo}: {m}")
            torch.testing.assert_close(gx, ref_gx, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name}/{algo}: {m}")


@pytest.mark.parametrize("world_size", [2, 3])
def test_1d_algorithms_on_linear_layers(world_size):
    per_rank = launch(_worker_1d, world_size, timeout=300)
    compare(per_rank, make_graph(world_size), LINEAR, ALGORITHMS_1D)


GRID_LAYERS = {**LINEAR, "GATConv": (lambda: GATConv(F, OUT, heads=2), False)}


def _worker_15d(rank, world_size, c):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    data = make_graph(world_size // c)
    local = shard(data, grid=process_grid(c))
    results = {}
    for name, (build, w) in GRID_LAYERS.items():
        for algo in ["1.5d", "1.5d_oblivious"]:
            results[(name, algo)] = run(build, w, local, local.adj, algo, local.n_id, local.owner_mask,
                                        replication=c)
    return local.n_id, results


@pytest.mark.parametrize("world_size", [4])
def test_15d_layouts(world_size):
    c = 2
    per_rank = launch(_worker_15d, world_size, c, timeout=300)
    compare(per_rank, make_graph(world_size // c), GRID_LAYERS, ["1.5d", "1.5d_oblivious"])


# --- bytes -------------------------------------------------------------------------------
# (forward columns per halo row, backward columns per halo row, forward all-to-allv calls)
BYTES = {
    "GCNConv": (lambda: GCNConv(F, OUT), True, (OUT, OUT, 1)),                   # degrees folded into the rows
    "SAGEConv": (lambda: SAGEConv(F, OUT), False, (OUT, OUT, 1)),                 # lin_l moved first
    "SAGEConv(wide)": (lambda: SAGEConv(F, F + 2), False, (F, F, 1)),             # inputs are narrower
    "GINConv(narrowing)": (lambda: GINConv(Sequential(Linear(F, 3), ReLU(), Linear(3, OUT))), False,
                           (3, 3, 1)),                                            # nn's first Linear moved first
    "GATConv": (lambda: GATConv(F, OUT, heads=2, edge_dim=D), False, (2 + 2 * OUT, 2 + 2 * OUT, 1)),  # fused
    "TransformerConv": (lambda: TransformerConv(F, OUT, heads=2), False, (4 * OUT, 4 * OUT, 1)),
    # out-degrees folded (reverse) and fetched once, though lambda_max and the layer both need L
    "ChebConv": (lambda: ChebConv(F, OUT, K=3), True, (1 + 2 * F, 1 + 2 * F, 3)),
}


def _bytes_worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # a plain sum on purpose: only the bytes count
    data = make_graph(world_size)
    local = shard(data)
    counted = {}
    for name, (build, weighted, _) in BYTES.items():
        counter = comm_counter()
        counter.reset()
        torch.manual_seed(0)
        layer = distribute(build())
        kwargs = {"edge_attr": local.edge_attr} if name == "GATConv" else {}
        x = local.x.clone().requires_grad_()
        out = layer(x, local.adj, local.edge_weight) if weighted else layer(x, local.adj, **kwargs)
        out.sum().backward()
        counted[name] = {k: (int(counter.sent[k].sum()), int(counter.received[k].sum()), counter.calls[k])
                         for k in counter.sent}
    plan = local.adj.plan
    return sum(plan.send_counts), sum(plan.recv_counts), counted


@pytest.mark.parametrize("world_size", [2, 4])
def test_bytes_equal_the_plan_per_layer(world_size):
    for send_rows, recv_rows, counted in launch(_bytes_worker, world_size, timeout=300):
        for name, (_, _, (fwd, bwd, calls)) in BYTES.items():
            got = counted[name]
            assert got["halo"] == (send_rows * fwd * 4, recv_rows * fwd * 4, calls), name
            assert got["halo_grad"][:2] == (recv_rows * bwd * 4, send_rows * bwd * 4), name
            assert set(got) == {"halo", "halo_grad"}, name


def _auto_worker(rank, world_size):
    local = shard(make_graph(world_size))
    model = distribute(torch.nn.ModuleList([GCNConv(F, OUT), GATConv(OUT, OUT)]), algorithm="auto")
    model[1](model[0](local.x, local.adj), local.adj)
    return summary(model)


def test_summary_reports_the_auto_choice():
    text = launch(_auto_worker, 2)[0]
    assert "0 (GCNConv): distributed SpMM, algorithm='1d'" in text and "<- chosen" in text
    assert "1 (GATConv): source tensors exchanged (1D all-to-allv), aggregation as one CSR SpMM per head" in text


STATIC = {"GINConv": lambda: GINConv(_mlp(F, OUT)), "EdgeConv": lambda: EdgeConv(_mlp(2 * F, OUT))}
# their post-aggregation Linear (F -> OUT < F: lin_l, lin_rel) runs before the exchange: the rows
# moved are x W^T, so the reused halo must also follow W
NARROWING = {"SAGEConv": lambda: SAGEConv(F, OUT), "GraphConv": lambda: GraphConv(F, OUT)}
INFERENCE = {**STATIC, **NARROWING, "GCNConv(cached=True)": lambda: GCNConv(F, OUT, cached=True),
             "GATConv": lambda: GATConv(F, OUT, heads=2)}


def _static_worker(rank, world_size):
    data = make_graph(world_size)
    local = shard(data)
    local.adj = local.adj.with_value(None)  # compared with the unweighted edge_index call of PyG
    out = {}
    for name, build in STATIC.items():
        x = local.x.clone()
        torch.manual_seed(0)
        layer = distribute(build())
        sent = []
        for step in range(3):
            if step == 2:
                x.add_(1.0)  # an in-place change: the halo must be fetched again
            comm_counter().reset()
            y = layer(x, local.adj)
            sent.append(comm_counter().bytes_sent("halo"))
        out[name] = (y, sent)
    for name, build in NARROWING.items():
        torch.manual_seed(0)
        layer = distribute(build())
        sent, ys = [], []
        with torch.no_grad():  # evaluations: nothing needs a gradient
            for step in range(3):
                if step == 1:
                    for p in layer.parameters():
                        p.add_(0.1)  # an optimizer step between two evaluations of the same input
                comm_counter().reset()
                ys.append(layer(local.x, local.adj))
                sent.append(comm_counter().bytes_sent("halo"))
        out[name] = (ys, sent)
    for name, build in INFERENCE.items():  # inference tensors have no version counter to key the halos on
        torch.manual_seed(0)
        layer = distribute(build())
        with torch.inference_mode():
            x = local.x.clone()
            out[f"inference_mode {name}"] = [layer(x, local.adj) for _ in range(2)]
    return local.n_id, sum(local.adj.plan.send_counts), out


def test_input_halo_is_fetched_once_and_again_after_an_inplace_change():
    data = make_graph(2)
    for n_id, send_rows, results in launch(_static_worker, 2):
        for name, build in STATIC.items():
            y, sent = results[name]
            assert sent == [send_rows * F * 4, 0, send_rows * F * 4], name
            torch.manual_seed(0)
            ref = build()(data.x + 1.0, data.edge_index)
            torch.testing.assert_close(y, ref[n_id], atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")
        for name, build in NARROWING.items():
            # the old W's halo was reused after the step (every evaluation after the first read stale rows)
            ys, sent = results[name]
            assert sent == [send_rows * OUT * 4, send_rows * OUT * 4, 0], name
            torch.manual_seed(0)
            ref = build()
            with torch.no_grad():
                for p in ref.parameters():
                    p.add_(0.1)
                expected = ref(data.x, data.edge_index)[n_id]
            for y in ys[1:]:
                torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
        for name, build in INFERENCE.items():  # under torch.inference_mode(), called twice: PyG's result
            torch.manual_seed(0)
            expected = build()(data.x, data.edge_index).detach()[n_id]
            for y in results[f"inference_mode {name}"]:
                torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
