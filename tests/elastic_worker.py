"""Run by ``tests/launch/test_elastic.py`` under an elastic ``torchrun --nnodes 1:2`` job of two agents
("nodes"), one worker each: ``python elastic_worker.py OUT [--allow-repartition]``.

First attempt (2 ranks; if the first round of the rendezvous closed before node B joined, node
A's 1-rank worker waits until B's arrival restarts it): full-graph training
(``checkpoint_drill.Net``, exact halos) for ``SAVED`` steps with a checkpoint after each
(``examples/train_gcn.py``'s ``resume`` and ``checkpoint.save``); the worker of node A
(``ELASTIC_NODE=a``) then writes ``OUT/at-save.pt`` (the parameters) and that of node B writes its
pid into ``OUT/doomed`` and waits: the test kills it and its agent (a node lost).  A's worker's
next collective fails, its agent restarts it, and torchrun's rendezvous completes without the lost
node.

Second attempt (1 rank): ``resume`` loads the 2-rank checkpoint (re-partitioned with
``--allow-repartition``; without it the example's error ends the job), checks the parameters are
those saved, trains to ``STEPS`` and writes ``OUT/result.json`` with the loss curve and that of an
uninterrupted 1-rank run of the same model.
"""
import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from checkpoint_drill import Net, drill_graph

from pyg_sparsecomm import checkpoint, distribute, distributed_loss, partition_and_shard
from pyg_sparsecomm.launch.runtime import distributed_job

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_gcn import resume  # noqa: E402  (the examples' --checkpoint-dir / --allow-repartition)

SAVED, STEPS = 3, 6


def steps(local, args, first: int, last: int, ckpt: Path | None = None):
    """Losses of steps ``first..last`` of a model resumed from ``ckpt`` (or fresh: ``ckpt=None``);
    a checkpoint after every step; also the resume point, the parameters loaded and the final ones."""
    torch.manual_seed(0)
    model = distribute(Net())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    saved = {"model": model, "shard": local, "optimizer": optimizer}
    point = None
    if ckpt is not None:
        point = resume(argparse.Namespace(checkpoint_dir=str(ckpt), allow_repartition=args.allow_repartition),
                       saved, dist.get_rank(), verbose=False)
    loaded = _copy(model.state_dict())
    losses = [] if point is None else list(point.extra)
    for step in range((first if point is None else point.step + 1), last + 1):
        optimizer.zero_grad()
        out = model(local.x, local.adj, local.n_id)
        loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
        if ckpt is not None:
            checkpoint.save(ckpt, step, extra=losses, **saved)
    return losses, point, loaded, _copy(model.state_dict())


def _copy(state: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k]
                                        for k, v in a.items())


def main(args) -> None:
    out = Path(args.out)
    with distributed_job(timeout=timedelta(seconds=60)) as (rank, world_size, _):
        if world_size == 1 and not (out / "at-save.pt").exists():
            time.sleep(120)  # the first round closed before node B joined: B's arrival restarts this worker
            raise AssertionError("node B did not join")
        local = partition_and_shard(drill_graph(), method="metis")
        if not (out / "at-save.pt").exists():  # the first attempt
            assert world_size == 2, f"the first attempt should have 2 ranks, got {world_size}"
            losses, _, _, final = steps(local, args, 1, SAVED, out / "ckpt")
            dist.barrier()
            if os.environ["ELASTIC_NODE"] == "b":  # the node the test kills (it may hold rank 0 or 1)
                (out / "doomed").write_text(str(os.getpid()))
                time.sleep(120)   # killed by the test with its agent before this ends
            torch.save({"model": final, "losses": losses}, out / "at-save.tmp")
            os.replace(out / "at-save.tmp", out / "at-save.pt")
            dist.barrier()        # fails once rank 1 is gone
            raise AssertionError("rank 1 should have been killed")
        losses, point, loaded, _ = steps(local, args, 1, STEPS, out / "ckpt")
        reference = steps(local, args, 1, STEPS)[0]
        at_save = torch.load(out / "at-save.pt", weights_only=False)["model"]
        same = _equal(loaded, at_save)
        (out / "result.json").write_text(json.dumps({
            "world_size": world_size, "saved_world_size": point.world_size, "resumed_from": point.step,
            "repartitioned": point.repartitioned, "same_parameters": same, "losses": losses,
            "reference": reference}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--allow-repartition", action="store_true")
    main(parser.parse_args())
