"""The checks of issue 23 are agreed once per shard, not per call (issue 57, item 2).

A steady-state call (the same shard, inputs of the same shapes) runs no collective but its halo
exchange, whose first exchange carries a header (``AgreementWatch`` in ``nn/runtime/checks.py``); a rank whose inputs
changed announces it there.  Real gloo runs at P = 2:

* steady calls issue no all-reduce and no all-gather, and give PyG's result each step;
* one rank switching to an equal shard (the same partition sharded again: a new plan object) at a
  later step makes every rank agree again, which passes: no hang, the same result;
* every rank switching together likewise;
* the errors of a bad later step on one rank are ``test_later_call_errors.py``'s, unchanged.
"""
import pytest
import torch
from graphs import NUM_FEATURES as F
from graphs import OUT
from test_first_use_checks import graph, partition_a
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.testing.call_profile import CallProfile

LAYERS = {"SAGEConv": lambda: SAGEConv(F, OUT), "GCNConv": lambda: GCNConv(F, OUT),
          "GCNConv(cached)": lambda: GCNConv(F, OUT, cached=True), "GATConv": lambda: GATConv(F, 2, heads=2)}
STEPS = 6


def _steps(rank, world_size, name, switch):
    """``STEPS`` forwards; at step 3 the ranks in ``switch`` take a new shard of the same partition."""
    data = graph(partition_a())
    local = shard(data)
    torch.manual_seed(0)
    layer = distribute(LAYERS[name]())
    outs, others = [], []
    for step in range(STEPS):
        if step == 3 and rank in switch:
            local = shard(data)  # equal, but another plan object: this rank's checks see a new shard
        x = local.x.clone().requires_grad_()
        with CallProfile() as profile:
            out = layer(x, local.adj)
        out.square().sum().backward()
        outs.append(out.detach())
        others.append(sum(v for k, v in profile.collectives.items() if k != "all_to_all_single"))
    return outs, others


@pytest.mark.parametrize("switch", [(), (0,), (1,), (0, 1)], ids=["none", "rank 0", "rank 1", "both"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_later_calls_agree_only_when_a_shard_changes(name, switch):
    for rank, (outs, others) in enumerate(launch(_steps, 2, name, switch, timeout=120, pg_timeout=20)):
        for step, out in enumerate(outs):
            torch.testing.assert_close(out, outs[0], msg=f"rank {rank}, step {step}")
        steady = [others[s] for s in range(3, STEPS) if s > 3 or not switch]
        assert others[-1] == 0 and others[-2] == 0, f"rank {rank}: collectives besides the halo's per step: {others}"
        if not switch:
            assert all(n == 0 for n in steady), f"rank {rank}: {others}"


def _model_steps(rank, world_size, switch_rank):
    """A two-layer GraphSAGE and GCN on shards where the last rank owns no rows (P = 3), one rank
    taking an equal new shard at step 3."""
    from test_distribute_layers import make_graph
    from torch_geometric.nn.models import GCN, GraphSAGE
    data = make_graph(world_size)
    local = shard(data)
    outs = []
    for build in (GraphSAGE, GCN):
        torch.manual_seed(0)
        model = distribute(build(data.x.size(1), 8, num_layers=2, out_channels=3))
        for step in range(STEPS):
            if step == 3 and rank == switch_rank:
                local = shard(data)
            out = model(local.x, local.adj)
            out.square().sum().backward()
            outs.append(out.detach())
    return outs


@pytest.mark.parametrize("switch_rank", [0, 2])
def test_models_on_a_rank_owning_nothing_agree_when_one_rank_switches(switch_rank):
    for rank, outs in enumerate(launch(_model_steps, 3, switch_rank, timeout=120, pg_timeout=20)):
        for model in range(2):
            first = outs[model * STEPS]
            for step in range(STEPS):
                torch.testing.assert_close(outs[model * STEPS + step], first, msg=f"rank {rank}, step {step}")
