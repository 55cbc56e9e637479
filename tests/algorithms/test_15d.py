"""1.5D algorithms (issue #4) == single-process GCNConv on a (P/c) × c grid, in real gloo jobs.

Forward on every replica, input gradients summed over the replicas of a block
row, parameter gradients after ``sync_gradients`` over the whole world; the
upstream gradient is applied through ``owner_mask`` so every row counts once.
"""
import pytest
import torch
from graphs import CONFIGS, NUM_FEATURES, OUT, make_cases, reference_outputs, reference_state, upstream_grad
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import DistributedGCNConv, shard, sync_gradients
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.testing import launch

ALGORITHMS = ["1.5d", "1.5d_oblivious"]


def _worker(rank, world_size, c, config_names):
    grid = process_grid(c)
    results = {}
    for case, data in make_cases(world_size // c).items():
        local = shard(data, grid=grid)
        upstream = upstream_grad(data.num_nodes)[local.n_id] * local.owner_mask.view(-1, 1)
        for cfg_name in config_names:
            config = CONFIGS[cfg_name]
            for algorithm in ALGORITHMS:
                conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm=algorithm, replication=c, **config)
                conv.load_state_dict(reference_state(config))
                outs = []
                for _ in range(2 if config.get("cached") else 1):
                    conv.zero_grad()
                    x = local.x.clone().requires_grad_()
                    y = conv(x, local.adj, local.edge_weight)
                    (y * upstream).sum().backward()
                    sync_gradients(conv)
                    outs.append((y.detach(), x.grad, conv.lin.weight.grad.clone(), conv.bias.grad.clone()))
                results[(case, cfg_name, algorithm)] = (local.n_id, local.owner_mask, outs)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("world_size,c,configs", [
    (4, 2, list(CONFIGS)),
    (8, 2, ["default", "cached", "unnormalized"]),
    (16, 4, ["default"]),
    (2, 1, ["default"]),  # c = 1: the 1.5D code path degenerates to 1D
])
def test_15d_matches_single_process_gcnconv(world_size, c, configs):
    per_rank = launch(_worker, world_size, c, configs, timeout=600)
    cases = make_cases(world_size // c)
    assert len(per_rank[0]) == len(cases) * len(configs) * len(ALGORITHMS)
    refs = {}  # single-process GCNConv once per graph and configuration, not once per algorithm too
    for (case, cfg_name, algorithm), (_, _, first_outs) in per_rank[0].items():
        data = cases[case]
        if (case, cfg_name) not in refs:
            refs[case, cfg_name] = reference_outputs(data, CONFIGS[cfg_name])
        ref_y, ref_gx, ref_gw, ref_gb = refs[case, cfg_name]
        for call in range(len(first_outs)):
            where = f"{case}/{cfg_name}/{algorithm}/P={world_size},c={c}/call {call}"
            gx = torch.zeros_like(ref_gx)
            scored = torch.zeros(data.num_nodes, dtype=torch.long)
            for r in range(world_size):
                n_id, owner_mask, outs = per_rank[r][(case, cfg_name, algorithm)]
                y, grad_x, grad_w, grad_b = outs[call]
                # every replica holds the whole block row of the output
                torch.testing.assert_close(y, ref_y[n_id], atol=1e-5, rtol=1e-4,
                                           msg=lambda m, where=where: f"{where}: {m}")
                gx[n_id] += grad_x  # the input's gradient is the sum over its replicas
                scored[n_id[owner_mask]] += 1
                torch.testing.assert_close(grad_w, ref_gw, atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(grad_b, ref_gb, atol=1e-5, rtol=1e-4)
            assert bool((scored == 1).all()), f"{where}: every node must be scored by exactly one replica"
            torch.testing.assert_close(gx, ref_gx, atol=1e-5, rtol=1e-4, msg=lambda m, where=where: f"{where}: {m}")


def _edge_weight_worker(rank, world_size, c):
    data = make_cases(world_size // c)["weighted"]
    local = shard(data, grid=process_grid(c))
    conv = DistributedGCNConv(NUM_FEATURES, OUT, improved=True, algorithm="1.5d", replication=c)
    conv.load_state_dict(reference_state({"improved": True}))
    w = local.edge_weight.clone().requires_grad_()
    y = conv(local.x, local.adj, w)
    (y * upstream_grad(data.num_nodes)[local.n_id] * local.owner_mask.view(-1, 1)).sum().backward()
    return local.e_id, w.grad


def test_15d_learnable_edge_weights():
    """Edge-weight gradients (through the global degrees) summed over replicas equal GCNConv's."""
    per_rank = launch(_edge_weight_worker, 4, 2)
    data = make_cases(2)["weighted"]
    conv = GCNConv(NUM_FEATURES, OUT, improved=True)
    conv.load_state_dict(reference_state({"improved": True}))
    w = data.edge_weight.clone().requires_grad_()
    (conv(data.x, data.edge_index, w) * upstream_grad(data.num_nodes)).sum().backward()
    grad = torch.zeros_like(w)
    for e_id, grad_w in per_rank:
        grad.index_add_(0, e_id, grad_w)
    torch.testing.assert_close(grad, w.grad, atol=1e-5, rtol=1e-4)


class _TwoLayer(torch.nn.Module):
    def __init__(self, conv, **kwargs):
        super().__init__()
        torch.manual_seed(11)
        self.conv1 = conv(NUM_FEATURES, 8, **kwargs)
        self.conv2 = conv(8, 3, **kwargs)

    def forward(self, x, adj, edge_weight=None):
        return self.conv2(self.conv1(x, adj, edge_weight).relu(), adj, edge_weight)


def _labels(data):
    gen = torch.Generator().manual_seed(5)
    return torch.randint(0, 3, (data.num_nodes,), generator=gen), torch.rand(data.num_nodes, generator=gen) < 0.6


def _train_worker(rank, world_size, c, cases, steps):
    import torch.nn.functional as F

    from pyg_sparsecomm import distributed_loss
    losses = {}
    for case in cases:
        data = make_cases(world_size // c)[case]
        data.y, data.train_mask = _labels(data)
        local = shard(data, grid=process_grid(c))
        model = _TwoLayer(DistributedGCNConv, cached=True, algorithm="1.5d", replication=c)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        losses[case] = []
        for _ in range(steps):
            opt.zero_grad()
            out = model(local.x, local.adj, local.edge_weight)
            loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])
            loss.backward()
            sync_gradients(model)
            opt.step()
            losses[case].append(float(loss))
    return losses


def test_15d_whole_training_on_directed_graphs_with_isolated_nodes_and_empty_parts():
    """A few SGD steps of a 2-layer GCN on the corner-case graphs equal single-process GCNConv."""
    import torch.nn.functional as F
    cases, steps, P, c = ["directed", "isolated", "weighted", "empty_part"], 6, 4, 2
    per_rank = launch(_train_worker, P, c, cases, steps)
    for case in cases:
        data = make_cases(P // c)[case]
        y, mask = _labels(data)
        model = _TwoLayer(GCNConv, cached=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        ref = []
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(data.x, data.edge_index, getattr(data, "edge_weight", None))[mask], y[mask])
            loss.backward()
            opt.step()
            ref.append(float(loss.detach()))
        assert ref[-1] < ref[0], case  # it trains
        for r in range(P):
            torch.testing.assert_close(torch.tensor(per_rank[r][case]), torch.tensor(ref), rtol=1e-4, atol=1e-6,
                                       msg=lambda m, case=case: f"{case}: {m}")
