"""The distributed loaders take PyG NeighborLoader's arguments as PyG means them, in real gloo
runs: ``input_nodes`` as global ids or a global mask (each rank keeps the seeds it owns; no
validation or test node becomes a seed), a shard-local mask, errors on every rank for a bad
one; ``len(loader)``, ``len(loader.dataset)`` and ``batch.global_batch_size`` equal on every
rank and equal to what an epoch yields; batch tensors keep their dimensions when a rank's share
is 0 or 1 seed; PyG's keywords mapped or refused by name."""
import inspect

import pytest
import torch
from test_loader import N, make_graph
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn.models import GraphSAGE

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.loader import DistributedNeighborLoader, DistributedNodeSubsetLoader, NeighborSampling
from pyg_sparsecomm.testing import launch

NUM_TRAIN = 30  # the training nodes are 0 .. 29, as Planetoid's split_idx["train"] = 0 .. 139


def split_graph(world_size):
    data = make_graph(world_size)
    data.train_mask = torch.arange(N) < NUM_TRAIN
    data.val_mask = (torch.arange(N) >= NUM_TRAIN) & (torch.arange(N) < 2 * NUM_TRAIN)
    return data


def _loaders(local, data, input_nodes, **kwargs):
    return [DistributedNeighborLoader(local, [3, 2], batch_size=8, input_nodes=input_nodes, shuffle=True, **kwargs),
            DistributedNodeSubsetLoader(local, batch_size=20, input_nodes=input_nodes, shuffle=True, **kwargs)]


def _seeds_worker(rank, world_size):
    data = split_graph(world_size)
    local = shard(data)
    forms = {"global index": torch.arange(NUM_TRAIN), "global mask": data.train_mask,
             "shard mask": local.train_mask, "int32 global index": torch.arange(NUM_TRAIN, dtype=torch.int32)}
    seeds = {}
    for form, input_nodes in forms.items():
        try:
            loaders = _loaders(local, data, input_nodes)
        except ValueError as error:  # reported per form (every rank raises alike)
            seeds.update({(form, k): str(error) for k in (0, 1)})
            continue
        for k, loader in enumerate(loaders):
            seeds[(form, k)] = [torch.cat([b.n_id[:b.batch_size] for b in loader]).tolist() for _ in range(2)]
    owned_train = local.n_id[local.train_mask].tolist()
    return {"seeds": seeds, "owned_train": owned_train, "progress": _reported(_progress, local),
            "errors": _reported(_errors, local, rank)}


def _reported(fn, *args):
    """``fn(*args)``, or the error it raised as a string (each test then fails on its own part)."""
    try:
        return fn(*args)
    except Exception as error:  # noqa: BLE001
        return f"{type(error).__name__}: {error}"


def _progress(local):
    """Batches of 1 seed (about a third of the random batches are empty, and skipped): what a
    progress bar reads, and the shapes of every batch's tensors (0 or 1 seed on a rank)."""
    torch.manual_seed(0)
    model = distribute(GraphSAGE(5, 8, 2, 3))
    out = []
    for loader in (DistributedNeighborLoader(local, [3, 2], batch_size=1, input_nodes=torch.arange(NUM_TRAIN),
                                             shuffle=True, num_workers=2),
                   DistributedNodeSubsetLoader(local, batch_size=3, input_nodes=torch.arange(NUM_TRAIN),
                                               shuffle=True)):
        for _ in range(2):
            before, inside, batches = len(loader), [], []
            for batch in loader:
                inside.append(len(loader))
                scored = model(batch.x, batch.edge_index)[:batch.batch_size]
                batches.append((batch.batch_size, batch.global_batch_size, tuple(scored.shape),
                                batch.x.dim(), batch.y.dim(), batch.n_id.dim(), batch.seed_mask.dim(),
                                tuple(batch.y[:batch.batch_size].shape)))
            out.append((before, inside, len(loader.dataset), batches, loader.num_batches))
    return out


def _errors(local, rank):
    """A bad input_nodes on rank 1 only: every rank raises (not rank 1 alone while rank 0 waits)."""
    try:
        bad = torch.ones(7, dtype=torch.bool) if rank == 1 else local.train_mask
        DistributedNeighborLoader(local, [3], input_nodes=bad)
    except ValueError as error:
        return str(error)
    return None


_RUNS: dict = {}


def run(world_size):
    if world_size not in _RUNS:
        _RUNS[world_size] = launch(_seeds_worker, world_size, timeout=300)
    return _RUNS[world_size]


@pytest.mark.parametrize("world_size", [2, 4])
def test_global_train_index_gives_each_rank_exactly_its_own_training_nodes(world_size):
    """Issue 23, trap 2: split_idx["train"] (global ids) was read as shard rows, and validation
    and test nodes became seeds (label leakage) without an error."""
    per_rank = run(world_size)
    for form in ("global index", "global mask", "shard mask", "int32 global index"):
        for k in (0, 1):
            union = []
            for r in per_rank:
                assert not isinstance(r["seeds"][(form, k)], str), (form, r["seeds"][(form, k)])
                for epoch_seeds in r["seeds"][(form, k)]:
                    assert sorted(epoch_seeds) == sorted(r["owned_train"]), (form, k)
                union += r["seeds"][(form, k)][0]
            assert sorted(union) == list(range(NUM_TRAIN)), (form, k)  # every training node, once, nothing else
    assert all(r["owned_train"] for r in per_rank[:2])  # both ranks own training nodes: a real split


@pytest.mark.parametrize("world_size", [2, 4])
def test_progress_counts_and_shapes_are_the_same_on_every_rank(world_size):
    per_rank = [r["progress"] for r in run(world_size)]
    assert not any(isinstance(r, str) for r in per_rank), per_rank
    shares = set()
    for runs in zip(*per_rank, strict=True):  # the same loader and epoch on every rank
        before, inside, num_seeds, batches, num_batches = runs[0]
        assert num_seeds == NUM_TRAIN and len(batches) < num_batches  # some random batches were empty
        assert before == len(batches) and set(inside) == {before}  # len(loader): the batches yielded
        assert sum(b[1] for b in batches) == NUM_TRAIN  # global_batch_size adds up to len(dataset)
        for r in runs:
            assert r[:3] == (before, inside, num_seeds)
            assert [b[1] for b in r[3]] == [b[1] for b in batches]  # the same global sizes, in order
            for share, _, scored, *dims, y_shape in r[3]:
                assert scored == (share, 3) and y_shape == (share,) and dims == [2, 1, 1, 1]
                shares.add(share)
        assert sum(sum(b[0] for b in r[3]) for r in runs) == NUM_TRAIN
    assert {0, 1} <= shares  # the cases that change a .squeeze(): a rank with 0 and with 1 seed


def test_a_bad_input_nodes_on_one_rank_raises_on_every_rank():
    for message in [r["errors"] for r in run(2)]:
        assert message is not None and "rank 1" in message and "input_nodes is a bool mask of length 7" in message


def test_input_nodes_errors_name_the_fix():
    from pyg_sparsecomm.loader.seeds import owned_seed_mask
    n_id, n = torch.tensor([3, 0, 2, 1]), 4
    with pytest.raises(ValueError, match="local.n_id\\[mask\\]"):  # owns every node, in another order
        owned_seed_mask(torch.ones(4, dtype=torch.bool), n_id, n)
    assert owned_seed_mask(torch.tensor([1, 3]), n_id, n).tolist() == [True, False, False, True]
    assert owned_seed_mask(torch.tensor([True, False, False, False]), torch.arange(4), n).tolist()[0]
    with pytest.raises(ValueError, match="global node ids .* in \\[0, 4\\)"):
        owned_seed_mask(torch.tensor([4]), n_id, n)
    with pytest.raises(ValueError, match="duplicate"):
        owned_seed_mask(torch.tensor([1, 1]), n_id, n)
    with pytest.raises(ValueError, match="dtype torch.float32"):
        owned_seed_mask(torch.tensor([1.0]), n_id, n)
    with pytest.raises(ValueError, match="node type"):
        owned_seed_mask(("paper", torch.tensor([1])), n_id, n)
    with pytest.raises(ValueError, match="length 3, but the graph has 4 nodes and this rank owns 2 rows"):
        owned_seed_mask(torch.ones(3, dtype=torch.bool), torch.tensor([0, 1]), n)


def test_fanouts_must_be_integers():
    local = shard(make_graph(1), rank=0, world_size=1)
    for fanouts in ([2.5], [10.0, 5], [True], ["10"]):
        with pytest.raises(ValueError, match="integer fanouts"):
            DistributedNeighborLoader(local, fanouts)
    with pytest.raises(ValueError, match="per edge type"):
        DistributedNeighborLoader(local, {("a", "to", "a"): [3]})
    with pytest.raises(ValueError, match="list of fanouts"):
        DistributedNeighborLoader(local, 3)
    import numpy as np
    assert NeighborSampling(batch_size=1, num_neighbors=(np.int64(3), torch.tensor(-1))).num_neighbors == (3, -1)


def _another_value(accepted):
    if accepted is None or isinstance(accepted, bool):
        return "x" if accepted is None else not accepted
    return 5 if accepted == 0 else "induced"


def test_every_pyg_neighbor_loader_keyword_is_taken_or_refused_by_name():
    """PyG's NeighborLoader and the torch DataLoader it passes **kwargs to: every keyword is the
    loader's own, harmless, accepted at PyG's default, or num_workers/prefetch_factor."""
    from pyg_sparsecomm.loader.pyg_options import DEFAULT_ONLY, HARMLESS
    # PyG's `data` is the first positional argument: the shard
    own = set(inspect.signature(DistributedNeighborLoader.__init__).parameters) | {"data"}
    pyg = set(inspect.signature(NeighborLoader.__init__).parameters) | set(
        inspect.signature(torch.utils.data.DataLoader.__init__).parameters)
    pyg -= {"self", "kwargs", "dataset"}
    assert pyg <= own | set(HARMLESS) | set(DEFAULT_ONLY) | {"num_workers", "prefetch_factor"}, \
        pyg - own - set(HARMLESS) - set(DEFAULT_ONLY)
    local = shard(make_graph(1), rank=0, world_size=1)
    for key, (accepted, _) in DEFAULT_ONLY.items():
        DistributedNeighborLoader(local, [3], **{key: accepted})
        refused = _another_value(accepted)
        with pytest.raises(ValueError, match=f"{key}={refused!r}\\) is not supported: "):
            DistributedNeighborLoader(local, [3], **{key: refused})
    assert DistributedNeighborLoader(local, [3], **{key: True for key in HARMLESS}).prefetch == 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_neigbors'.*persistent_workers"):
        DistributedNeighborLoader(local, [3], num_neigbors=[3])
    assert DistributedNeighborLoader(local, [3], num_workers=0).prefetch == 0
    assert DistributedNeighborLoader(local, [3], num_workers=3).prefetch == 3
    assert DistributedNeighborLoader(local, [3], num_workers=2, prefetch_factor=2).prefetch == 4
    assert DistributedNodeSubsetLoader(local, num_workers=2, shuffle=None).prefetch == 2
    with pytest.raises(ValueError, match="disagree"):
        DistributedNeighborLoader(local, [3], num_workers=2, prefetch=1)
    with pytest.raises(ValueError, match="num_workers must be a non-negative integer"):
        DistributedNeighborLoader(local, [3], num_workers=-1)
    with pytest.raises(ValueError, match="disjoint=True"):
        DistributedNodeSubsetLoader(local, disjoint=True)
