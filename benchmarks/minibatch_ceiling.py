"""What two cores can give mini-batch training (issue 56): the ceiling of P = 2 on this machine.

P = 2 ranks on 2 cores can be at most as fast as two *independent* one-rank jobs running at once
(no halo, no collective, each its own graph and loader): their summed seeds / s, over the seeds / s
of one such job alone, is what the machine gives two processes of this workload (memory bandwidth,
shared caches, the host's scheduling of its two virtual CPUs), whatever the package does.  This
script measures, interleaved over ``--rounds`` rounds so that a change of the machine's load shows
in every column alike:

* *alone*: one rank (P = 1) training GraphSAGE [15, 10] on ``DistributedNeighborLoader`` batches of
  1024 seeds, one thread, the loader in the training thread (``prefetch=0``) and sampling one batch
  ahead (``prefetch=1``, the default);
* *two at once*: two such jobs started together (separate processes, separate worlds);
* *P = 2*: the same training at two gloo ranks (512 seeds each).

    python benchmarks/minibatch_ceiling.py [--rounds 3] [--graphs uniform sbm] [--no-write]

The graphs and the step are ``minibatch_speed.py``'s (20,000 nodes, in-degree 10; *sbm* with a METIS
partition).  Seeds / s are medians over ``--batches`` batches after one warm-up (slowest rank).
"""
import argparse
import json
import subprocess
import sys
import time

from _common import HERE, machine, markdown_table, median, print_table, write_section
from minibatch_speed import _step, _waits, graph_of

from pyg_sparsecomm.testing import launch

HEADERS = ["graph", "round", "load (1 min)", "alone", "two at once (each)", "two at once / alone",
           "P = 2", "P = 2 / alone", "P = 2 / two at once", "alone, prefetch=1", "P = 2, prefetch=1"]


def _train(rank, world_size, kind, num_nodes, degree, fanouts, batch_size, batches):
    """``(seeds / s with prefetch=0, with prefetch=1)`` of this rank's batches (after one warm-up)."""
    import torch
    from torch_geometric.nn.models import GraphSAGE

    from pyg_sparsecomm import distribute, shard
    from pyg_sparsecomm.loader import DistributedNeighborLoader
    torch.set_num_threads(1)
    data = graph_of(kind, num_nodes, degree, world_size)
    local = shard(data) if world_size > 1 else shard(data, rank=0, world_size=1)
    del data
    torch.manual_seed(0)
    model = distribute(GraphSAGE(64, 64, len(fanouts), 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    out = []
    for prefetch in (0, 1):
        loader = DistributedNeighborLoader(local, fanouts, batch_size=batch_size, shuffle=True, seed=0,
                                           prefetch=prefetch)
        if prefetch:
            steps = [step for _, step in _waits(loader, model, optimizer, batches)]
        else:
            steps, it = [], iter(loader)
            for i in range(batches + 1):
                start = time.perf_counter()
                _step(model, optimizer, next(it))
                if i:
                    steps.append(time.perf_counter() - start)
        out.append(steps)
    return out


def seeds_per_s(kind: str, P: int, args) -> tuple[float, float]:
    """Seeds / s (prefetch 0 and 1) of one job of ``P`` ranks: the global batch over the slowest
    rank's median step."""
    per_rank = launch(_train, P, kind, args.nodes, args.degree, args.fanouts, args.batch_size, args.batches,
                      timeout=3600)
    return tuple(args.batch_size / median([max(r[p][b] for r in per_rank) for b in range(len(per_rank[0][p]))])
                 for p in (0, 1))


def two_at_once(kind: str, args) -> list[tuple[float, float]]:
    """Seeds / s of two one-rank jobs started together, each in its own interpreter."""
    command = [sys.executable, str(HERE / "minibatch_ceiling.py"), "--one", kind, "--nodes", str(args.nodes),
               "--degree", str(args.degree), "--batches", str(args.batches), "--batch-size", str(args.batch_size),
               "--fanouts", *map(str, args.fanouts)]
    jobs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    return [tuple(json.loads(job.communicate()[0].strip().splitlines()[-1])) for job in jobs]


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--graphs", nargs="+", default=["uniform", "sbm"], choices=["uniform", "sbm"])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--degree", type=int, default=10)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--one", choices=["uniform", "sbm"], help=argparse.SUPPRESS)  # one job of two_at_once
    args = parser.parse_args()
    if args.one:
        print(json.dumps(seeds_per_s(args.one, 1, args)))
        return
    rows = []
    for kind in args.graphs:
        for r in range(args.rounds):
            before = load()
            alone, pair, p2 = seeds_per_s(kind, 1, args), two_at_once(kind, args), seeds_per_s(kind, 2, args)
            both = pair[0][0] + pair[1][0]
            rows.append([kind, r + 1, before, f"{alone[0]:,.0f}", f"{pair[0][0]:,.0f} + {pair[1][0]:,.0f}",
                         f"{both / alone[0]:.2f}x", f"{p2[0]:,.0f}", f"{p2[0] / alone[0]:.2f}x",
                         f"{p2[0] / both:.2f}x", f"{alone[1]:,.0f}", f"{p2[1]:,.0f}"])
            print_table(HEADERS, rows[-1:])
    if not args.no_write:
        text = (f"`python benchmarks/minibatch_ceiling.py --rounds {args.rounds}` -- {machine()}.\n"
                f"{args.nodes:,} nodes, in-degree {args.degree}, GraphSAGE {args.fanouts}, batch {args.batch_size}, "
                f"one thread per process, seeds / s of the median step (slowest rank) over {args.batches} "
                f"batches; *alone*, *two at once* and *P = 2* with `prefetch=0` unless named. *two at once / "
                f"alone* is the most P = 2 can reach here; *P = 2 / two at once* what of it the package "
                f"realises.\n\n")
        write_section("minibatch_ceiling", "## Mini-batch on two cores: the ceiling of P = 2 (issue 56)\n\n" + text
                      + markdown_table(HEADERS, rows))


if __name__ == "__main__":
    main()
