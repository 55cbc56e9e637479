"""The checkpoint drill, run by ``tests/checkpoint/test_checkpoint.py`` under ``torchrun --max-restarts=1``.

``python checkpoint_drill.py OUT [CONFIG ...]``: for every configuration (full-graph training with
exact halos and torch dropout, int8 halos, ``staleness=1``, ``NodeDropout``, and mini-batch
training), on the first attempt:

1. the uninterrupted run: ``STEPS`` steps, no checkpoint (its losses are the reference);
2. the run that checkpoints after every step up to ``KILL - 1``; for the last configuration rank
   1 then dies (``os._exit``) while the checkpoint of step ``KILL`` is written (its own files are
   on disk, the checkpoint's metadata is not), so torchrun restarts the job.

On the second attempt every configuration resumes from the newest complete checkpoint (``KILL -
1``; the half-written one must be ignored), runs to ``STEPS`` (saving a final checkpoint) and rank 0
writes ``OUT/<config>.json``: the reference losses, the resumed run's losses (those before the
resume point come from the checkpoint's ``extra``), the step resumed from, and
``OUT/<config>-final.pt``: the final parameters and optimizer state.  Every rank of every attempt
also appends ``attempt rank sum`` to ``OUT/joins.txt`` once it joined (``sum``: an all-reduce of
ones); on the second attempt rank 1 joins 3 s late (tests/launch/test_attempts.py).  Mini-batch steps are batches
(8 per epoch): the kill falls in the middle of the second epoch.
"""
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributed.checkpoint import FileSystemWriter
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, GraphSAGE, SAGEConv

from pyg_sparsecomm import NodeDropout, checkpoint, distribute, distributed_loss, partition_and_shard
from pyg_sparsecomm.comm.rounding import seed_rounding
from pyg_sparsecomm.launch.runtime import distributed_job
from pyg_sparsecomm.loader import DistributedNeighborLoader

STEPS = {"full": 6, "minibatch": 12}
KILL = {"full": 4, "minibatch": 10}
CONFIGS = {"exact": {"dropout": 0.3}, "int8": {"halo_precision": "int8"}, "stale": {"staleness": 1},
           "node_dropout": {"node_dropout": 0.4}, "minibatch": {"minibatch": True}}
NUM_FEATURES, CLASSES = 8, 4
DYING_AT = [0]  # the step being saved


def drill_graph() -> Data:
    """A directed graph with isolated nodes (0..9), self-loops and edge weights."""
    gen = torch.Generator().manual_seed(11)
    n = 120
    edge_index = torch.randint(10, n, (2, 500), generator=gen)
    edge_index = torch.cat([edge_index, torch.arange(10, 20).repeat(2, 1)], dim=1)  # self-loops
    return Data(x=torch.randn(n, NUM_FEATURES, generator=gen), edge_index=edge_index,
                edge_weight=torch.rand(edge_index.size(1), generator=gen) + 0.5,
                y=torch.randint(0, CLASSES, (n,), generator=gen), train_mask=torch.rand(n, generator=gen) < 0.8,
                num_nodes=n)


class Net(torch.nn.Module):
    def __init__(self, dropout: float = 0.0, node_dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = dropout
        self.node_drop = NodeDropout(node_dropout, seed=3)
        self.conv1 = GCNConv(NUM_FEATURES, 16)
        self.conv2 = SAGEConv(16, CLASSES)

    def forward(self, x, adj, n_id):
        x = self.node_drop(x, n_id)
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(self.conv1(x, adj).relu(), adj)


def build(config: dict, local: Data):
    """Model, optimizer, scheduler and (mini-batch) loader, seeded as a script would."""
    torch.manual_seed(0)
    seed_rounding()  # this process may have run other configurations: the rounding streams start anew
    loader = None
    if config.get("minibatch"):
        loader = DistributedNeighborLoader(local, num_neighbors=[4, 4], batch_size=12, input_nodes=local.train_mask,
                                           shuffle=True, seed=5, prefetch=1)
        model = distribute(GraphSAGE(NUM_FEATURES, 16, num_layers=2, out_channels=CLASSES, dropout=0.2))
    else:
        options = {k: v for k, v in config.items() if k in ("halo_precision", "staleness")}
        model = distribute(Net(config.get("dropout", 0.0), config.get("node_dropout", 0.0)), **options)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)
    return model, optimizer, scheduler, loader


def full_graph_steps(model, optimizer, scheduler, local):
    while True:
        model.train()
        optimizer.zero_grad()
        out = model(local.x, local.adj, local.n_id)
        loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])
        loss.backward()
        optimizer.step()
        scheduler.step()
        yield float(loss)


def minibatch_steps(model, optimizer, scheduler, loader):
    while True:
        for batch in loader:
            model.train()
            optimizer.zero_grad()
            out = model(batch.x, batch.adj)
            s = batch.batch_size
            loss = distributed_loss(F.cross_entropy, out[:s], batch.y[:s])
            loss.backward()
            optimizer.step()
            yield float(loss)
        scheduler.step()  # per epoch


def train(config: dict, local: Data, steps: int, ckpt: Path | None = None, stop: int | None = None):
    """Losses of steps 1..``steps``; with ``ckpt``: resumes from it and saves after every step; stops
    before saving step ``stop`` (returns ``None``)."""
    model, optimizer, scheduler, loader = build(config, local)
    objects = {"model": model, "shard": local, "optimizer": optimizer, "scheduler": scheduler, "loader": loader}
    losses, start, point = [], 0, None
    if ckpt is not None:
        point = checkpoint.load(ckpt, **objects)
        if point is not None:
            losses, start = list(point.extra["losses"]), point.step
    if loader is not None:
        run = minibatch_steps(model, optimizer, scheduler, loader)
    else:
        run = full_graph_steps(model, optimizer, scheduler, local)
    for step in range(start + 1, steps + 1):
        losses.append(next(run))
        if ckpt is not None:
            if step == stop:
                return None
            DYING_AT[0] = step
            checkpoint.save(ckpt, step, extra={"losses": losses}, **objects)
    run.close()
    final = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    return losses, (None if point is None else point.step), final


def _die_while_saving(kill: int):
    """Makes rank 1 die while the checkpoint of step ``kill`` is written: its own files are on disk,
    DCP's metadata and ``checkpoint.json`` are not (rank 0 is waiting for rank 1 to finish)."""
    original = FileSystemWriter.write_data

    def write_data(self, plan, planner):
        written = original(self, plan, planner)
        if DYING_AT[0] == kill and torch.distributed.get_rank() == 1:
            written.wait()
            os._exit(3)
        return written
    FileSystemWriter.write_data = write_data


def report_join(out: Path, attempt: int, rank: int) -> None:
    """Appends ``attempt rank sum`` to ``OUT/joins.txt``, ``sum`` an all-reduce of ones over the job."""
    total = torch.ones(1)
    torch.distributed.all_reduce(total)
    with open(out / "joins.txt", "a") as report:
        report.write(f"{attempt} {rank} {int(total)}\n")


def main(out: Path, names: list[str]) -> None:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if attempt == 1 and os.environ["RANK"] == "1":
        time.sleep(3)  # rank 0 would read rank 1's address of the dead attempt if the store still served it
    with distributed_job() as (rank, world_size, _):
        report_join(out, attempt, rank)
        local = partition_and_shard(drill_graph(), method="metis")
        for name in names:
            config, kind = CONFIGS[name], "minibatch" if CONFIGS[name].get("minibatch") else "full"
            ckpt = out / f"ckpt-{name}"
            if attempt == 0:
                reference = train(config, local, STEPS[kind])[0]
                if rank == 0:
                    (out / f"{name}-reference.json").write_text(json.dumps(reference))
                if name == names[-1]:
                    _die_while_saving(KILL[kind])
                    train(config, local, STEPS[kind], ckpt)  # rank 1 dies saving step KILL
                    raise AssertionError("rank 1 should have died")
                train(config, local, STEPS[kind], ckpt, stop=KILL[kind])
                continue
            partial_files = sum(1 for p in ckpt.glob(".partial-*/*"))  # left by the rank that died
            losses, resumed_from, final = train(config, local, STEPS[kind], ckpt)
            if rank == 0:
                reference = json.loads((out / f"{name}-reference.json").read_text())
                (out / f"{name}.json").write_text(json.dumps({"reference": reference, "resumed": losses,
                                                              "resumed_from": resumed_from, "world_size": world_size,
                                                              "partial_files": partial_files}))
                torch.save(final, out / f"{name}-final.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
