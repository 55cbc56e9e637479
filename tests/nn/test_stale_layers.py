"""staleness=1 on whole models (issue #16, part 2): DistributedGCNConv and distribute(GraphSAGE)
over several SGD steps at P = 2..4 equal a single-process PyG reference that feeds each layer the
previous step's halo rows and halo gradients explicitly (``stale_reference.StaleHalos``): loss
curve, outputs and parameter gradients of every step.  Every step moves the bytes of the exact
model's step; step 0 is exact (bitwise, for ``"1d"``); evaluation is exact.
"""
import pytest
import torch
import torch.nn.functional as Fn
from configs_per_launch import by_world_size, run_each
from graphs import NUM_FEATURES, make_cases
from stale_reference import StaleHalos
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.nn.models import GraphSAGE

from pyg_sparsecomm import (
    DistributedGCNConv,
    comm_counter,
    distribute,
    distributed_loss,
    shard,
    sync_gradients,
)
from pyg_sparsecomm.algorithms.base import check_options
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.comm.halo_options import HaloOptions
from pyg_sparsecomm.testing import launch

STEPS, CLASSES = 4, 3


class TwoLayerGCN(torch.nn.Module):
    def __init__(self, conv=GCNConv, **kwargs):
        super().__init__()
        torch.manual_seed(11)
        self.conv1 = conv(NUM_FEATURES, 8, **kwargs)
        self.conv2 = conv(8, CLASSES, **kwargs)

    def forward(self, x, adj, edge_weight=None):
        return self.conv2(self.conv1(x, adj, edge_weight).relu(), adj, edge_weight)


def sage(aggr):
    torch.manual_seed(13)
    return GraphSAGE(NUM_FEATURES, 8, 3, 8, aggr=aggr)  # widths never narrow: the layers exchange their inputs


def _labels(data):
    gen = torch.Generator().manual_seed(5)
    return torch.randint(0, CLASSES, (data.num_nodes,), generator=gen), torch.rand(data.num_nodes, generator=gen) < 0.6


def _graph(world_size, c, case):
    data = make_cases(world_size // c)[case]
    data.y, data.train_mask = _labels(data)
    return data


def _train(model, local, edge_weight):
    """STEPS SGD steps; per step: global loss, owned outputs, synced gradients, halo bytes sent."""
    opt, counter, steps = torch.optim.SGD(model.parameters(), lr=0.5), comm_counter(), []
    for _ in range(STEPS):
        counter.reset()
        opt.zero_grad()
        out = model(local.x, local.adj, *edge_weight)
        loss = distributed_loss(Fn.cross_entropy, out[local.train_mask], local.y[local.train_mask])
        loss.backward()
        sync_gradients(model)
        steps.append({"loss": float(loss), "out": out.detach(),
                      "grads": {k: p.grad.clone() for k, p in model.named_parameters()},
                      "bytes": (counter.bytes_sent("halo"), counter.bytes_sent("halo_grad"))})
        opt.step()
    return steps


def _evaluate(model, twin, local, edge_weight):
    """The stale model in eval mode, and an exact twin with its parameters (must be bitwise equal)."""
    twin.load_state_dict(model.state_dict())
    model.eval(), twin.eval()
    with torch.no_grad():
        return model(local.x, local.adj, *edge_weight), twin(local.x, local.adj, *edge_weight)


def _worker(rank, world_size, configs):
    return run_each(_runs, configs)


def _runs(world_size, c, model_kind, case, algorithm, gamma):
    data = _graph(world_size, c, case)
    local = shard(data, grid=process_grid(c)) if c > 1 else shard(data)
    edge_weight = (local.edge_weight,) if model_kind == "gcn" and "edge_weight" in local else ()
    options = {"staleness": 1, "stale_smoothing": gamma}
    if model_kind == "gcn":
        layout = {"algorithm": algorithm, "replication": c}
        build = lambda **o: TwoLayerGCN(DistributedGCNConv, **layout, **o)  # noqa: E731
    else:
        build = lambda **o: distribute(sage(model_kind), algorithm=algorithm, **o)  # noqa: E731
    stale, exact = _train(build(**options), local, edge_weight), _train(build(staleness=0), local, edge_weight)
    trained = build(**options)
    _train(trained, local, edge_weight)
    return {"stale": stale, "exact": exact, "n_id": local.n_id,
            "eval": _evaluate(trained, build(), local, edge_weight)}


def _reference(model_kind, data, num_parts, gamma):
    """Single-process PyG with the previous step's halos fed explicitly (StaleHalos)."""
    n = data.num_nodes
    stale = StaleHalos(data.edge_index, data.part, n, num_parts, gamma)
    num_pairs = stale.pair_node.numel()
    if model_kind == "gcn":
        model = TwoLayerGCN()
        edge_index, weight = gcn_norm(data.edge_index, getattr(data, "edge_weight", None), n)
        ext = stale.extend_edges(edge_index)

        def forward(x):
            for layer, conv in enumerate([model.conv1, model.conv2]):
                z = stale.extend(layer, conv.lin(x))
                x = conv.propagate(ext, x=z, edge_weight=weight, size=(n + num_pairs, n)) + conv.bias
                x = x.relu() if layer == 0 else x
            return x
    else:
        model, ext = sage(model_kind), stale.extend_edges(data.edge_index)

        def forward(x):
            for layer, conv in enumerate(model.convs):
                x = conv((stale.extend(layer, x), x), ext)
                x = x.relu() if layer < len(model.convs) - 1 else x
            return x
    opt, steps = torch.optim.SGD(model.parameters(), lr=0.5), []
    for _ in range(STEPS):
        opt.zero_grad()
        out = forward(data.x)
        loss = Fn.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        (loss + stale.injection()).backward()
        stale.end_step()
        steps.append({"loss": float(loss.detach()), "out": out.detach(),
                      "grads": {k: p.grad.clone() for k, p in model.named_parameters()}})
        opt.step()
    return steps


def _check(per_rank, ref, where, bitwise_step0):
    tol = dict(rtol=1e-4, atol=1e-5)
    for rank, res in enumerate(per_rank):
        for t, (got, want) in enumerate(zip(res["stale"], ref, strict=True)):
            at = f"{where}, rank {rank}, step {t}"
            assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6), at
            torch.testing.assert_close(got["out"], want["out"][res["n_id"]], **tol, msg=lambda m, at=at: f"{at}: {m}")
            for name, grad in want["grads"].items():
                torch.testing.assert_close(got["grads"][name], grad, **tol,
                                           msg=lambda m, at=at, n=name: f"{at} {n}: {m}")
            assert got["bytes"] == res["exact"][t]["bytes"], f"{at}: a stale step moves an exact step's bytes"
        if bitwise_step0:  # step 0 exchanges synchronously: exactly the exact model's step
            assert torch.equal(res["stale"][0]["out"], res["exact"][0]["out"]), where
        torch.testing.assert_close(*res["eval"], rtol=0, atol=0, msg=f"{where}: eval is exact")
    assert any(res["exact"][0]["bytes"][0] for res in per_rank), f"{where}: nothing is exchanged"
    stale, exact = per_rank[0]["stale"][2:], per_rank[0]["exact"][2:]
    later = [abs(s["loss"] - e["loss"]) for s, e in zip(stale, exact, strict=True)]
    assert max(later) > 1e-6, f"{where}: the stale run equals the exact one (the test could not fail)"


#: (world size, replication, model: "gcn" or GraphSAGE's aggregation, graph, algorithm, stale_smoothing)
CASES = by_world_size([
    (2, 1, "gcn", "isolated", "1d", None), (2, 1, "gcn", "weighted", "1d", 0.5),
    (3, 1, "gcn", "empty_part", "1d_overlap", None), (3, 1, "gcn", "directed", "1d_overlap_p2p", 0.5),
    (4, 2, "gcn", "directed", "1.5d", None),
    (2, 1, "mean", "directed", "1d", None), (3, 1, "max", "empty_part", "1d", None),
    (3, 1, "mean", "isolated", "1d_overlap", None),
])


@pytest.mark.parametrize("world_size", sorted(CASES))
def test_stale_gcn_and_graphsage_equal_the_reference_fed_previous_halos(world_size, subtests):
    """DistributedGCNConv and distribute(GraphSAGE): every configuration of a world size in one launch."""
    per_config = launch(_worker, world_size, CASES[world_size], timeout=600)
    for config in CASES[world_size]:
        P, c, model_kind, case, algorithm, gamma = config
        with subtests.test(config=config):
            ref = _reference(model_kind, _graph(P, c, case), P // c, gamma)
            where = (f"GCN {algorithm} P={P} c={c} {case} γ={gamma}" if model_kind == "gcn"
                     else f"GraphSAGE({model_kind}) {algorithm} P={P} {case}")
            _check([r[config] for r in per_config], ref, where, model_kind == "gcn" and algorithm == "1d")


@pytest.mark.parametrize("name", ["oblivious", "1.5d_oblivious", "rdma"])
def test_algorithms_without_staleness_refuse_it_by_name(name):
    with pytest.raises(ValueError, match=f"algorithm={name!r} does not support staleness=1"):
        check_options(name, HaloOptions(staleness=1))


def _auto_worker(rank, world_size):
    local = shard(_graph(world_size, 1, "directed"))
    conv = DistributedGCNConv(NUM_FEATURES, 4, algorithm="auto", staleness=1)
    conv(local.x, local.adj).sum().backward()
    return conv.chosen_algorithm, [name for name, _, _ in conv.cost_report]


def test_auto_compares_only_algorithms_that_support_staleness():
    from pyg_sparsecomm.algorithms import ALGORITHMS
    for chosen, compared in launch(_auto_worker, 2):
        assert compared and all(ALGORITHMS[n].supports_staleness for n in compared), compared
        assert chosen in compared


def test_mini_batches_are_refused_by_name():
    from dataclasses import replace

    from torch_geometric.nn import SAGEConv

    from pyg_sparsecomm.plan.halo_adj import HaloAdj
    adj = shard(_graph(1, 1, "directed")).adj
    batch = HaloAdj(adj.rowptr, adj.col, adj.value, replace(adj.plan, minibatch=True))  # as the loaders mark them
    x = torch.randn(adj.num_owned, NUM_FEATURES)
    for layer in (DistributedGCNConv(NUM_FEATURES, 4, staleness=1), distribute(SAGEConv(NUM_FEATURES, 4), staleness=1)):
        with pytest.raises(ValueError, match="staleness needs full-graph training on the same shard"):
            layer(x, batch)


def _composed_worker(rank, world_size):
    data = _graph(world_size, 1, "directed")
    local = shard(data)
    edge_weight = (local.edge_weight,) if "edge_weight" in local else ()
    runs = {}
    for precision in (None, "bf16"):
        model = TwoLayerGCN(DistributedGCNConv, staleness=1, halo_precision=precision)
        runs[precision] = _train(model, local, edge_weight)
    # each layer's gcn_norm exchanges the degree of every sent row, exactly (fp32), at its first call on
    # the shard (the normalisation is kept per shard, issue 57)
    runs["degree_bytes"] = 2 * 4 * sum(local.adj.plan.send_counts)
    return runs


def test_staleness_composes_with_compressed_halos():
    """staleness=1 + halo_precision="bf16": every step moves exactly half the feature bytes of
    staleness=1 alone (2 B per value instead of 4; the degree exchange of the normalisation, at the
    first step, stays exact) and trains the same curve up to bf16 rounding."""
    for runs in launch(_composed_worker, 2):
        for step, (exact, half) in enumerate(zip(runs[None], runs["bf16"], strict=True)):
            degree = runs["degree_bytes"] if step == 0 else 0  # (kept per shard after the first step)
            assert half["bytes"] == (degree + (exact["bytes"][0] - degree) // 2, exact["bytes"][1] // 2)
            assert abs(half["loss"] - exact["loss"]) < 2e-2
        assert any(not torch.equal(a["out"], b["out"]) for a, b in zip(runs[None], runs["bf16"], strict=True))
