"""An error on one rank in a LATER step (after the first-use check passed) raises on every rank with
the original message (issue 23, "no silent trap", last item).

Before: the full ``x`` or another partition's shard passed on one rank at step 5, an edge weight of
another length at step 3, or a compressed stale halo (``staleness=1``) of non-finite values raised
on that rank only (or mismatched the collectives), and its peer saw "Connection closed by peer" or
the timeout.  Each scenario runs at P = 2 (gloo) and every rank must raise the message; consistent
later calls still run no all-gather.
"""
import warnings

import pytest
import torch
from graphs import NUM_FEATURES as F
from graphs import OUT
from test_first_use_checks import N, graph, partition_a, partition_b
from torch_geometric.nn import GCNConv, SAGEConv

from pyg_sparsecomm import DistributedGCNConv, LossNormalisationWarning, distribute, shard
from pyg_sparsecomm.testing import launch

GOOD_STEPS = 4


def _steps(layer, local, bad_step, bad_rank, rank, x_at=None, adj_at=None, **kwargs_at):
    """``GOOD_STEPS`` consistent training steps, then one whose inputs differ on ``bad_rank``."""
    for step in range(GOOD_STEPS + 1):
        bad = step == bad_step and rank == bad_rank
        x = x_at if bad and x_at is not None else local.x
        adj = adj_at if bad and adj_at is not None else local.adj
        extra = kwargs_at if bad else {}
        out = layer(x, adj, **extra)
        out.square().sum().backward()


def _scenario(rank, world_size, name):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # plain sums on purpose
    torch.manual_seed(0)
    data = graph(partition_a())
    local = shard(data)
    try:
        if name == "x of the whole graph at step 5":
            _steps(distribute(SAGEConv(F, OUT)), local, GOOD_STEPS, 1, rank, x_at=data.x)
        elif name == "another partition's shard at step 5":
            _steps(distribute(SAGEConv(F, OUT)), local, GOOD_STEPS, 0, rank, adj_at=shard(graph(partition_b())).adj)
        elif name == "edge_weight of another length at step 3":
            weight = torch.ones(local.adj.nnz + 3)
            layer = distribute(GCNConv(F, OUT))
            for step in range(3):
                edge_weight = weight if step == 2 and rank == 1 else weight[:local.adj.nnz]
                layer(local.x, local.adj.with_value(None), edge_weight).sum().backward()
        elif name == "DistributedGCNConv: x of the whole graph at step 5":
            _steps(DistributedGCNConv(F, OUT), local, GOOD_STEPS, 1, rank, x_at=data.x)
        elif name == "int8 staleness=1 non-finite at step 3":
            layer = distribute(GCNConv(F, OUT), halo_precision="int8", staleness=1)
            nan = torch.full_like(local.x, float("nan"))
            _steps(layer, local, 2, 1, rank, x_at=nan)
    except Exception as e:  # noqa: BLE001 - every rank reports what it raised
        return f"{type(e).__name__}: {e}"
    return None


#: scenario -> words every rank's message must contain
EXPECTED = {
    "x of the whole graph at step 5": ["rank 1", f"x has {N} rows", "local.x"],
    "another partition's shard at step 5": ["different partitions", "load_shard"],
    "edge_weight of another length at step 3": ["rank 1", "edge_weight has", "local.edge_weight"],
    "DistributedGCNConv: x of the whole graph at step 5": ["rank 1", f"x has {N} rows", "local.x"],
    "int8 staleness=1 non-finite at step 3": ["rank 1", "int8", "non-finite"],
}

def assert_every_rank_raised_the_same(messages: list, expected: list[str]) -> None:
    """Every rank raised the same ``ValueError`` holding each of ``expected`` (no hang, no lost peer)."""
    for rank, message in enumerate(messages):
        assert message is not None, f"rank {rank} raised nothing"
        assert message.startswith("ValueError"), f"rank {rank}: {message}"
        assert "Connection closed" not in message and "timed out" not in message.lower()
        for words in expected:
            assert words in message, f"rank {rank}: {message}"
    assert messages[0] == messages[1]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_rank_raises_the_original_error_at_a_later_step(name):
    messages = launch(_scenario, 2, name, timeout=120, pg_timeout=20)
    assert_every_rank_raised_the_same(messages, EXPECTED[name])


def _later_calls(rank, world_size):
    """Consistent later calls: one host all-reduce of two flags each, the all-gather only once per shard."""
    import torch.distributed as dist

    import pyg_sparsecomm.nn.runtime.first_use as first_use
    gathers, objects = [], []
    original, original_objects = first_use.host_all_gather, dist.all_gather_object
    first_use.host_all_gather = lambda *a, **k: (gathers.append(1), original(*a, **k))[1]
    dist.all_gather_object = lambda *a, **k: (objects.append(1), original_objects(*a, **k))[1]
    try:
        local = shard(graph(partition_a()))
        torch.manual_seed(0)
        layer = distribute(SAGEConv(F, OUT))
        outs = [layer(local.x, local.adj) for _ in range(GOOD_STEPS)]
    finally:
        first_use.host_all_gather, dist.all_gather_object = original, original_objects
    return len(gathers), len(objects), all(torch.equal(outs[0], o) for o in outs)


def test_consistent_later_calls_gather_nothing():
    for gathers, whole_entries, same in launch(_later_calls, 2):
        assert gathers == 1 and whole_entries == 0 and same
