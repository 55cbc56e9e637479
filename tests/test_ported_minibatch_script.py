"""A user's ported mini-batch script at P = 2 (issue 45, finding 0), as they wrote it.

* ``model.reset_parameters()`` after ``distribute()``, no seed shared by the ranks: each rank drew
  its own parameters and trained its own model, silently (after 20 epochs the ranks' weights
  differed by 0.12, test accuracy 31 % against 80 %): the parameter check ran on full-graph shards
  only.  Now a layer's first mini-batch call compares its parameters, once (not per batch),
  homogeneous and heterogeneous, and every rank raises the full-graph case's error.
* The same script with the parameters reset before ``distribute()`` trains, the same weights on
  every rank, and its upstream habits behave: ``f"{loss:.4f}"`` formats (it raised "unsupported
  format string passed to WholeGraphLoss.__format__"), ``float(loss)`` gives no torch warning,
  and the two habits that print per-rank numbers (an epoch loss weighted by ``batch.batch_size``,
  a progress bar advanced by it) warn once each, naming ``global_batch_size``, while the
  legitimate uses of the local count (slicing, counting) do not."""
import io
import warnings

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GraphSAGE, HeteroConv
from tqdm import tqdm

from pyg_sparsecomm import SparsityAwarePartitioner, distribute, distributed_loss, partition_on_rank_zero, shard
from pyg_sparsecomm.graph.datasets import igbh_like, sbm_graph
from pyg_sparsecomm.loader import DistributedNeighborLoader
from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.training.per_rank import PerRankValueWarning

CLASSES = 4


def users_script(reset_after_distribute: bool) -> dict:
    """The user's mini-batch loop (``distribute()``, then ``reset_parameters()``, no seed: the
    first case), with PyG's habits of logging an epoch."""
    data = sbm_graph(num_nodes=200, num_classes=CLASSES, num_features=8, seed=0)
    data = partition_on_rank_zero(SparsityAwarePartitioner(torch.distributed.get_world_size()), data)
    local = shard(data)
    loader = DistributedNeighborLoader(local, num_neighbors=[5, 5], batch_size=16, input_nodes=local.train_mask,
                                       shuffle=True)
    model = GraphSAGE(8, 16, num_layers=2, out_channels=CLASSES)
    if not reset_after_distribute:
        torch.manual_seed(0)
        model.reset_parameters()
    model = distribute(model)
    if reset_after_distribute:
        model.reset_parameters()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    lines, seeds = [], 0
    for _ in range(2):  # epochs
        pbar = tqdm(total=len(loader.dataset), file=io.StringIO())
        total_loss = total_examples = 0
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.adj)[:batch.batch_size]
            loss = distributed_loss(F.cross_entropy, out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * batch.batch_size      # per-rank weights: warns once
            total_examples += batch.batch_size                # a local count, legitimately
            pbar.update(batch.batch_size)                     # ends at this rank's share: warns once
            seeds += int(loss.detach() * batch.global_batch_size > -1)  # the global count: no warning
            lines.append((f"{loss:.4f}", f"{float(loss):.4f}"))
        pbar.close()
    return {"weights": torch.cat([p.detach().reshape(-1) for p in model.parameters()]), "lines": lines}


def hetero_script() -> None:
    """The heterogeneous twin: ``HeteroConv`` of ``GATConv``, reset after ``distribute()``."""
    data = igbh_like(num_papers=40, num_authors=30, num_institutes=3, num_fos=6, num_features=8, seed=1)
    local = shard(SparsityAwarePartitioner(torch.distributed.get_world_size(), method="random", seed=1)(data))
    loader = DistributedNeighborLoader(local, [3, 2], batch_size=8, input_nodes=("paper", local["paper"].train_mask))
    model = distribute(HeteroConv({et: GATConv((8, 8), 8, add_self_loops=False) for et in local.edge_types}))
    for conv in model.convs.values():
        conv.reset_parameters()
    for batch in loader:
        out = model(batch.x_dict, batch.adj_dict)["paper"][:batch["paper"].batch_size]
        distributed_loss(F.cross_entropy, out, batch["paper"].y[:batch["paper"].batch_size]).backward()


def _agreeing(world_size: int) -> dict:
    """The script with the parameters reset before ``distribute()``: what it warned, how often the
    layers compared their parameters, whether the ranks hold the same weights."""
    import pyg_sparsecomm.nn.runtime.first_use as first_use
    gathers = []
    original = first_use.host_all_gather
    first_use.host_all_gather = lambda *a, **k: (gathers.append(1), original(*a, **k))[1]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            run = users_script(reset_after_distribute=False)
    finally:
        first_use.host_all_gather = original
    everyone = [torch.empty_like(run["weights"]) for _ in range(world_size)]
    torch.distributed.all_gather(everyone, run["weights"])
    return {"checks": len(gathers), "same weights": all(torch.equal(everyone[0], w) for w in everyone),
            "lines": run["lines"], "warnings": [(w.category.__name__, str(w.message)) for w in caught]}


def _worker(rank, world_size):
    results = {"agreeing": _agreeing(world_size)}
    for name, script in (("hetero", hetero_script), ("user", lambda: users_script(reset_after_distribute=True))):
        torch.manual_seed(rank)  # the ranks' generators differ, as after any rank-dependent draw of a real script
        try:
            script()
            results[name] = None
        except ValueError as error:
            results[name] = str(error)
    return results


def test_users_minibatch_script_at_p2():
    per_rank = launch(_worker, 2, timeout=240, pg_timeout=30)
    for rank, results in enumerate(per_rank):
        agreeing = results["agreeing"]
        assert agreeing["same weights"], f"rank {rank}: parameters reset before distribute() trained apart"
        assert agreeing["checks"] == 2, f"rank {rank}: {agreeing['checks']} parameter checks, not one per layer (2)"
        assert all(formatted == plain for formatted, plain in agreeing["lines"]), agreeing["lines"]
        caught = agreeing["warnings"]
        assert not [m for _, m in caught if "requires_grad=True to a scalar" in m], caught
        hints = [m for category, m in caught if category == PerRankValueWarning.__name__]
        assert len(hints) == 2, caught  # once each, though every batch of two epochs repeats them
        assert "multiplied by batch.batch_size" in hints[0] and "batch.global_batch_size" in hints[0], hints
        assert "progress bar" in hints[1] and "batch.global_batch_size" in hints[1], hints
        for name in ("user", "hetero"):
            message = results[name]
            assert message is not None, f"rank {rank}: the {name} script trained one model per rank without error"
            for words in ("different parameters", "first call on a mini-batch", "manual_seed",
                          "reset_parameters() before distribute()"):
                assert words in message, f"rank {rank}, {name}: {message}"
        assert results["user"].startswith("SAGEConv"), results["user"]
        assert results["hetero"].startswith("GATConv on relation"), results["hetero"]
    assert per_rank[0]["user"] == per_rank[1]["user"] and per_rank[0]["hetero"] == per_rank[1]["hetero"]
