"""The checkpoint drill of a table sharded by owner (LightGCN), run by
``tests/checkpoint/test_owner_rows_checkpoint.py`` at P = 3 under ``torchrun --max-restarts=1``
(``python lightgcn_checkpoint_drill.py OUT``) and at P = 2 as two ``launch`` jobs (:func:`drill`, the
attempt given): for two partitions of PyG's LightGCN recipe (``equal``:
every rank owns as many rows of ``embedding.weight``; ``unequal``: every rank another number of
rows), on the first attempt:

1. the uninterrupted run: ``STEPS`` steps of PyG's loop (batches and negatives drawn from the global
   torch stream, BPR loss with the lambda-term over the batch's nodes, Adam), no checkpoint;
2. the run that checkpoints after every step; for ``equal`` it stops before saving step ``KILL``,
   for ``unequal`` the last rank kills itself with SIGKILL (``kill -9``) while that checkpoint is
   written (its own files on disk, the checkpoint's metadata not), so torchrun restarts the job.

On the second attempt both resume in fresh processes (the model built whole, loaded before its first
call) from the newest complete checkpoint (``KILL - 1``), run to ``STEPS`` saving each step, and rank
0 writes ``OUT/<partition>.json`` (the reference losses, the resumed run's, the step resumed from,
every rank's row count); every rank writes ``OUT/<partition>-final-<rank>.pt``: its rows' global ids,
its table and its Adam moments after the last step (``OUT/<partition>-reference-<rank>.pt``: those
of the uninterrupted run).
"""
import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemWriter
from torch_geometric.nn import LightGCN

from pyg_sparsecomm import checkpoint, distribute, shard
from pyg_sparsecomm.graph.datasets import amazon_book_like
from pyg_sparsecomm.launch.runtime import distributed_job

USERS, BOOKS, DIM, BATCH, STEPS, KILL = 30, 42, 8, 32, 6, 4
PARTITIONS = ("equal", "unequal")
DYING_AT = [0]  # the step being saved


def recipe_graph(partition: str, world_size: int):
    """PyG's homogeneous LightGCN graph (users first), its training pairs, partitioned as named."""
    data = amazon_book_like(USERS, BOOKS, 300, isolated=0.1, seed=3).to_homogeneous()
    del data.node_type, data.edge_type
    n = data.num_nodes = USERS + BOOKS
    train = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    if partition == "equal":
        part = torch.arange(n) % world_size
    else:  # rank r owns the nodes at places [n sqrt(r / P), n sqrt((r + 1) / P)) of a shuffle: all sizes differ
        part = torch.empty(n, dtype=torch.long)
        shuffle = torch.randperm(n, generator=torch.Generator().manual_seed(5))
        part[shuffle] = torch.arange(n) ** 2 * world_size // n ** 2
    data.part, data.num_parts = part, world_size
    return data, train


def build(num_nodes: int, dim: int = DIM):
    torch.manual_seed(0)
    model = distribute(LightGCN(num_nodes, dim, num_layers=2))
    return model, torch.optim.Adam(model.parameters(), lr=0.05)


def step(model, optimizer, local, train) -> float:
    """One step of PyG's ``examples/lightgcn.py`` (its batch and negatives drawn from the global stream)."""
    pos = train[:, torch.randperm(train.size(1))[:BATCH]]
    neg = torch.stack([pos[0], torch.randint(USERS, USERS + BOOKS, (pos.size(1),))])
    edge_label_index = torch.cat([pos, neg], dim=1)
    optimizer.zero_grad()
    pos_rank, neg_rank = model(local.adj, edge_label_index).chunk(2)
    loss = model.recommendation_loss(pos_rank, neg_rank, node_id=edge_label_index.unique(), lambda_reg=0.1)
    loss.backward()
    optimizer.step()
    return float(loss)


def train(local, train_pairs, num_nodes, ckpt: Path | None = None, stop: int | None = None):
    """Losses of steps 1..STEPS (resumed from ``ckpt`` and saved after every step when given; stops
    before saving step ``stop``); the step resumed from; the model and optimizer."""
    model, optimizer = build(num_nodes)
    objects = {"model": model, "shard": local, "optimizer": optimizer}
    losses, start = [], 0
    point = None if ckpt is None else checkpoint.load(ckpt, **objects)
    if point is not None:
        losses, start = list(point.extra), point.step
    for number in range(start + 1, STEPS + 1):
        losses.append(step(model, optimizer, local, train_pairs))
        if ckpt is not None:
            if number == stop:
                break
            DYING_AT[0] = number
            checkpoint.save(ckpt, number, extra=losses, **objects)
    return losses, None if point is None else point.step, model, optimizer


def rows_of(model, optimizer, local) -> dict:
    """This rank's rows of the table and of Adam's moments, with their global ids."""
    moments = optimizer.state[model.embedding.weight]
    return {"ids": local.n_id.clone(), "weight": model.embedding.weight.detach().clone(),
            "exp_avg": moments["exp_avg"].clone(), "exp_avg_sq": moments["exp_avg_sq"].clone()}


def _die_while_saving(kill: int) -> None:
    """The last rank is killed (SIGKILL) while the checkpoint of step ``kill`` is written, once its own
    files are on disk (DCP's metadata and ``checkpoint.json`` are not)."""
    original = FileSystemWriter.write_data

    def write_data(self, plan, planner):
        written = original(self, plan, planner)
        if DYING_AT[0] == kill and dist.get_rank() == dist.get_world_size() - 1:
            written.wait()
            (Path(self.path).parents[1] / f"killed-{dist.get_rank()}").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return written
    FileSystemWriter.write_data = write_data


def drill(rank: int, world_size: int, out: Path, attempt: int) -> None:
    """Attempt ``attempt`` of the drill (the module doc), on a process group already joined."""
    for name in PARTITIONS:
        data, train_pairs = recipe_graph(name, world_size)
        local = shard(data)
        ckpt = out / f"ckpt-{name}"
        if attempt == 0:
            reference, _, model, optimizer = train(local, train_pairs, data.num_nodes)
            torch.save(rows_of(model, optimizer, local), out / f"{name}-reference-{rank}.pt")
            if rank == 0:
                (out / f"{name}-reference.json").write_text(json.dumps(reference))
            if name == PARTITIONS[-1]:
                _die_while_saving(KILL)
                train(local, train_pairs, data.num_nodes, ckpt)
                raise AssertionError("the last rank should have been killed")
            train(local, train_pairs, data.num_nodes, ckpt, stop=KILL)
            continue
        losses, resumed_from, model, optimizer = train(local, train_pairs, data.num_nodes, ckpt)
        torch.save(rows_of(model, optimizer, local), out / f"{name}-final-{rank}.pt")
        counts = [0] * world_size
        dist.all_gather_object(counts, local.n_id.numel())
        if rank == 0:
            reference = json.loads((out / f"{name}-reference.json").read_text())
            (out / f"{name}.json").write_text(json.dumps({"reference": reference, "resumed": losses,
                                                          "resumed_from": resumed_from, "counts": counts}))


def main(out: Path) -> None:
    with distributed_job() as (rank, world_size, _):
        drill(rank, world_size, out, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
