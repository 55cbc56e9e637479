"""Index lists of nodes are sharded like masks (issue 54): ``data.train_idx``, ``data.split_idx`` and
``Entities``' ``train_y`` travel with the data through partition_and_shard / shard / save_partition,
an ad-hoc list goes through ``shard_index``, and on every rank each becomes the rows of its owned
nodes, in the list's order; the loss, accuracy and count of them equal single-process PyG's; the
loaders take them; GlobalEvaluator scores all ranks' rows; a plain integer index is refused
(global_count, gather_nodes, an index of another shard's rows) on every rank, in real gloo runs at
P = 1..4 on a directed graph with isolated nodes, an empty part (P >= 3) and a part owning none of
the ids; heterogeneous index lists, the 1.5D replicas, and the rule that tells an index list from a
node attribute."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import (
    GlobalEvaluator,
    ShardIndex,
    distribute,
    distributed_loss,
    gather_nodes,
    global_accuracy,
    global_count,
    load_shard,
    partition_and_shard,
    save_partition,
    shard,
    shard_index,
)
from pyg_sparsecomm.comm import ProcessGrid
from pyg_sparsecomm.loader import DistributedNeighborLoader, DistributedNodeSubsetLoader
from pyg_sparsecomm.testing import launch

N, C = 48, 3


def graph(world_size: int) -> Data:
    """Directed, nodes 0..5 isolated; P >= 3: the last part owns nothing; part 1 owns none of the ids."""
    gen = torch.Generator().manual_seed(5)
    edge_index = torch.randint(6, N, (2, 160), generator=gen)
    busy = max(world_size - 1, 1) if world_size >= 3 else world_size
    part = torch.randint(0, busy, (N,), generator=gen)
    ids = torch.nonzero(part != 1).view(-1) if world_size > 1 else torch.arange(N)
    train_idx = ids[torch.randperm(ids.numel(), generator=gen)[:ids.numel() // 2]]
    return Data(x=torch.randn(N, 5, generator=gen), edge_index=edge_index, y=torch.randint(0, C, (N,), generator=gen),
                part=part, num_parts=world_size, num_nodes=N,
                train_idx=train_idx, train_y=torch.randint(0, C, (train_idx.numel(),), generator=gen),
                test_idx=torch.arange(0, N, 5).flip(0), idx_val=torch.tensor([7, 3, 7, 11]),
                split_idx={"train": train_idx, "valid": torch.tensor([1, 2]), "test": torch.arange(N - 6, N)},
                cluster_idx=torch.randint(0, 4, (N,), generator=gen))


def reference(data: Data) -> dict:
    torch.manual_seed(0)
    conv = GCNConv(5, C)
    out = conv(data.x, data.edge_index)
    idx = data.train_idx
    loss = F.cross_entropy(out[idx], data.train_y)
    loss.backward()
    test = data.split_idx["test"]
    return {"loss": float(loss), "grad": conv.lin.weight.grad, "acc": float((out.argmax(-1)[test] == data.y[test])
                                                                             .double().mean())}


class Accuracy:
    """OGB's Evaluator's accuracy (NumPy or torch inputs of shape [n, 1])."""

    def eval(self, input_dict):
        y_true, y_pred = (torch.as_tensor(input_dict[k]) for k in ("y_true", "y_pred"))
        return {"acc": float((y_true == y_pred).double().mean())}


class HostAccuracy(Accuracy):
    """OGB's Evaluator as it reads its input: ``y.detach().cpu().numpy()`` first."""

    def eval(self, input_dict):
        return super().eval({k: v.detach().cpu().numpy() for k, v in input_dict.items()})


def plain(t: torch.Tensor) -> torch.Tensor:
    """This rank's rows of a selection as a plain tensor, NumPy on purpose (GlobalEvaluator takes arrays too)."""
    return t.as_subclass(torch.Tensor)


def _expected_rows(local, ids: torch.Tensor) -> torch.Tensor:
    """The rows of the owned nodes among ``ids``, in their order (duplicates kept), computed plainly."""
    where = {int(g): r for r, g in enumerate(local.n_id)}
    return torch.tensor([where[int(i)] for i in ids if int(i) in where], dtype=torch.long)


def _refusal(call) -> str | None:
    try:
        call()
    except (ValueError, IndexError, TypeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def _worker(rank, world_size):
    data = graph(world_size)
    local = partition_and_shard(data)
    checks = {}
    for key in ("train_idx", "test_idx", "idx_val"):
        checks[key] = (type(local[key]) is ShardIndex, local[key].tolist() == _expected_rows(local, data[key]).tolist())
    checks["split_idx"] = all(type(v) is ShardIndex and v.tolist() == _expected_rows(local, data.split_idx[k]).tolist()
                              for k, v in local.split_idx.items())
    owned = torch.isin(data.train_idx, local.n_id)
    checks["train_y"] = local.train_y.tolist() == data.train_y[owned].tolist()
    checks["cluster_idx"] = local.cluster_idx.tolist() == data.cluster_idx[local.n_id].tolist()  # per node
    adhoc = shard_index({"ids": torch.tensor([N - 1, 0, 9, 9]), "mask": torch.arange(N) % 3 == 0}, local)
    checks["shard_index ids"] = adhoc["ids"].tolist() == _expected_rows(local, torch.tensor([N - 1, 0, 9, 9])).tolist()
    checks["shard_index mask"] = adhoc["mask"].tolist() == (local.n_id % 3 == 0).tolist()

    torch.manual_seed(0)
    conv = distribute(GCNConv(5, C))
    out = conv(local.x, local.edge_index)
    loss = distributed_loss(F.cross_entropy, out[local.train_idx], local.train_y)
    loss.backward()
    test = local.split_idx["test"]
    results = {"loss": float(loss), "grad": conv.lin.weight.grad,
               "acc": global_accuracy(out.argmax(-1)[test], local.y[test]),
               "count": global_count(local.train_idx),
               "evaluator": GlobalEvaluator(Accuracy()).eval({"y_true": plain(local.y[test].view(-1, 1)).numpy(),
                                                               "y_pred": out.argmax(-1, keepdim=True)[test]}),
               "host evaluator": GlobalEvaluator(HostAccuracy()).eval({"y_true": local.y[test].view(-1, 1),
                                                                       "y_pred": out.argmax(-1, keepdim=True)[test]})}
    seeds = {}
    for form, nodes in {"ShardIndex": local.train_idx, "global ids": data.train_idx}.items():
        loaders = (DistributedNeighborLoader(local, [2], batch_size=4, input_nodes=nodes, shuffle=True),
                   DistributedNodeSubsetLoader(local, batch_size=6, input_nodes=nodes, shuffle=True))
        seeds[form] = [[b.n_id[:b.batch_size].tolist() for b in loader] for loader in loaders]
    gathered = gather_nodes(out.detach(), local, dst=None)
    refusals = {
        "global_count": _refusal(lambda: global_count(data.train_idx)),
        "gather_nodes": _refusal(lambda: gather_nodes(local.train_idx, local)),
        "gathered[idx]": _refusal(lambda: gathered[local.train_idx]),
        "plain evaluator": _refusal(lambda: HostAccuracy().eval({"y_true": local.y[test].view(-1, 1), "y_pred":
                                                                 out.detach().argmax(-1, keepdim=True)[test]})),
        "loader": _refusal(lambda: DistributedNeighborLoader(  # rows of a shard of one row more: another's
            local, [2], input_nodes=ShardIndex.of(torch.tensor([0]), local.num_nodes + 1, N))),
    }
    return checks, results, seeds, refusals


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_index_lists_sharded_like_masks(world_size):
    data = graph(world_size)
    if world_size > 1:  # the case of a part owning none of the ids
        assert not torch.isin(data.train_idx, torch.nonzero(data.part == 1).view(-1)).any()
    ref = reference(data)
    per_rank = launch(_worker, world_size, timeout=600)
    for rank, (checks, results, seeds, refusals) in enumerate(per_rank):
        assert all(v if isinstance(v, bool) else all(v) for v in checks.values()), (rank, checks)
        assert results["loss"] == pytest.approx(ref["loss"], abs=1e-6)
        torch.testing.assert_close(results["grad"], ref["grad"], atol=1e-6, rtol=1e-5)
        assert results["acc"] == pytest.approx(ref["acc"], abs=1e-9)
        assert results["evaluator"]["acc"] == pytest.approx(ref["acc"], abs=1e-9)
        assert results["host evaluator"]["acc"] == pytest.approx(ref["acc"], abs=1e-9)
        assert results["count"] == data.train_idx.numel()
        assert seeds["ShardIndex"] == seeds["global ids"], rank
        assert "shard_index" in refusals["gather_nodes"], refusals
        if world_size > 1:
            assert "shard_index(split_idx, data)" in refusals["global_count"], refusals
            assert refusals["gathered[idx]"].startswith("IndexError: an index of a shard's rows"), refusals
            # a plain Evaluator would score this rank's rows: refused on every rank, naming the wrap
            assert "GlobalEvaluator(Evaluator(name))" in refusals["plain evaluator"], refusals
        else:  # one part: the rows are the graph's nodes in order; both readings agree
            assert refusals["global_count"] is None and refusals["gathered[idx]"] is None, refusals
            assert refusals["plain evaluator"] is None, refusals
        assert "the rows of another shard" in refusals["loader"], refusals


def _one_owner_worker(rank, world_size):
    data = graph(world_size)
    data.part = torch.zeros(N, dtype=torch.long)  # rank 0 owns every node, the other parts are empty
    local = partition_and_shard(data)
    test = local.split_idx["test"]
    adhoc = shard_index(torch.arange(N), local)
    return {"marked": [type(local.y[i]).__name__ for i in (local.train_idx, test, adhoc)],
            "plain evaluator": _refusal(lambda: HostAccuracy().eval({"y_true": local.y[test].view(-1, 1),
                                                                     "y_pred": local.y[test].view(-1, 1)})),
            "global_count": global_count(local.train_idx)}


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_rank_owning_every_node_refuses_as_its_peers_do(world_size):
    """Owning every node (the other parts empty), a rank's selections are still its share of a
    partitioned graph: it refuses NumPy like its peers, not passing where they raise."""
    for rank, seen in enumerate(launch(_one_owner_worker, world_size)):
        assert seen["marked"] == ["ShardSelection"] * 3, (rank, seen)
        assert "GlobalEvaluator(Evaluator(name))" in seen["plain evaluator"], (rank, seen)
        assert seen["global_count"] == graph(world_size).train_idx.numel()


def test_recognition_rule():
    data = graph(2)
    data.node_idx = torch.arange(N)          # one entry per node, not a split name: a node attribute
    data.valid_idx = torch.arange(N)         # a split name: an index list whatever its length
    data.edge_idx = torch.tensor([0, 1])     # names edges
    data.idx = torch.tensor([3, 4])
    local = shard(data, rank=0, world_size=2)
    assert type(local.node_idx) is not ShardIndex and local.node_idx.tolist() == local.n_id.tolist()
    assert type(local.valid_idx) is ShardIndex and local.valid_idx.tolist() == list(range(local.num_nodes))
    assert type(local.edge_idx) is not ShardIndex and local.edge_idx.tolist() == [0, 1]
    assert type(local.idx) is ShardIndex
    data.test_idx = torch.tensor([0, N])
    with pytest.raises(ValueError, match=r"data.test_idx holds node ids in \[0, 48\], but the graph has 48 nodes"):
        shard(data, rank=0, world_size=2)


def test_saved_partition_and_replicas(tmp_path):
    data = graph(2)
    save_partition(data, tmp_path / "parts")
    for rank in range(2):
        loaded, made = load_shard(tmp_path / "parts", rank=rank, world_size=2), shard(data, rank=rank, world_size=2)
        assert type(loaded.train_idx) is ShardIndex and loaded.train_idx.tolist() == made.train_idx.tolist()
        assert loaded.split_idx["test"].tolist() == made.split_idx["test"].tolist()
    ids = []  # P = 4 with c = 2: two block rows, each row's ids on exactly one of its replicas
    labels = []
    for rank in range(4):
        local = shard(data, grid=ProcessGrid(2, world_size=4, rank=rank))
        assert bool(local.owner_mask[local.train_idx].all())
        ids += local.n_id[local.train_idx].tolist()
        labels += local.train_y.tolist()
        assert shard_index(data.train_idx, local).tolist() == local.train_idx.tolist()
    assert sorted(zip(ids, labels, strict=True)) == sorted(zip(data.train_idx.tolist(), data.train_y.tolist(),
                                                                    strict=True))


def hetero(world_size: int = 2) -> HeteroData:
    gen = torch.Generator().manual_seed(3)
    data = HeteroData()
    data["paper"].x = torch.randn(20, 4, generator=gen)
    data["author"].x = torch.randn(10, 4, generator=gen)
    data["paper"].train_idx = torch.tensor([19, 2, 5, 11])
    data["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 10, (30,), generator=gen),
                                                                torch.randint(0, 20, (30,), generator=gen)])
    data["paper"].part = torch.randint(0, world_size, (20,), generator=gen)
    data["author"].part = torch.randint(0, world_size, (10,), generator=gen)
    data.num_parts = world_size
    data.split_idx = {"train": {"paper": torch.tensor([1, 2, 3])}, "test": {"author": torch.tensor([0, 9])}}
    return data


def test_heterogeneous_index_lists():
    data = hetero()
    for rank in range(2):
        local = shard(data, rank=rank, world_size=2)
        n_id = local["paper"].n_id
        assert type(local["paper"].train_idx) is ShardIndex
        assert n_id[local["paper"].train_idx].tolist() == [i for i in (19, 2, 5, 11) if i in n_id.tolist()]
        assert n_id[local.split_idx["train"]["paper"]].tolist() == [i for i in (1, 2, 3) if i in n_id.tolist()]
        authors = local["author"].n_id
        assert authors[local.split_idx["test"]["author"]].tolist() == [i for i in (0, 9) if i in authors.tolist()]
        ids = shard_index(torch.tensor([4, 0]), local, node_type="author")
        assert authors[ids].tolist() == [i for i in (4, 0) if i in authors.tolist()]
        with pytest.raises(ValueError, match="names no node type"):
            shard_index(torch.tensor([4, 0]), local)
    data.test_idx = torch.tensor([1, 2])
    with pytest.raises(ValueError, match=r"data.test_idx of a HeteroData names no node type"):
        shard(data, rank=0, world_size=2)


def _hetero_loader_worker(rank, world_size):
    data = hetero(world_size)
    local = shard(data)
    seeds = {}
    for form, nodes in {"ShardIndex": local["paper"].train_idx, "global ids": data["paper"].train_idx}.items():
        loader = DistributedNeighborLoader(local, {et: [2] for et in local.edge_types}, batch_size=2,
                                           input_nodes=("paper", nodes), shuffle=True)
        seeds[form] = [b["paper"].n_id[:b["paper"].batch_size].tolist() for b in loader]
    return seeds


def test_heterogeneous_loader_takes_an_index_of_rows():
    per_rank = launch(_hetero_loader_worker, 2, timeout=300)
    for seeds in per_rank:
        assert seeds["ShardIndex"] == seeds["global ids"]
    assert sorted(i for seeds in per_rank for batch in seeds["ShardIndex"] for i in batch) == [2, 5, 11, 19]
