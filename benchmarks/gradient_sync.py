"""Parameter-gradient sync under distribute(): its own (in backward), sync_gradients, and DDP.

The exact loss recipe sums every rank's share of the gradient (``distributed_loss`` divides by
the *global* row count).  ``distribute(model)`` sums in buckets overlapped with backward, on a
process group of its own (the default).  With ``distribute(model, sync_gradients=False)``,
``sync_gradients`` all-reduces the sum in one flat buffer after backward, or DDP averages in
buckets overlapped with backward; with the loss scaled by the world size its average is the same
sum, and it must run in a process group of its own (its bucket all-reduces would otherwise
interleave with the halo exchanges of the default group in an order that may differ by rank).
All three are timed side by side in one job (GraphSAGE, 2 layers, hidden 64, METIS, P = 2,
1 thread per rank), with the first-epoch losses checked equal.

    python benchmarks/gradient_sync.py [--nodes 100000] [--epochs 10]

The graph is distribute_models.py's (sparse SBM, 100 blocks, degree 8, 90 % inside a block).
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from _common import median, print_table, sparse_sbm_graph, with_features, write_table_section
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

from pyg_sparsecomm import SparsityAwarePartitioner, distribute, distributed_loss, shard, sync_gradients
from pyg_sparsecomm.testing import launch


def epochs(model, step_model, local, n, world_size, mode):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times, losses = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        opt.zero_grad()
        out = step_model(local.x, local.adj)
        loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])
        (loss * world_size if mode == "ddp" else loss).backward()
        if mode == "after":
            sync_gradients(model)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return times, losses


def _worker(rank, world_size, nodes, n, warmup, rounds):
    data = with_features(sparse_sbm_graph(nodes, 100, 8.0, 0.9, seed=0), 64, 8, 0)
    local = shard(SparsityAwarePartitioner(world_size, "metis")(data))
    classes = int(data.y.max()) + 1
    ddp_group = dist.new_group(backend="gloo")
    modes = {"distribute (in backward)": "backward", "sync_gradients": "after", "DDP (own group)": "ddp"}
    samples: dict[str, list[float]] = {name: [] for name in modes}
    first = {}
    for _ in range(rounds):
        for name, mode in modes.items():
            torch.manual_seed(0)
            model = distribute(GraphSAGE(64, 64, num_layers=2, out_channels=classes),
                               sync_gradients=mode == "backward")
            step_model = DistributedDataParallel(model, process_group=ddp_group) if mode == "ddp" else model
            times, losses = epochs(model, step_model, local, warmup + n, world_size, mode)
            samples[name] += times[warmup:]
            first.setdefault(name, losses[:3])
    return samples, first


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    samples, first = launch(_worker, 2, args.nodes, args.epochs, args.warmup, args.rounds, timeout=3600)[0]
    ref = first["sync_gradients"]
    for name in ("DDP (own group)", "distribute (in backward)"):
        assert all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(first[name], ref, strict=True)), first
    headers = ["gradient sync", "median epoch ms", "vs sync_gradients"]
    base = median(samples["sync_gradients"])
    rows = [[name, f"{median(t) * 1e3:.1f}", f"{median(t) / base:.3f}x"] for name, t in samples.items()]
    print_table(headers, rows)
    if not args.no_write:
        write_table_section(
            "gradient_sync", "Gradient sync: distribute()'s own, sync_gradients, DistributedDataParallel "
            "(issues #13, #23)",
            "gradient_sync.py",
            f"GraphSAGE (2 layers, hidden 64) under `distribute()`, SBM graph with {args.nodes} nodes, METIS, "
            f"P = 2 × 1 thread; {args.rounds} interleaved rounds of {args.epochs} epochs after {args.warmup} "
            f"warm-up; losses of the first epochs equal (checked). distribute() sums in 4 MiB buckets during "
            f"backward on its own group; DDP runs in its own gloo group with the loss "
            f"scaled by the world size.", headers, rows)


if __name__ == "__main__":
    main()
