"""``DistributedNodeSubsetLoader`` on ``HeteroData`` shards == the single-process reference of the same
batches (``hetero_subset_global_batches``, itself the homogeneous subset batches of
``data.to_homogeneous()`` split by type), one gloo launch per P = 1..3, on a user–item graph with a
directed relation (``follows``), isolated users, items nobody rated and, at P = 3, a part owning no
user: every batch's nodes (the seeds first) and edges per type, its rows, and the loss curve and
gradients of ``to_hetero(GraphSAGE)`` trained on it; the refusals, on every rank."""
import functools

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import GraphSAGE, to_hetero

from pyg_sparsecomm import distribute, distributed_loss, shard
from pyg_sparsecomm.loader import (
    DistributedNodeSubsetLoader,
    HeteroNodeSubsetSampling,
    NodeSubsetSampling,
    global_batches,
    hetero_subset_global_batches,
)
from pyg_sparsecomm.loader.hetero_subset_sampler import HeteroSubsetSampler
from pyg_sparsecomm.testing import launch

USERS, ITEMS, FEATURES, CLASSES, BATCH, SEED, EPOCHS = 24, 18, 4, 3, 9, 3, 2
HOP_KEYS = ("num_sampled_nodes", "num_sampled_edges")  # a subset batch has no hops to trim
RATES, REV, FOLLOWS = ("user", "rates", "item"), ("item", "rev_rates", "user"), ("user", "follows", "user")


def make_graph():
    gen = torch.Generator().manual_seed(4)
    data = HeteroData()
    data["user"].x = torch.randn(USERS, FEATURES, generator=gen)
    data["user"].y = torch.randint(0, CLASSES, (USERS,), generator=gen)
    data["user"].train_mask = torch.rand(USERS, generator=gen) < 0.7
    data["item"].x = torch.randn(ITEMS, FEATURES, generator=gen)
    rates = torch.stack([torch.randint(4, USERS, (70,), generator=gen),  # users 0..3: no edge at all
                         torch.randint(0, ITEMS - 3, (70,), generator=gen)])  # the last 3 items nobody rated
    data[RATES].edge_index = rates
    data[REV].edge_index = rates.flip(0)
    data[FOLLOWS].edge_index = torch.randint(4, USERS, (2, 40), generator=gen)  # directed, no reverse
    return data


def partition(data, P):
    data = data.clone()
    gen = torch.Generator().manual_seed(P)
    data["user"].part = torch.arange(USERS) % 2 if P == 3 else torch.randint(0, P, (USERS,), generator=gen)
    data["item"].part = torch.randint(0, P, (ITEMS,), generator=gen)
    data.num_parts = P
    return data


def build():
    torch.manual_seed(0)
    model = GraphSAGE(FEATURES, 8, num_layers=2, out_channels=CLASSES)
    return to_hetero(model, (["user", "item"], [RATES, REV, FOLLOWS]), aggr="sum")


def flat_grad(model):
    """Every parameter's gradient (zeros for the last layer's convs into items, which the loss never reads)."""
    return torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1) for p in model.parameters()])


def rule(data):
    return HeteroNodeSubsetSampling(batch_size=BATCH, shuffle=True, seed=SEED, input_type="user",
                                    node_types=tuple((t, data[t].num_nodes) for t in data.node_types))


def _worker(rank, P, data):
    local = shard(partition(data, P))
    loader = DistributedNodeSubsetLoader(local, batch_size=BATCH, input_nodes=("user", data["user"].train_mask),
                                         shuffle=True, seed=SEED)
    model = distribute(build())
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    batches, losses, grads, lengths = [], [], [], []
    for _ in range(EPOCHS):
        lengths.append(len(loader))
        for batch in loader:
            size = batch["user"].batch_size
            batches.append({"n_id": {t: batch[t].n_id for t in batch.node_types},
                            "e_id": {et: batch[et].e_id for et in batch.edge_types}, "batch_size": int(size),
                            "global": batch.global_batch_size, "x": {t: batch[t].x for t in batch.node_types},
                            "hops": [k for s in batch.stores for k in HOP_KEYS if k in s]})
            opt.zero_grad()
            out = model(batch.x_dict, batch.adj_dict)["user"]
            loss = distributed_loss(F.cross_entropy, out[:size], batch["user"].y[:size])
            loss.backward()
            grads.append(flat_grad(model))
            opt.step()
            losses.append(float(loss.detach()))
    return {"type": type(loader), "sampler": type(loader.sampler), "batches": batches, "losses": losses,
            "grads": grads, "lengths": lengths,
            "dataset": len(loader.dataset), "errors": _errors(rank, P, local)}


def _errors(rank, P, local):
    """Every refused argument's message on this rank (one rank's bad argument: every rank raises)."""
    one = min(1, P - 1)
    cases = [("venue", None) if rank == one else ("user", None),
             ("user", torch.ones(USERS + 1 if rank == 0 else USERS, dtype=torch.bool)), None]
    messages = []
    for input_nodes in cases:
        try:
            DistributedNodeSubsetLoader(local, batch_size=BATCH, input_nodes=input_nodes)
            messages.append(None)
        except ValueError as e:
            messages.append(str(e))
    return messages


def reference(data, epoch):
    return hetero_subset_global_batches(data, rule(data), data["user"].train_mask, epoch)


def _local_edges(data, edge_type, batch):
    src, _, dst = edge_type
    position = {t: torch.full((data[t].num_nodes,), -1) for t in (src, dst)}
    for t in (src, dst):
        position[t][batch.n_id[t]] = torch.arange(batch.n_id[t].numel())
    edge_index = data[edge_type].edge_index[:, batch.e_id[edge_type]]
    return torch.stack([position[src][edge_index[0]], position[dst][edge_index[1]]])


@functools.lru_cache
def reference_training():
    """Single-process PyG (the same model, undistributed) on the reference batches."""
    data = make_graph()
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    losses, grads = [], []
    for epoch in range(EPOCHS):
        for batch in reference(data, epoch):
            x_dict = {t: data[t].x[batch.n_id[t]] for t in data.node_types}
            edge_index_dict = {et: _local_edges(data, et, batch) for et in data.edge_types}
            opt.zero_grad()
            out = model(x_dict, edge_index_dict)["user"]
            seeds = batch.n_id["user"][:batch.num_seeds]
            loss = F.cross_entropy(out[:batch.num_seeds], data["user"].y[seeds])
            loss.backward()
            grads.append(flat_grad(model))
            opt.step()
            losses.append(float(loss.detach()))
    return losses, grads


_RUNS: dict = {}


def run(P):
    """One launch per P, shared by the tests."""
    if P not in _RUNS:
        _RUNS[P] = launch(_worker, P, make_graph())
    return _RUNS[P]


def test_reference_is_the_subset_batch_of_to_homogeneous():
    data = make_graph()
    homogeneous = data.to_homogeneous()
    offset = {t: sum(data[s].num_nodes for s in data.node_types[:i]) for i, t in enumerate(data.node_types)}
    edge_offset = {et: sum(data[e].num_edges for e in data.edge_types[:i]) for i, et in enumerate(data.edge_types)}
    inputs = torch.zeros(homogeneous.num_nodes, dtype=torch.bool)
    inputs[offset["user"]:offset["user"] + USERS] = data["user"].train_mask
    sampling = NodeSubsetSampling(batch_size=BATCH, shuffle=True, seed=SEED)
    for epoch in range(3):
        expected = global_batches(homogeneous.edge_index, homogeneous.num_nodes, sampling, inputs, epoch)
        got = reference(data, epoch)
        assert len(got) == len(expected) > 3
        for hetero, homo in zip(got, expected, strict=True):
            assert hetero.num_seeds == homo.num_seeds > 0
            for i, t in enumerate(data.node_types):
                ids = homo.n_id[homogeneous.node_type[homo.n_id] == i] - offset[t]
                assert hetero.n_id[t].tolist() == ids.tolist()  # (the input type's seeds first)
            for i, et in enumerate(data.edge_types):
                ids = homo.e_id[homogeneous.edge_type[homo.e_id] == i] - edge_offset[et]
                assert sorted(hetero.e_id[et].tolist()) == sorted(ids.tolist())


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_hetero_subset_batches_and_training_equal_single_process(P):
    data = make_graph()
    per_rank = run(P)
    expected = [b for epoch in range(EPOCHS) for b in reference(data, epoch)]
    assert len(expected) > 4 and any(b.e_id[FOLLOWS].numel() for b in expected)
    for r in per_rank:
        # the one subset loader, sampling the HeteroData shard by the heterogeneous strategy (the old name
        # DistributedHeteroNodeSubsetLoader is a deprecated alias of it: tests/loader/test_loader_kinds.py)
        assert r["type"] is DistributedNodeSubsetLoader and r["sampler"] is HeteroSubsetSampler
        assert r["dataset"] == int(data["user"].train_mask.sum())
        assert sum(r["lengths"]) == len(r["batches"]) == len(expected)
    if P == 3:  # a part owning no user: no seed, no user row, yet it trains with the others
        assert all(b["n_id"]["user"].numel() == 0 for b in per_rank[2]["batches"])
    for i, batch in enumerate(expected):
        parts = [r["batches"][i] for r in per_rank]
        for t in data.node_types:
            assert sorted(torch.cat([p["n_id"][t] for p in parts]).tolist()) == sorted(batch.n_id[t].tolist())
        for et in data.edge_types:
            assert sorted(torch.cat([p["e_id"][et] for p in parts]).tolist()) == sorted(batch.e_id[et].tolist())
        assert sum(p["batch_size"] for p in parts) == batch.num_seeds
        seeds = set(batch.n_id["user"][:batch.num_seeds].tolist())
        for p in parts:
            assert p["global"] == batch.num_seeds and p["hops"] == []
            users = p["n_id"]["user"].tolist()
            assert set(users[:p["batch_size"]]) <= seeds and not set(users[p["batch_size"]:]) & seeds
            for t in data.node_types:
                assert torch.equal(p["x"][t], data[t].x[p["n_id"][t]])
    losses, grads = reference_training()
    assert len(set(losses)) == len(losses)
    for r in per_rank:
        assert r["losses"] == pytest.approx(losses, rel=1e-5, abs=1e-6), P
        for got, want in zip(r["grads"], grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_hetero_subset_loader_errors_name_the_fix_on_every_rank():
    for r in run(2):
        bad_type, bad_mask, no_type = r["errors"]
        assert "rank 1: ValueError: input_nodes names node type 'venue', which the graph does not have" in bad_type
        assert "rank 0" not in bad_type
        assert f"bool mask of length {USERS + 1}, but the graph has {USERS} nodes" in bad_mask and "rank 0" in bad_mask
        assert "needs the seeds' node type: pass input_nodes=(node_type, mask or ids)" in no_type


def test_a_restored_hetero_subset_loader_continues_within_the_epoch():
    local = shard(partition(make_graph(), 1), rank=0, world_size=1)
    make = lambda: DistributedNodeSubsetLoader(local, batch_size=BATCH, input_nodes="user", shuffle=True,  # noqa: E731
                                               seed=SEED, prefetch=0)
    loader = make()
    loader.set_epoch(1)
    whole = [b["user"].n_id.tolist() for b in loader]
    loader.set_epoch(1)
    epoch = iter(loader)
    next(epoch)  # one batch of epoch 1 taken (the iterator kept: the epoch is still being iterated)
    state = loader.state_dict()
    restored = make()
    restored.load_state_dict(state)
    assert state == {"epoch": 1, "position": 1} and len(restored) == len(whole) - 1 > 2
    assert [b["user"].n_id.tolist() for b in restored] == whole[1:]
