"""``DistributedNeighborLoader(drop_last=True)`` (issue 23, item 4): PyG's meaning over global
batches -- ``len(dataset) // batch_size`` batches of exactly ``batch_size`` seeds over all ranks,
the leftover seeds not drawn -- the same batches as the single-process reference, and
``len(loader)`` right on every rank, before and during the epoch; real gloo runs at P = 1, 2, 4."""
import pytest
import torch
from test_loader import FANOUTS, SEED, make_graph

from pyg_sparsecomm import shard
from pyg_sparsecomm.loader import (
    DistributedNeighborLoader,
    DistributedNodeSubsetLoader,
    NeighborSampling,
    global_batches,
)
from pyg_sparsecomm.testing import launch

BATCH = 7


def sampling(shuffle: bool = True, batch_size: int = BATCH) -> NeighborSampling:
    return NeighborSampling(batch_size=batch_size, shuffle=shuffle, seed=SEED, num_neighbors=FANOUTS, drop_last=True)


def seed_sets(batches) -> list[list[int]]:
    return [sorted(b.n_id[:b.num_seeds].tolist()) for b in batches]


@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_follow_pyg_drop_last(shuffle):
    """As torch's DataLoader (which PyG's NeighborLoader is) over the seeds with drop_last=True:
    n // b batches, each of b distinct seeds; n % b seeds left out; with shuffle, other ones per epoch."""
    data = make_graph(1)
    n = int(data.train_mask.sum())
    assert n % BATCH, "the test needs a short last batch to drop"
    pyg = torch.utils.data.DataLoader(range(n), batch_size=BATCH, shuffle=shuffle, drop_last=True)
    left_out = []
    for epoch in range(3):
        seeds = seed_sets(global_batches(data.edge_index, data.num_nodes, sampling(shuffle), data.train_mask, epoch))
        assert len(seeds) == len(pyg) == n // BATCH == sampling(shuffle).num_batches(n)
        assert [len(s) for s in seeds] == [len(b) for b in pyg] == [BATCH] * (n // BATCH)
        drawn = [v for s in seeds for v in s]
        assert len(set(drawn)) == len(drawn) == n - n % BATCH
        assert set(drawn) <= set(data.train_mask.nonzero().view(-1).tolist())
        left_out.append(set(data.train_mask.nonzero().view(-1).tolist()) - set(drawn))
    if shuffle:
        assert left_out[0] != left_out[1] or left_out[1] != left_out[2]
    else:
        assert left_out[0] == left_out[1] == left_out[2]


def test_fewer_seeds_than_a_batch_give_no_batch_and_without_drop_last_nothing_changes():
    data = make_graph(1)
    n = int(data.train_mask.sum())
    assert global_batches(data.edge_index, data.num_nodes, sampling(batch_size=n + 1), data.train_mask) == []
    exact = global_batches(data.edge_index, data.num_nodes, sampling(batch_size=n), data.train_mask)
    assert len(exact) == 1 and exact[0].num_seeds == n
    plain = NeighborSampling(batch_size=BATCH, shuffle=True, seed=SEED, num_neighbors=FANOUTS)
    assert plain.num_batches(n) == -(-n // BATCH)   # about batch_size seeds each, none dropped


def _worker(rank, world_size):
    data = make_graph(world_size)
    local = shard(data)
    train_idx = data.train_mask.nonzero().view(-1)   # global ids, as PyG's NeighborLoader takes them
    out = {}
    for shuffle in (True, False):
        loader = DistributedNeighborLoader(local, list(FANOUTS), batch_size=BATCH, input_nodes=train_idx,
                                           shuffle=shuffle, seed=SEED, drop_last=True)
        epochs = []
        for _ in range(2):
            before = len(loader)
            batches = [(b.n_id[:b.batch_size], b.global_batch_size, len(loader)) for b in loader]
            epochs.append((before, batches))
        out[shuffle] = epochs
    big = DistributedNeighborLoader(local, list(FANOUTS), batch_size=10_000, input_nodes=train_idx, drop_last=True)
    out["empty"] = (len(big), sum(1 for _ in big))
    try:
        DistributedNodeSubsetLoader(local, batch_size=20, drop_last=True)
        out["subset"] = None
    except ValueError as error:
        out["subset"] = str(error)
    return out


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_distributed_batches_are_the_reference_ones_with_exact_sizes(world_size):
    data = make_graph(world_size)
    n = int(data.train_mask.sum())
    results = launch(_worker, world_size)
    for shuffle in (True, False):
        for epoch in range(2):
            ref = seed_sets(global_batches(data.edge_index, data.num_nodes, sampling(shuffle), data.train_mask, epoch))
            for rank, result in enumerate(results):
                before, batches = result[shuffle][epoch]
                assert before == len(ref) == n // BATCH, (rank, before)
                assert len(batches) == len(ref), f"rank {rank} took {len(batches)} steps, not {len(ref)}"
                assert all(size == BATCH and during == len(ref) for _, size, during in batches)
            for i, seeds in enumerate(ref):   # the ranks' seeds of batch i make up the reference batch
                got = torch.cat([result[shuffle][epoch][1][i][0] for result in results])
                assert sorted(got.tolist()) == seeds, (shuffle, epoch, i)
    for result in results:
        assert result["empty"] == (0, 0)
        assert "drop_last=True) is not supported" in result["subset"]

