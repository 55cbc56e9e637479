"""The values of ``local.adj`` reach distributed layers as PyG's sparse ``adj_t`` path uses them.

A graph given as a weighted ``adj_t`` (``T.ToSparseTensor()``, PyG's GCNII idiom) is partitioned and
sharded; every layer called as ``conv(x, local.adj)`` under ``distribute()`` must equal single-process
PyG called with ``adj_t`` (real gloo runs, P = 1..4, directed graphs with weights, isolated nodes,
self-loops and duplicate edges, an empty part), and passing ``local.edge_weight`` explicitly as well
must give the same (not doubled).
"""
import warnings

import pytest
import torch
import torch_geometric.transforms as T
from graphs import NUM_FEATURES as F
from graphs import OUT, make_cases
from torch_geometric.nn import APPNP, ChebConv, EGConv, GCN2Conv, GCNConv, GINConv, GraphConv, SAGEConv, SGConv
from torch_geometric.nn.models import GCN

from pyg_sparsecomm import LossNormalisationWarning, distribute, shard
from pyg_sparsecomm.graph.inputs import adj_t_to_edge_index
from pyg_sparsecomm.testing import launch

#: name -> (build, call(layer, x, adj, edge_weight), how PyG's reference is called)
#: "adj_t": with the weighted adj_t; "normalising": with the weighted adj_t too, on graphs with
#: self-loops where PyG's adj_t path adds loops unlike its edge_index path (HaloAdj.self_loops);
#: "edge_weight": with edge_index and edge_weight (ChebConv takes no adj_t);
#: SAGEConv/GINConv: PyG drops a SparseTensor's values but aggregates w_ji x_j over a torch sparse
#: adj_t (spmm(adj_t, x, reduce=aggr)), the form T.ToSparseTensor() makes without torch_sparse
LAYERS = {
    "GCN2Conv(normalize=False)": (lambda: GCN2Conv(F, alpha=0.1, theta=0.5, layer=1, normalize=False),
                                  lambda m, x, a, w=None: m(x, 0.5 * x, a, w), "adj_t"),
    "GCN2Conv": (lambda: GCN2Conv(F, alpha=0.1, theta=0.5, layer=2), lambda m, x, a, w=None: m(x, 0.5 * x, a, w),
                 "normalising"),
    "GCNConv(normalize=False)": (lambda: GCNConv(F, OUT, normalize=False), lambda m, x, a, w=None: m(x, a, w),
                                 "adj_t"),
    "GCNConv": (lambda: GCNConv(F, OUT), lambda m, x, a, w=None: m(x, a, w), "normalising"),
    "GraphConv": (lambda: GraphConv(F, OUT), lambda m, x, a, w=None: m(x, a, w), "adj_t"),
    "GraphConv(mean)": (lambda: GraphConv(F, OUT, aggr="mean"), lambda m, x, a, w=None: m(x, a, w), "adj_t"),
    "APPNP": (lambda: APPNP(K=2, alpha=0.1), lambda m, x, a, w=None: m(x, a, w), "normalising"),
    "SGConv": (lambda: SGConv(F, OUT, K=2), lambda m, x, a, w=None: m(x, a, w), "normalising"),
    "ChebConv": (lambda: ChebConv(F, OUT, K=2), lambda m, x, a, w=None: m(x, a, w), "edge_weight"),
    "GCN (BasicGNN)": (lambda: GCN(F, 8, 2, OUT, normalize=False), lambda m, x, a, w=None: m(x, a, edge_weight=w),
                       "adj_t"),
    "SAGEConv": (lambda: SAGEConv(F, OUT), lambda m, x, a, w=None: m(x, a), "adj_t"),
    "SAGEConv(sum)": (lambda: SAGEConv(F, OUT, aggr="sum"), lambda m, x, a, w=None: m(x, a), "adj_t"),
    "GINConv": (lambda: GINConv(torch.nn.Sequential(torch.nn.Linear(F, 16), torch.nn.ReLU(), torch.nn.Linear(16, OUT))),
                lambda m, x, a, w=None: m(x, a), "adj_t"),
}


def to_sparse_tensor(data):
    """``T.ToSparseTensor()(data)``, silencing torch's warnings at a process's first CSR tensor (the test's own)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse (CSR tensor support is in beta|invariant checks are)")
        return T.ToSparseTensor()(data)


def weighted_adj_t_cases(num_parts: int):
    """``{name: Data}``: graphs holding a weighted ``adj_t`` (as ``T.ToSparseTensor()`` leaves them)."""
    cases = make_cases(num_parts)
    out = {}
    for name in ("weighted", "self_loops_weighted", "isolated", "empty_part"):
        if name not in cases:
            continue
        data = cases[name].clone()
        if getattr(data, "edge_weight", None) is None:
            gen = torch.Generator().manual_seed(len(name))
            data.edge_weight = torch.rand(data.edge_index.size(1), generator=gen) + 0.25
        out[name] = to_sparse_tensor(data)
    return out


def _upstream(num_nodes: int, width: int) -> torch.Tensor:
    return torch.randn(num_nodes, width, generator=torch.Generator().manual_seed(5))


def _run(name, x, adj, num_nodes, edge_weight=None, rows=None):
    """Output and input gradient of LAYERS[name] (distributed when ``rows``, the owned global ids, are given)."""
    build, call, _ = LAYERS[name]
    torch.manual_seed(0)
    layer = build()
    if rows is not None:
        distribute(layer)
    x = x.clone().requires_grad_()
    out = call(layer, x, adj, edge_weight)
    up = _upstream(num_nodes, out.size(1))
    (out * (up if rows is None else up[rows])).sum().backward()
    return out.detach(), x.grad


def _worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    results = {}
    for case, data in weighted_adj_t_cases(world_size).items():
        local = shard(data)
        for name in LAYERS:
            for explicit in (False, True):
                try:
                    out, gx = _run(name, local.x, local.adj, data.num_nodes,
                                   local.edge_weight if explicit else None, local.n_id)
                    results[case, name, explicit] = (out, gx)
                except Exception as e:  # noqa: BLE001 - reported by name in the parent
                    results[case, name, explicit] = f"{type(e).__name__}: {e}"
        results[case, "n_id"] = local.n_id
    return results


def reference(name, data):
    """Single-process PyG on the whole graph, called as LAYERS says."""
    how = LAYERS[name][2]
    edge_index, weight = adj_t_to_edge_index(data.adj_t, data.num_nodes)
    if how in ("adj_t", "normalising"):
        return _run(name, data.x, data.adj_t, data.num_nodes)
    return _run(name, data.x, edge_index, data.num_nodes, weight)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_adj_values_reach_every_layer_as_pyg_adj_t(world_size):
    per_rank = launch(_worker, world_size, timeout=600)
    failures = []
    for case, data in weighted_adj_t_cases(world_size).items():
        for name in LAYERS:
            ref_out, ref_gx = reference(name, data)
            for explicit in (False, True):
                label = f"{case} {name}" + (" with edge_weight=local.edge_weight" if explicit else "")
                errors = [r[case, name, explicit] for r in per_rank if isinstance(r[case, name, explicit], str)]
                if errors:
                    failures.append(f"{label}: raised {errors[0]}")
                    continue
                out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
                for r in per_rank:
                    out[r[case, "n_id"]], gx[r[case, "n_id"]] = r[case, name, explicit]
                if not torch.allclose(out, ref_out, atol=1e-5 * (1 + ref_out.abs().max()), rtol=1e-4):
                    failures.append(f"{label}: output off by {float((out - ref_out).abs().max()):.3g}")
                elif not torch.allclose(gx, ref_gx, atol=1e-5 * (1 + ref_gx.abs().max()), rtol=1e-4):
                    failures.append(f"{label}: input gradient off by {float((gx - ref_gx).abs().max()):.3g}")
    assert not failures, f"P={world_size}:\n" + "\n".join(failures)


def _egconv_worker(rank, world_size):
    local = shard(weighted_adj_t_cases(world_size)["weighted"])
    layer = distribute(EGConv(F, 8, aggregators=["symnorm"]))
    try:
        layer(local.x, local.adj)
    except ValueError as e:
        unweighted = layer(local.x, local.adj.with_value(None))
        return str(e), tuple(unweighted.shape)
    return None, None


def _sage_max_worker(rank, world_size):
    local = shard(weighted_adj_t_cases(world_size)["weighted"])
    layer = distribute(SAGEConv(F, OUT, aggr="max"))
    with pytest.raises(ValueError, match=r"SAGEConv .* uses its aggregation 'max' of the weighted messages"):
        layer(local.x, local.adj)
    return tuple(layer(local.x, local.adj.with_value(None)).shape)


def test_weighted_torch_sparse_adj_t_with_a_max_aggregation_raises():
    """PyG's torch sparse adj_t path takes the max of w_ji x_j, which the exchange path cannot."""
    assert all(shape[1] == OUT for shape in launch(_sage_max_worker, 2))


def test_layer_that_cannot_take_the_values_raises_naming_why():
    """EGConv's "symnorm" reads adj_t's values in PyG, but its forward takes no edge_weight to pass them."""
    for message, shape in launch(_egconv_worker, 2):
        assert message is not None and "EGConv" in message and "local.adj.with_value(None)" in message
        assert shape is not None


class GCNII(torch.nn.Module):
    """PyG's examples/gcn2_cora.py model (dropout off): GCN2Conv(normalize=False) over a
    T.GCNNorm()-normalised adj_t, whose weights live only in adj_t."""

    def __init__(self, hidden: int = 16, num_layers: int = 3) -> None:
        super().__init__()
        self.lin_in, self.lin_out = torch.nn.Linear(F, hidden), torch.nn.Linear(hidden, 3)
        self.convs = torch.nn.ModuleList([GCN2Conv(hidden, alpha=0.1, theta=0.5, layer=i + 1, normalize=False)
                                          for i in range(num_layers)])

    def forward(self, x, adj_t):
        x = x_0 = self.lin_in(x).relu()
        for conv in self.convs:
            x = conv(x, x_0, adj_t).relu()
        return self.lin_out(x)


def gcnii_graph(num_parts: int):
    data = make_cases(num_parts)["directed"].clone()
    data.y = torch.arange(data.num_nodes) % 3
    data.train_mask = torch.arange(data.num_nodes) % 2 == 0
    return to_sparse_tensor(T.GCNNorm()(data))


def _train_gcnii(x, adj, y, mask, loss_fn, sync=None, steps=5):
    torch.manual_seed(0)
    model = GCNII()
    if sync is not None:
        distribute(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x, adj)[mask], y[mask])
        loss.backward()
        if sync is not None:
            sync(model)
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _gcnii_worker(rank, world_size):
    from pyg_sparsecomm import distributed_loss, sync_gradients
    local = shard(gcnii_graph(world_size))
    return _train_gcnii(local.x, local.adj, local.y, local.train_mask,  # distributed_loss: the whole-graph loss
                        lambda out, y: distributed_loss(torch.nn.functional.cross_entropy, out, y), sync_gradients)


@pytest.mark.parametrize("world_size", [2, 4])
def test_gcnii_with_gcn_norm_and_sparse_adj_t_trains_like_pyg(world_size):
    """The GCNII idiom (T.GCNNorm() + T.ToSparseTensor()): before, the weights were dropped (NaN loss)."""
    data = gcnii_graph(world_size)
    ref = _train_gcnii(data.x, data.adj_t, data.y, data.train_mask, torch.nn.functional.cross_entropy)
    for losses in launch(_gcnii_worker, world_size):
        assert torch.allclose(torch.tensor(losses), torch.tensor(ref), atol=1e-5), (losses, ref)
