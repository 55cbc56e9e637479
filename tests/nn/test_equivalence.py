"""DistributedGCNConv == single-process GCNConv: forward, input and parameter gradients.

Real multi-process gloo runs for P = 1..4 over every graph in ``graphs.py``
(undirected, directed, isolated nodes, edge weights, existing self-loops and
duplicate edges, an empty part, more parts than components) and every
GCNConv option, for both algorithms.
"""
import pytest
import torch
from graphs import CONFIGS, NUM_FEATURES, OUT, make_cases, reference_outputs, reference_state, upstream_grad
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import DistributedGCNConv, shard, sync_gradients
from pyg_sparsecomm.testing import launch

ALGORITHMS = ["1d", "oblivious", "1d_overlap", "1d_overlap_p2p"]


def _worker(rank, world_size):
    cases = make_cases(world_size)
    results = {}
    for case, data in cases.items():
        local = shard(data)
        upstream = upstream_grad(data.num_nodes)[local.n_id]
        for cfg_name, config in CONFIGS.items():
            for algorithm in ALGORITHMS:
                conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm=algorithm, **config)
                conv.load_state_dict(reference_state(config))
                outs = []
                for _ in range(2 if config.get("cached") else 1):  # second call uses the cache
                    conv.zero_grad()
                    x = local.x.clone().requires_grad_()
                    y = conv(x, local.adj, local.edge_weight)
                    (y * upstream).sum().backward()
                    sync_gradients(conv)
                    outs.append((y.detach(), x.grad, conv.lin.weight.grad.clone(), conv.bias.grad.clone()))
                results[(case, cfg_name, algorithm)] = (local.n_id, outs)
    return results


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_matches_single_process_gcnconv(world_size):
    per_rank = launch(_worker, world_size)
    cases = make_cases(world_size)
    assert len(per_rank[0]) == len(cases) * len(CONFIGS) * len(ALGORITHMS)
    refs = {}  # single-process GCNConv once per graph and configuration, not once per algorithm too
    for (case, cfg_name, algorithm), _ in per_rank[0].items():
        data = cases[case]
        if (case, cfg_name) not in refs:
            refs[case, cfg_name] = reference_outputs(data, CONFIGS[cfg_name])
        ref_y, ref_gx, ref_gw, ref_gb = refs[case, cfg_name]
        assert ref_gx.abs().sum() > 0
        num_calls = len(per_rank[0][(case, cfg_name, algorithm)][1])
        for call in range(num_calls):
            y = torch.zeros_like(ref_y)
            gx = torch.zeros_like(ref_gx)
            seen = torch.zeros(data.num_nodes, dtype=torch.long)
            for r in range(world_size):
                n_id, outs = per_rank[r][(case, cfg_name, algorithm)]
                y[n_id], gx[n_id] = outs[call][0], outs[call][1]
                seen[n_id] += 1
                # gradients were all-reduced: every rank holds the full parameter gradient
                torch.testing.assert_close(outs[call][2], ref_gw, atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(outs[call][3], ref_gb, atol=1e-5, rtol=1e-4)
            where = f"{case}/{cfg_name}/{algorithm}/P={world_size}/call {call}"
            assert bool((seen == 1).all()), f"{where}: every node must be owned exactly once"
            torch.testing.assert_close(y, ref_y, atol=1e-5, rtol=1e-4, msg=lambda m: f"{where}: {m}")
            torch.testing.assert_close(gx, ref_gx, atol=1e-5, rtol=1e-4, msg=lambda m: f"{where}: {m}")


def _edge_weight_worker(rank, world_size, dtype):
    results = {}
    for case in ["weighted", "self_loops_weighted"]:
        data = make_cases(world_size)[case]
        local = shard(data)
        conv = DistributedGCNConv(NUM_FEATURES, OUT, improved=True).to(dtype)
        conv.load_state_dict(reference_state({"improved": True}))
        x = local.x.to(dtype).requires_grad_()
        w = local.edge_weight.to(dtype).requires_grad_()
        y = conv(x, local.adj, w)
        (y * upstream_grad(data.num_nodes)[local.n_id].to(dtype)).sum().backward()
        sync_gradients(conv)
        results[case] = (local.n_id, local.e_id, y.detach(), x.grad, w.grad, conv.lin.weight.grad)
        for algorithm in ["oblivious", "1d_overlap", "1d_overlap_p2p"]:
            with pytest.raises(NotImplementedError, match="does not differentiate edge weights"):
                DistributedGCNConv(NUM_FEATURES, OUT, algorithm=algorithm)(
                    local.x, local.adj, local.edge_weight.clone().requires_grad_())
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_learnable_edge_weights_and_dtypes(dtype):
    """Gradients w.r.t. edge weights (through the global degrees) and float64 match GCNConv."""
    world_size = 3
    per_rank = launch(_edge_weight_worker, world_size, dtype)
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-9)
    for case, data in make_cases(world_size).items():
        if case not in per_rank[0]:
            continue
        conv = GCNConv(NUM_FEATURES, OUT, improved=True).to(dtype)
        conv.load_state_dict(reference_state({"improved": True}))
        x = data.x.to(dtype).requires_grad_()
        w = data.edge_weight.to(dtype).requires_grad_()
        ref = conv(x, data.edge_index, w)
        (ref * upstream_grad(data.num_nodes).to(dtype)).sum().backward()
        y, gx, gw = torch.zeros_like(ref), torch.zeros_like(x), torch.zeros_like(w)
        for r in range(world_size):
            n_id, e_id, yy, gxx, gww, glin = per_rank[r][case]
            assert yy.dtype == dtype
            y[n_id], gx[n_id], gw[e_id] = yy, gxx, gww
            torch.testing.assert_close(glin, conv.lin.weight.grad, **tol)
        torch.testing.assert_close(y, ref.detach(), **tol)
        torch.testing.assert_close(gx, x.grad, **tol)
        torch.testing.assert_close(gw, w.grad, **tol)
