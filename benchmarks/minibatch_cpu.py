"""The CPU a mini-batch costs each rank (issue 56): what P ranks could reach if they never waited.

Per batch and rank, the thread CPU time (``time.thread_time``: what the rank computed, not what it
waited) of loading the batch (sampling, the hops' and the plan's exchanges, planning, the feature
gather) and of the training step (forward, loss, backward, optimizer), with waits blocking
(``PYG_SPARSECOMM_WAIT=block``: a polling wait's CPU is not work).  A P-rank job on P cores can be
at most *P = 1's CPU / this rank's CPU* times as fast as one rank, whatever its communication does:
the last column, the bound the floor of issue 56 (P = 2 >= 1.6x P = 1) is held against.  Also the
rank's rows and sampled edges (half of P = 1's at P = 2: the work is split, not repeated).

    python benchmarks/minibatch_cpu.py [--parts 1 2 4] [--graphs sbm uniform] [--batches 16] [--no-write]

The graphs, model and batches are ``minibatch_speed.py``'s (20,000 nodes, in-degree 10, GraphSAGE
[15, 10], global batch 1024, one thread per rank, ``prefetch=0``); medians over batches after one
warm-up, the slowest rank's.
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F
from _common import machine, markdown_table, median, print_table, write_section
from minibatch_speed import CLASSES, FEATURES, HIDDEN, graph_of

from pyg_sparsecomm.testing import launch

HEADERS = ["graph", "P", "rows / rank", "sampled edges / rank", "loading CPU ms", "step CPU ms", "CPU ms / batch",
           "P = 1 CPU / this", "wall ms / batch"]


def _cpu_per_batch(rank, world_size, kind, batches):
    """``[(loading cpu s, step cpu s, wall s, rows, sampled edges)]`` per batch after the first."""
    from torch_geometric.nn.models import GraphSAGE

    from pyg_sparsecomm import distribute, distributed_loss, shard
    from pyg_sparsecomm.loader import DistributedNeighborLoader
    data = graph_of(kind, 20_000, 10, world_size)
    local = shard(data) if world_size > 1 else shard(data, rank=0, world_size=1)
    loader = DistributedNeighborLoader(local, [15, 10], batch_size=1024, shuffle=True, seed=0, prefetch=0)
    torch.manual_seed(0)
    model = distribute(GraphSAGE(FEATURES, HIDDEN, 2, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    batch_iter, out = iter(loader), []
    for i in range(batches + 1):
        wall, cpu = time.perf_counter(), time.thread_time()
        batch = next(batch_iter)
        loaded = time.thread_time()
        optimizer.zero_grad()
        logits = model(batch.x, batch.adj, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                       num_sampled_edges_per_hop=batch.num_sampled_edges)
        s = int(batch.batch_size)
        distributed_loss(F.cross_entropy, logits[:s], batch.y[:s]).backward()
        optimizer.step()
        if i:
            out.append((loaded - cpu, time.thread_time() - loaded, time.perf_counter() - wall, batch.x.size(0),
                        sum(batch.num_sampled_edges)))
    return out


def measure(kind: str, P: int, batches: int) -> dict:
    per_rank = launch(_cpu_per_batch, P, kind, batches, timeout=1800)
    rows = max(per_rank, key=lambda batches_: sum(r[0] + r[1] for r in batches_))  # the rank computing most
    return {"load": median([r[0] for r in rows]), "step": median([r[1] for r in rows]),
            "cpu": median([r[0] + r[1] for r in rows]), "wall": median([max(rk[b][2] for rk in per_rank)
                                                                          for b in range(len(rows))]),
            "rows": median([r[3] for r in rows]), "edges": median([r[4] for r in rows])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--graphs", nargs="+", default=["sbm", "uniform"], choices=["uniform", "sbm"])
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ["PYG_SPARSECOMM_WAIT"] = "block"  # (the ranks inherit it: a polling wait's CPU is not work)
    table = []
    for kind in args.graphs:
        base = None
        for P in args.parts:
            r = measure(kind, P, args.batches)
            base = base or r["cpu"]
            table.append([kind, P, f"{r['rows']:,.0f}", f"{r['edges']:,.0f}", f"{1e3 * r['load']:.1f}",
                          f"{1e3 * r['step']:.1f}", f"{1e3 * r['cpu']:.1f}", f"{base / r['cpu']:.2f}x",
                          f"{1e3 * r['wall']:.1f}"])
            print_table(HEADERS, table[-1:])
    if not args.no_write:
        write_section("minibatch_cpu", "## Mini-batch: the CPU each rank computes (issue 56)\n\n"
                      f"`python benchmarks/minibatch_cpu.py` -- {machine()}. Thread CPU time per batch of the rank "
                      "computing most (waits blocking, so no polling is counted), medians over "
                      f"{args.batches} batches; *P = 1 CPU / this*: the most P ranks on P cores could reach "
                      "against one rank if they never waited; *wall*: the batch as timed, waits blocking "
                      "(P = 4 shares 2 cores).\n\n" + markdown_table(HEADERS, table))


if __name__ == "__main__":
    main()
