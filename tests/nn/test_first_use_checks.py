"""Inconsistent shards and inputs raise the same clear error on every rank, at the first call.

Before: shards of different partitions or world sizes, node features of different widths or dtypes
on different ranks, or a shard of another rank ended in a gloo abort ("Connection closed by peer")
or a hang on the peers of the rank that noticed; a ``cached=True`` layer called with another
partition of the same row counts was silently wrong (by 0.03); an int8 halo of non-finite values
raised on its rank only.  Each scenario runs at P = 2 (gloo) and every rank must raise the message.
"""
import pytest
import torch
from graphs import NUM_FEATURES as F
from graphs import OUT
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, SAGEConv

from pyg_sparsecomm import DistributedGCNConv, distribute, shard
from pyg_sparsecomm.testing import launch

N = 60


def graph(part: torch.Tensor) -> Data:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, N, (2, 240), generator=gen)
    data = Data(x=torch.randn(N, F, generator=gen), edge_index=edge_index[:, edge_index[0] != edge_index[1]],
                num_nodes=N)
    data.part, data.num_parts = part, int(part.max()) + 1
    return data


def partition_a() -> torch.Tensor:
    return torch.arange(N) % 2


def partition_b() -> torch.Tensor:
    """Another partition into 2 parts of the same sizes (30 and 30) as partition_a."""
    return torch.randperm(N, generator=torch.Generator().manual_seed(1)) % 2


def _call(layer, local, x=None):
    return layer(local.x if x is None else x, local.adj)


def _scenario(rank, world_size, name):
    torch.manual_seed(0)
    data = graph(partition_a())
    local = shard(data)
    try:
        if name == "different partitions":
            other = shard(graph(partition_b()))  # same row counts on every rank
            _call(distribute(SAGEConv(F, OUT)), local if rank == 0 else other)
        elif name == "different world sizes":
            three = graph(torch.arange(N) % 3)
            _call(distribute(SAGEConv(F, OUT)), local if rank == 0 else shard(three, rank=rank, world_size=3))
        elif name == "shard of another rank":
            _call(distribute(SAGEConv(F, OUT)), local if rank == 0 else shard(data, rank=0, world_size=2))
        elif name == "feature widths":
            x = local.x if rank == 0 else torch.cat([local.x, local.x[:, :1]], dim=1)
            _call(distribute(SAGEConv(-1, OUT)), local, x)
        elif name == "feature dtypes":
            x = local.x if rank == 0 else local.x.double()
            _call(distribute(GCNConv(F, OUT)), local, x)
        elif name == "x of the whole graph":
            _call(distribute(SAGEConv(F, OUT)), local, data.x if rank == 1 else None)
        elif name == "cached layer on another shard":
            layer = distribute(GCNConv(F, OUT, cached=True))
            _call(layer, local)
            _call(layer, shard(graph(partition_b())))
        elif name == "DistributedGCNConv(cached=True) on another shard":
            layer = DistributedGCNConv(F, OUT, cached=True)
            _call(layer, local)
            _call(layer, shard(graph(partition_b())))
        elif name == "DistributedGCNConv on different partitions":
            _call(DistributedGCNConv(F, OUT), local if rank == 0 else shard(graph(partition_b())))
        elif name == "parameters: DistributedGCNConv without a common seed":
            torch.manual_seed(rank)  # each rank draws its own initial parameters
            _call(DistributedGCNConv(F, OUT), local)
        elif name == "int8 non-finite on one rank":
            layer = distribute(GCNConv(F, OUT), halo_precision="int8")
            x = local.x.clone()
            if rank == 1:
                x[:] = float("nan")
            _call(layer, local, x)
    except Exception as e:  # noqa: BLE001 - every rank reports what it raised
        return f"{type(e).__name__}: {e}"
    return None


#: scenario -> words every rank's message must contain
EXPECTED = {
    "different partitions": ["different partitions", "load_shard"],
    "different world sizes": ["different numbers of parts", "num_parts=2"],
    "shard of another rank": ["the shard was built for rank 0 but this process is rank 1"],
    "feature widths": ["different widths", "rank 0: [*, 6] float32", "rank 1: [*, 7] float32"],
    "feature dtypes": ["different widths or dtypes", "float64"],
    "x of the whole graph": ["rank 1", f"x has {N} rows", "local.x"],
    "cached layer on another shard": ["cached=True", "another shard", "cached=False"],
    "int8 non-finite on one rank": ["rank 1", "int8", "non-finite"],
    "DistributedGCNConv(cached=True) on another shard": ["cached=True", "another shard", "cached=False"],
    "DistributedGCNConv on different partitions": ["different partitions", "load_shard"],
    "parameters: DistributedGCNConv without a common seed": ["different parameters", "rank 1's", "manual_seed",
                                                              "distribute(model)", "before distribute()"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_rank_raises_the_same_clear_error(name):
    messages = launch(_scenario, 2, name, timeout=120, pg_timeout=20)
    for rank, message in enumerate(messages):
        assert message is not None, f"rank {rank} raised nothing"
        assert message.startswith("ValueError"), f"rank {rank}: {message}"
        for words in EXPECTED[name]:
            assert words in message, f"rank {rank}: {message}"
    assert messages[0] == messages[1]


def _consistent(rank, world_size):
    """Consistent shards: the check passes, a cached layer on its own shard (called again, and with
    the shard re-built) keeps working, and the check runs once per layer and shard: one fixed-size
    all-gather each time, never the whole entries' (``all_gather_object``: only to word a problem)."""
    import torch.distributed as dist

    import pyg_sparsecomm.nn.runtime.first_use as first_use
    calls, objects = [], []
    original, original_objects = first_use.host_all_gather, dist.all_gather_object
    first_use.host_all_gather = lambda *a, **k: (calls.append(1), original(*a, **k))[1]
    dist.all_gather_object = lambda *a, **k: (objects.append(1), original_objects(*a, **k))[1]
    try:
        data = graph(partition_a())
        local = shard(data)
        layer = distribute(GCNConv(F, OUT, cached=True))
        first = _call(layer, local)
        again = _call(layer, local)
        rebuilt = _call(layer, shard(data))
    finally:
        first_use.host_all_gather, dist.all_gather_object = original, original_objects
    return len(calls), len(objects), bool(torch.equal(first, again) and torch.equal(first, rebuilt))


def test_consistent_shards_pass_and_are_checked_once_per_shard():
    for checks, whole_entries, same in launch(_consistent, 2):
        assert checks == 2 and whole_entries == 0 and same  # the first call and the re-built shard's


def test_the_gathered_integers_agree_exactly_when_the_verdict_finds_nothing():
    """``agrees`` (the first, fixed-size all-gather) must flag every problem ``verdict`` words: a
    summary that agrees where the whole entries disagree would let a wrong shard through."""
    from pyg_sparsecomm.nn.runtime.first_use import agrees, fingerprint, summary, verdict

    def entries(parts, shards=None, x=None, errors=None, parameters=None):
        out = []
        for r in range(3):
            local = shards[r] if shards and r in shards else shard(graph(parts), rank=r, world_size=3)
            features = (x or {}).get(r, local.x)
            entry = fingerprint(local.adj.plan, features, (errors or {}).get(r), None, (parameters or {}).get(r, "p"))
            out.append({**entry, "group_rank": r, "group_size": 3})
        return out

    three = torch.arange(N) % 3
    other = torch.randperm(N, generator=torch.Generator().manual_seed(1)) % 3
    two = torch.arange(N) % 2
    cases = {
        "consistent": entries(three),
        "one rank without x": entries(three, x={1: None}),
        "another partition on rank 1": entries(three, shards={1: shard(graph(other), rank=1, world_size=3)}),
        "the shard of rank 0 on rank 2": entries(three, shards={2: shard(graph(three), rank=0, world_size=3)}),
        "a two-part shard on rank 1": entries(three, shards={1: shard(graph(two), rank=1, world_size=2)}),
        "another graph on rank 0": entries(three, shards={0: shard(Data(x=torch.randn(N + 3, F),
                                           edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=N + 3,
                                           part=torch.arange(N + 3) % 3, num_parts=3), rank=0, world_size=3)}),
        "feature width": entries(three, x={2: torch.randn(20, F + 1)}),
        "feature dtype": entries(three, x={0: torch.randn(20, F, dtype=torch.float64)}),
        "an error on rank 1": entries(three, errors={1: "x has 3 rows"}),
        "other parameters on rank 2": entries(three, parameters={2: "q"}),
    }
    for name, gathered in cases.items():
        rows = [summary(e, 3) for e in gathered]
        assert all(len(row) == len(rows[0]) for row in rows), name
        assert agrees(rows) == (verdict(gathered, "SAGEConv") is None), name
        assert agrees(rows) == (name in ("consistent", "one rank without x")), name
