"""A mini-batch layer call runs no collective besides its halo exchange (issue 56, item 1), and a bad
input on one rank at a later batch is still every rank's ``ValueError``.

Counted, not timed (:class:`~pyg_sparsecomm.testing.call_profile.CallProfile`): real gloo runs at
P = 2 and 3 of ``distribute()``d two-layer GraphSAGE, GCN and GAT on ``DistributedNeighborLoader``
batches (trimmed per layer), every layer call of a later batch counted on its own, every rank.
Before: every call all-reduced three check flags on the host (the per-call check, 8-40 ms per batch
at P = 2 in ``benchmarks/minibatch_speed.py --account``), and an input layer's cached-halo check
all-reduced once more.  The outputs and gradients still equal the single-process run of the same
batches (``tests/loader/test_loader.py``, unchanged).
"""
import warnings

import pytest
import torch
from test_later_call_errors import assert_every_rank_raised_the_same
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from pyg_sparsecomm import LossNormalisationWarning, distribute, shard
from pyg_sparsecomm.loader import DistributedNeighborLoader
from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.testing.call_profile import CallProfile

N, F, HIDDEN, C = 120, 6, 8, 3
HALO_EXCHANGE = "all_to_all_single"
MODELS = {"GraphSAGE": GraphSAGE, "GCN": GCN, "GAT": GAT}


def _graph(world_size: int) -> Data:
    gen = torch.Generator().manual_seed(3)
    edge_index = torch.randint(0, N, (2, 6 * N), generator=gen)
    return Data(x=torch.randn(N, F, generator=gen), edge_index=edge_index, num_nodes=N,
                y=torch.randint(0, C, (N,), generator=gen), part=torch.randint(0, world_size, (N,), generator=gen),
                num_parts=world_size)


def _profiled(model: torch.nn.Module, calls: list) -> None:
    """Counts the collectives of every layer call of ``model`` in ``calls`` (one dict per call)."""
    def start(conv, args, kwargs):
        profile = CallProfile()
        conv._profile_stack.append(profile)
        profile.__enter__()

    def stop(conv, args, output):
        profile = conv._profile_stack.pop()
        profile.__exit__(None, None, None)
        calls.append(dict(profile.collectives))

    for conv in model.convs:
        conv._profile_stack = []
        # before distribute()'s own pre-hook (its check stage), after its forward hook
        conv.register_forward_pre_hook(start, with_kwargs=True, prepend=True)
        conv.register_forward_hook(stop, always_call=True)


def _batch_calls(rank, world_size, name):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # plain sums: counts only
    local = shard(_graph(world_size))
    torch.manual_seed(0)
    model = distribute(MODELS[name](F, HIDDEN, num_layers=2, out_channels=C))
    loader = DistributedNeighborLoader(local, [4, 3], batch_size=16, shuffle=True, seed=1, prefetch=0)
    per_batch: list[list[dict]] = []
    for b, batch in enumerate(loader):
        calls: list[dict] = []
        if b == 3:  # two batches make the steady state; the fourth is counted
            _profiled(model, calls)
        out = model(batch.x, batch.adj, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)
        out[:batch.batch_size].square().sum().backward()
        per_batch.append(calls)
        if b == 3:
            break
    return per_batch[3]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_minibatch_layer_call_makes_no_collective_but_its_halo_exchange(name, world_size):
    for rank, calls in enumerate(launch(_batch_calls, world_size, name)):
        assert len(calls) == 2, f"rank {rank}: {len(calls)} layer calls counted"
        for layer, collectives in enumerate(calls):
            others = {k: v for k, v in collectives.items() if k != HALO_EXCHANGE}
            assert not others, f"rank {rank}, layer {layer}: collectives besides the halo's: {others}"
            assert collectives.get(HALO_EXCHANGE, 0) >= 1, f"rank {rank}, layer {layer}: no halo exchange"


# --- a bad input on one rank at a later batch: every rank's ValueError, as before ---------------

BAD_BATCH, BAD_RANK = 3, 1


def _bad_batch(rank, world_size, name):
    """Three steady batches, then one whose inputs differ on ``BAD_RANK``."""
    from torch_geometric.nn import GCNConv, SAGEConv
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)
    local = shard(_graph(world_size))
    torch.manual_seed(0)
    layer = distribute(GCNConv(F, C) if name.startswith("edge_weight") else SAGEConv(F, C))
    loader = DistributedNeighborLoader(local, [4], batch_size=16, shuffle=True, seed=1, prefetch=0)
    try:
        for b, batch in enumerate(loader):
            bad = b == BAD_BATCH and rank == BAD_RANK
            if name.startswith("edge_weight"):
                weight = torch.ones(batch.adj.nnz + (3 if bad else 0))
                out = layer(batch.x, batch.adj.with_value(None), weight)
            else:
                x = torch.cat([batch.x, batch.x[:, :1]], dim=1) if bad else batch.x
                out = layer(x, batch.adj)
            out.square().sum().backward()
            if b == BAD_BATCH:
                break
    except Exception as e:  # noqa: BLE001 - every rank reports what it raised
        return f"{type(e).__name__}: {e}"
    return None


#: scenario -> words every rank's message must contain
BAD_INPUTS = {
    "edge_weight of another length at batch 4": ["rank 1", "edge_weight has", "local.edge_weight"],
    "x of another width at batch 4": ["node features of different widths", f"rank 1: [*, {F + 1}]",
                                      "a later call on a mini-batch"],
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_a_bad_input_at_a_later_batch_raises_on_every_rank(name):
    messages = launch(_bad_batch, 2, name, timeout=120, pg_timeout=20)
    assert_every_rank_raised_the_same(messages, BAD_INPUTS[name])
