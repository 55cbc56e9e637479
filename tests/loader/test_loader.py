"""Distributed mini-batch loaders == the single-process reference of the same batches, in real
gloo runs at P = 1..4: the batches themselves (any partition), a training step of
DistributedGCNConv and distribute()d PyG models with and without layer trimming (outputs, input
and parameter gradients), the halo bytes of every batch (its column-net connectivity-1 volume,
exactly), ranks without seeds, empty parts, and errors instead of hangs."""
import os
import time
import warnings

import pytest
import torch
from dead_peer import assert_survivor_raised, report_outcome
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.utils import trim_to_layer as pyg_trim_to_layer

from pyg_sparsecomm import DistributedGCNConv, LossNormalisationWarning, comm_counter, distribute, shard, sync_gradients
from pyg_sparsecomm.loader import (
    DistributedNeighborLoader,
    DistributedNodeSubsetLoader,
    NeighborSampling,
    NodeSubsetSampling,
    global_batches,
    trim_to_layer,
)
from pyg_sparsecomm.testing import launch

F, C, N = 5, 3, 90
FANOUTS, SEED = (3, 2), 11


def make_graph(world_size: int, method: str = "random") -> Data:
    """Directed, with sources only in [10, N) (nodes without out-edges), self-loops, a duplicate
    edge, weights, no seed on rank 1 and, for P >= 3, an empty last part."""
    gen = torch.Generator().manual_seed(4)
    ei = torch.randint(10, N, (2, 420), generator=gen)
    ei = torch.cat([ei, torch.tensor([[12, 30, 30], [12, 30, 31]]), ei[:, :1]], dim=1)
    if method == "random":
        parts = max(world_size - 1, 1) if world_size >= 3 else world_size
        part = torch.randint(0, parts, (N,), generator=gen)
    else:  # contiguous blocks: another partition of the same graph
        part = torch.arange(N) * world_size // N
    train = (torch.rand(N, generator=gen) < 0.6) & (part != 1)
    return Data(x=torch.randn(N, F, generator=gen), edge_index=ei, num_nodes=N, train_mask=train,
                edge_weight=torch.rand(ei.size(1), generator=gen) + 0.5, y=torch.randint(0, C, (N,), generator=gen),
                part=part, num_parts=world_size)


def neighbor_sampling(batch_size: int = 9) -> NeighborSampling:
    return NeighborSampling(batch_size=batch_size, shuffle=True, seed=SEED, num_neighbors=FANOUTS)


def reference(data: Data, sampling, epoch: int):
    return global_batches(data.edge_index, N, sampling, data.train_mask, epoch)


# --- the batches -----------------------------------------------------------------------------

def _batches(world_size, method):
    """Two epochs of each sampler, sampled ahead on a thread (default) and in the caller's thread;
    each loader first leaves an epoch after one batch (the prefetching thread must stop there on
    every rank alike, or the next epoch's exchanges would not match)."""
    local = shard(make_graph(world_size, method))
    out = []
    for prefetch in (1, 0):
        loaders = [DistributedNeighborLoader(local, list(FANOUTS), batch_size=9, input_nodes=local.train_mask,
                                             shuffle=True, seed=SEED, prefetch=prefetch),
                   DistributedNodeSubsetLoader(local, batch_size=20, input_nodes=local.train_mask, shuffle=True,
                                               seed=SEED, prefetch=prefetch)]
        for loader in loaders:
            loader.set_epoch(99)
            next(iter(loader))  # an epoch left early
            loader.set_epoch(0)
            epochs = []
            for _ in range(2):
                epochs.append([(b.n_id, b.e_id, b.batch_size, b.global_batch_size, b.y, b.x) for b in loader])
            out.append((len(loader), epochs))
    return out


def _worker(rank, world_size):
    """Everything a world size checks, in one launch (spawning processes is the slow part)."""
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    return {"batches": {m: _batches(world_size, m) for m in ("random", "contiguous")},
            "steps": _steps(world_size), "bytes": _bytes(world_size) if world_size in (2, 4) else None}


_RUNS: dict = {}


def run(world_size: int) -> list:
    if world_size not in _RUNS:
        _RUNS[world_size] = launch(_worker, world_size, timeout=600)
    return _RUNS[world_size]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_batches_equal_the_reference_for_any_partition(world_size):
    for method in ["random", "contiguous"]:
        per_rank = [r["batches"][method] for r in run(world_size)]
        data = make_graph(world_size, method)
        samplings = [neighbor_sampling(), NodeSubsetSampling(batch_size=20, shuffle=True, seed=SEED)] * 2
        for k, sampling in enumerate(samplings):  # prefetched, then sampled in the caller's thread
            for epoch in range(2):
                ref = reference(data, sampling, epoch)
                assert all(len(r[k][1][epoch]) == len(ref) for r in per_rank), "ranks must yield the same batches"
                assert all(r[k][0] == sampling.num_batches(int(data.train_mask.sum() if k % 2 == 0 else N))
                           for r in per_rank)
                for i, batch in enumerate(ref):
                    parts = [r[k][1][epoch][i] for r in per_rank]
                    n_id, e_id = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
                    assert sorted(n_id.tolist()) == sorted(batch.n_id.tolist())
                    assert sorted(e_id.tolist()) == sorted(batch.e_id.tolist())
                    seeds = torch.cat([p[0][:p[2]] for p in parts])
                    assert sorted(seeds.tolist()) == sorted(batch.n_id[:batch.num_seeds].tolist())
                    assert all(p[3] == batch.num_seeds for p in parts)
                    for p in parts:  # node attributes are the rows of the batch's nodes
                        assert torch.equal(p[4], data.y[p[0]]) and torch.equal(p[5], data.x[p[0]])
        # rank 1 owns no seed and still took part in every batch
        assert all(p[2] == 0 for p in per_rank[min(1, world_size - 1)][0][1][0]) or world_size == 1


def test_shuffle_false_keeps_the_seeds_and_redraws_neighbours():
    data = make_graph(1)
    fixed = NeighborSampling(batch_size=9, shuffle=False, seed=SEED, num_neighbors=FANOUTS)
    a, b = reference(data, fixed, 0), reference(data, fixed, 1)
    assert [x.n_id[:x.num_seeds].tolist() for x in a] == [x.n_id[:x.num_seeds].tolist() for x in b]
    assert [x.e_id.tolist() for x in a] != [x.e_id.tolist() for x in b]
    shuffled = reference(data, neighbor_sampling(), 0), reference(data, neighbor_sampling(), 1)
    assert [x.n_id[:x.num_seeds].tolist() for x in shuffled[0]] != [x.n_id[:x.num_seeds].tolist()
                                                                      for x in shuffled[1]]


def test_neighbor_sampling_keeps_fanout_in_edges_uniformly():
    from pyg_sparsecomm.sampling.in_edge_sample import sample_in_edges
    sampling = NeighborSampling(batch_size=4, seed=1, num_neighbors=(3,))
    rowptr, order, rows = torch.tensor([0, 5, 7, 11]), torch.arange(11), torch.arange(3)  # in-degrees 5, 2, 4
    kept = sample_in_edges(*sampling.draw(0, 0, 1), rowptr, order, rows, rows)
    assert torch.bincount(torch.bucketize(kept, rowptr[1:], right=True), minlength=3).tolist() == [3, 2, 3]
    # uniform: over many batches every in-edge of a 5-edge target is kept 3/5 of the time
    freq = torch.stack([torch.bincount(sample_in_edges(*sampling.draw(0, b, 1), rowptr, order, rows, rows),
                                       minlength=11)[:5] for b in range(4000)]).double().mean(0)
    assert torch.allclose(freq, torch.full((5,), 0.6, dtype=torch.double), atol=0.04), freq


# --- a training step --------------------------------------------------------------------------

def _models():
    torch.manual_seed(0)
    return {"gcn": torch.nn.ModuleList([GCNConv(F, 8), GCNConv(8, C)]),
            "sage": GraphSAGE(F, 8, 2, C), "gat": GAT(F, 8, 2, C, heads=2), "gcn_subset": GCN(F, 8, 2, C)}


def _distributed_models():
    torch.manual_seed(0)
    models = _models()
    gcn = torch.nn.ModuleList([DistributedGCNConv(F, 8), DistributedGCNConv(8, C)])
    gcn.load_state_dict(models["gcn"].state_dict())
    models["gcn"] = gcn
    for name in ("sage", "gat", "gcn_subset"):
        distribute(models[name])
    return models


def _run(name, model, x, adj, edge_weight, counts, trim_fn):
    """One forward of model ``name``; ``counts`` = (num_sampled_nodes, num_sampled_edges) to trim."""
    if name == "gcn":
        for i, conv in enumerate(model):
            if counts is not None:
                x, adj, edge_weight = trim_fn(i, counts[0], counts[1], x, adj, edge_weight)
            x = conv(x, adj, edge_weight).relu() if i == 0 else conv(x, adj, edge_weight)
        return x
    kwargs = {} if counts is None else {"num_sampled_nodes_per_hop": counts[0], "num_sampled_edges_per_hop": counts[1]}
    if name == "gcn_subset":
        kwargs["edge_weight"] = edge_weight
    return model(x, adj, **kwargs)


def _upstream(n_id):
    return torch.sin(n_id.double().view(-1, 1) * torch.arange(1, C + 1).double()).float()


def _step(name, model, x, adj, edge_weight, counts, num_seeds, n_id, trim_fn):
    x = x.clone().requires_grad_()
    out = _run(name, model, x, adj, edge_weight, counts, trim_fn)
    (out[:num_seeds] * _upstream(n_id[:num_seeds])).sum().backward()
    return out[:num_seeds].detach(), x.grad


def _steps(world_size):
    local = shard(make_graph(world_size))
    neighbor = DistributedNeighborLoader(local, list(FANOUTS), batch_size=9, input_nodes=local.train_mask,
                                         shuffle=True, seed=SEED)
    subset = DistributedNodeSubsetLoader(local, batch_size=20, input_nodes=local.train_mask, shuffle=True, seed=SEED)
    results, models = {}, _distributed_models()
    for trim in (False, True):
        for i, batch in enumerate(neighbor):
            for name in ("gcn", "sage", "gat"):
                models[name].zero_grad(set_to_none=True)
                counts = (batch.num_sampled_nodes, batch.num_sampled_edges) if trim else None
                out, gx = _step(name, models[name], batch.x, batch.adj, batch.edge_weight, counts, batch.batch_size,
                                batch.n_id, trim_to_layer)
                sync_gradients(models[name])
                grads = {k: p.grad for k, p in models[name].named_parameters() if p.grad is not None}
                results[(name, trim, i)] = (batch.n_id, out, gx, grads)
    model = models["gcn_subset"]
    for i, batch in enumerate(subset):
        model.zero_grad(set_to_none=True)
        out, gx = _step("gcn_subset", model, batch.x, batch.adj, batch.edge_weight, None, batch.batch_size,
                        batch.n_id, None)
        sync_gradients(model)
        results[("gcn_subset", False, i)] = (batch.n_id, out, gx, {k: p.grad for k, p in model.named_parameters()})
    return results


def _reference_step(data, models, name, batch, trim):
    pos = torch.full((N,), -1)
    pos[batch.n_id] = torch.arange(batch.n_id.numel())
    edge_index = pos[data.edge_index[:, batch.e_id]]
    counts = (batch.num_sampled_nodes, batch.num_sampled_edges) if trim else None
    model = models[name]
    model.zero_grad(set_to_none=True)
    out, gx = _step(name, model, data.x[batch.n_id], edge_index, data.edge_weight[batch.e_id], counts,
                    batch.num_seeds, batch.n_id, pyg_trim_to_layer)
    return pos, out, gx, {k: p.grad for k, p in model.named_parameters() if p.grad is not None}


def _close(a, b):
    return torch.allclose(a, b, atol=1e-5 * (1 + b.abs().max().item()), rtol=1e-4)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_training_step_equals_pyg_on_the_same_batch(world_size):
    per_rank = [r["steps"] for r in run(world_size)]
    data = make_graph(world_size)
    cases = [(name, trim, i, batch) for trim in (False, True) for name in ("gcn", "sage", "gat")
             for i, batch in enumerate(reference(data, neighbor_sampling(), int(trim)))]
    cases += [("gcn_subset", False, i, b)
              for i, b in enumerate(reference(data, NodeSubsetSampling(batch_size=20, shuffle=True, seed=SEED), 0))]
    failures, models = [], _models()
    for name, trim, i, batch in cases:
        pos, ref_out, ref_gx, ref_grads = _reference_step(data, models, name, batch, trim)
        out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
        for results in per_rank:
            n_id, o, g, grads = results[(name, trim, i)]
            out[pos[n_id[:o.size(0)]]] = o
            gx[pos[n_id]] = g
            failures += [f"{name} trim={trim} batch {i}: grad {k}" for k, r in ref_grads.items()
                         if not _close(grads[k], r)]
        failures += [f"{name} trim={trim} batch {i}: output"] if not _close(out, ref_out) else []
        failures += [f"{name} trim={trim} batch {i}: input gradient"] if not _close(gx, ref_gx) else []
    assert len(cases) > 10 and not failures, f"P={world_size}: " + ", ".join(dict.fromkeys(failures))


# --- bytes --------------------------------------------------------------------------------------

def _bytes(world_size):
    local = shard(make_graph(world_size))
    loader = DistributedNeighborLoader(local, list(FANOUTS), batch_size=9, input_nodes=local.train_mask,
                                       shuffle=True, seed=SEED)
    torch.manual_seed(0)
    convs = [DistributedGCNConv(F, 7, normalize=False), DistributedGCNConv(7, 4, normalize=False)]
    counted = []
    for batch in loader:
        comm_counter().reset()
        x, adj = batch.x, batch.adj
        for i, conv in enumerate(convs):
            x, adj, _ = trim_to_layer(i, batch.num_sampled_nodes, batch.num_sampled_edges, x, adj)
            x = conv(x, adj)
        x.sum().backward()
        counted.append({k: comm_counter().bytes_sent(k) for k in ("halo", "halo_grad")})
    return counted


@pytest.mark.parametrize("world_size", [2, 4])
def test_halo_bytes_are_the_batch_column_net_volume(world_size):
    """Layer i of a trimmed batch reads the sources of the edges sampled at hops <= L - i; the
    rows it moves are the connectivity - 1 of those edges' column nets under the partition."""
    per_rank = [r["bytes"] for r in run(world_size)]
    data = make_graph(world_size)
    for i, batch in enumerate(reference(data, neighbor_sampling(), 0)):
        expected = 0
        for layer, width in enumerate((7, 4)):
            e = batch.e_id[:sum(batch.num_sampled_edges[:len(FANOUTS) - layer])]
            src, dst = data.edge_index[:, e]
            cut = data.part[src] != data.part[dst]
            expected += torch.unique(src[cut] * world_size + data.part[dst[cut]]).numel() * width * 4
        assert expected > 0
        for kind in ("halo", "halo_grad"):
            assert sum(r[i][kind] for r in per_rank) == expected, (i, kind)


# --- errors -------------------------------------------------------------------------------------

def _mismatch_worker(rank, world_size):
    local = shard(make_graph(world_size))
    messages = []
    for kwargs in ({"batch_size": 9 + rank}, {"batch_size": 9, "prefetch": rank}):
        try:
            DistributedNeighborLoader(local, [3, 2], input_nodes=local.train_mask, **kwargs)
            messages.append(None)
        except ValueError as error:
            messages.append(str(error))
    return messages


def test_ranks_with_different_arguments_raise_instead_of_hanging():
    for messages in launch(_mismatch_worker, 2, timeout=120):
        assert messages[0] and "different sampling arguments" in messages[0]
        assert messages[1] and "prefetch on all or none" in messages[1]


def test_prefetching_thread_runs_at_most_depth_batches_ahead_and_reraises():
    from pyg_sparsecomm.loader.prefetch import PrefetchedBatches
    drawn = []

    def batches():
        for i in range(5):
            drawn.append(i)
            if i == 3:
                raise KeyError("sampling failed")
            yield i

    it = PrefetchedBatches(batches(), depth=2)
    assert next(it) == 0
    time.sleep(0.2)
    assert len(drawn) <= 3  # took 1, at most 2 ahead
    assert [next(it), next(it)] == [1, 2]
    with pytest.raises(KeyError, match="sampling failed"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    left = PrefetchedBatches(iter(range(100)), depth=1)
    assert next(left) == 0
    left.close()  # stops after the batch it was allowed to start
    assert not left._thread.is_alive()


def test_an_epoch_left_early_samples_the_allowed_batches_whatever_the_threads_timing():
    """``depth`` plus the batches taken, also when ``close()`` comes before the thread woke up to
    the last permit: ranks differ in that timing, and a batch one rank's thread skipped while its
    peers' sampled it left them waiting in its exchange (a gloo timeout)."""
    from pyg_sparsecomm.loader.prefetch import PrefetchedBatches
    for depth, taken in [(1, 1), (1, 3), (2, 1), (3, 2)]:
        for _ in range(20):
            drawn: list[int] = []
            it = PrefetchedBatches((drawn.append(i) or i for i in range(100)), depth=depth)
            assert [next(it) for _ in range(taken)] == list(range(taken))
            it.close()  # right after the last take: the thread has usually not woken up yet
            assert drawn == list(range(depth + taken)), (depth, taken, drawn)


def _dead_peer_worker(rank, world_size, report):
    local = shard(make_graph(world_size))
    loader = DistributedNeighborLoader(local, list(FANOUTS), batch_size=9, input_nodes=local.train_mask, seed=SEED)
    batches = iter(loader)
    next(batches)
    if rank == 1:
        os._exit(3)  # dies without a word while rank 0's thread samples the next batches
    report_outcome(report, lambda: list(batches))


def test_a_dead_peer_surfaces_from_the_prefetching_thread(tmp_path):
    assert_survivor_raised(_dead_peer_worker, tmp_path / "rank0.txt")


def test_errors_name_the_problem():
    local = shard(make_graph(1), rank=0, world_size=1)
    with pytest.raises(ValueError, match="local.train_mask"):
        DistributedNeighborLoader(local, [3], input_nodes=torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="global node ids"):
        DistributedNeighborLoader(local, [3], input_nodes=torch.tensor([N + 5]))
    with pytest.raises(ValueError, match="num_neighbors"):
        DistributedNeighborLoader(local, [0, 3])
    with pytest.raises(ValueError, match="shard"):
        DistributedNeighborLoader(make_graph(1), [3])
    with pytest.raises(ValueError, match="batch_size"):
        DistributedNodeSubsetLoader(local, batch_size=0)
    with pytest.raises(ValueError, match="prefetch must be a non-negative integer"):
        DistributedNeighborLoader(local, [3], prefetch=-1)
    batch = next(iter(DistributedNodeSubsetLoader(local, batch_size=30, transform=lambda b: b.update({"tag": 1}))))
    assert batch.tag == 1
    with pytest.raises(ValueError, match="node-subset"):
        batch.adj.trim()
    batch = next(iter(DistributedNeighborLoader(local, [3], batch_size=30)))
    with pytest.raises(ValueError, match="more layers than the loader has hops"):
        batch.adj.trim()
    with pytest.raises(ValueError, match="algorithm='rdma' does not run on mini-batches"):
        DistributedGCNConv(F, C, algorithm="rdma")(batch.x, batch.adj)
    for cached in (DistributedGCNConv(F, C, cached=True), distribute(GCNConv(F, C, cached=True))):
        with pytest.raises(ValueError, match="cached=False"):
            cached(batch.x, batch.adj)
    model = distribute(GraphSAGE(F, 8, 3, C))
    with pytest.raises(ValueError, match="does not fit"):
        model(batch.x, batch.adj, num_sampled_nodes_per_hop=[1, 2, 3, 4], num_sampled_edges_per_hop=[1, 2, 3])
