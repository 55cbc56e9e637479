"""What a checkpoint costs (issue 28): ``checkpoint.save`` and ``checkpoint.load`` against a training step.

A 2-layer ``distribute(GCN)`` with Adam at P = 2 (gloo, 1 thread per rank) on an SBM graph, exact
halos and ``halo_precision="int8", staleness=1`` (whose checkpoint also holds the stale pipelines and
rounding streams).  Every round times one training step, one ``save`` (into a temporary directory on
the local disk, ``keep=2``) and one ``load`` of it, one after the other, so they see the same machine
state; the slowest rank's medians over ``--rounds`` rounds, and the size of one checkpoint on disk.

    python benchmarks/checkpoint_cost.py [--nodes 20000] [--rounds 10]
"""
import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import median, print_table, sparse_sbm_graph, with_features, write_table_section

from pyg_sparsecomm.testing import launch

HEADERS = ["configuration (P = 2)", "step ms", "save ms", "load ms", "save / step", "checkpoint MB"]
CONFIGS = {"exact": {}, "int8 + staleness=1": {"halo_precision": "int8", "staleness": 1}}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - start)


def _worker(rank, world_size, nodes, rounds):
    import torch.distributed as dist
    from torch_geometric.nn.models import GCN

    from pyg_sparsecomm import SparsityAwarePartitioner, checkpoint, distribute, distributed_loss, shard
    data = with_features(sparse_sbm_graph(nodes, 8, 10.0, 0.8, seed=0), num_features=64)
    local = shard(SparsityAwarePartitioner(world_size, method="metis", seed=1)(data))
    out = {}
    for name, options in CONFIGS.items():
        torch.manual_seed(0)
        model = distribute(GCN(64, 64, 2, 8), **options)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        objects = {"model": model, "shard": local, "optimizer": optimizer}

        def step():
            optimizer.zero_grad()
            out = model(local.x, local.adj)
            distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask]).backward()
            optimizer.step()
        directory = tempfile.mkdtemp(prefix="ckpt") if rank == 0 else None
        holder = [directory]
        dist.broadcast_object_list(holder, src=0)
        directory = holder[0]
        step()
        times = []
        for r in range(rounds):
            times.append((_timed(step), _timed(lambda r=r: checkpoint.save(directory, r, **objects)),
                          _timed(lambda: checkpoint.load(directory, **objects))))
        newest = checkpoint.complete_checkpoints(directory)[-1]
        size = sum(f.stat().st_size for f in Path(newest).iterdir()) / 1e6
        out[name] = [median([t[k] for t in times]) for k in range(3)] + [size]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    per_rank = launch(_worker, 2, args.nodes, args.rounds, timeout=1800)
    rows = []
    for name in CONFIGS:
        step, save, load, size = (max(r[name][k] for r in per_rank) for k in range(4))
        rows.append([name, f"{step:.1f}", f"{save:.1f}", f"{load:.1f}", f"{save / step:.2f}x", f"{size:.2f}"])
    print_table(HEADERS, rows)
    notes = (f"{args.nodes} nodes (SBM, degree 10), 64 features, GCN 64-64-8 + Adam, METIS partition; slowest "
             f"rank's median of {args.rounds} rounds (step, save, load alternated within a row; the rows one after "
             f"the other: compare a row's save and load with its own step); local disk; load average "
             f"{os.getloadavg()[0]:.1f} (shared machine).")
    write_table_section("checkpoint_cost", "Checkpoint and resume: what a checkpoint costs (issue 28)",
                        "checkpoint_cost.py", notes, HEADERS, rows)


if __name__ == "__main__":
    main()
