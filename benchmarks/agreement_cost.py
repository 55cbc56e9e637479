"""What the collective checks of issue #23 cost (``nn/first_use.py``, ``comm.halo.encode_together``).

* the consistency check a layer runs at its first call on a shard (fingerprint + one all-gather),
  timed alone, against a later forward + backward of a 2-layer ``distribute(GCN)`` (which runs none);
* a training step with ``halo_precision="int8"`` with the agreed encoding (one one-element
  all-reduce per compressed exchange) against the same step with the rank-local encoding.

Steps with and without agreement are timed alternately, step by step, so they see the same machine
state; medians of ``--steps`` steps at P = 2 (gloo, 1 thread per rank) on an SBM graph.

    python benchmarks/agreement_cost.py [--nodes 20000] [--steps 30]
"""
import argparse
import os
import time

import torch
from _common import median, print_table, sparse_sbm_graph, with_features, write_table_section

from pyg_sparsecomm.testing import launch

HEADERS = ["measured (P = 2)", "median ms", "note"]


def _step(model, local) -> float:
    start = time.perf_counter()
    model(local.x, local.adj).sum().backward()
    return 1e3 * (time.perf_counter() - start)


def _worker(rank, world_size, nodes, steps):
    from torch_geometric.nn.models import GCN

    from pyg_sparsecomm import SparsityAwarePartitioner, distribute, shard
    from pyg_sparsecomm.comm import halo
    from pyg_sparsecomm.nn.first_use import check_first_use
    data = with_features(sparse_sbm_graph(nodes, 8, 10.0, 0.8, seed=0), num_features=64)
    local = shard(SparsityAwarePartitioner(world_size, method="random", seed=1)(data))
    torch.manual_seed(0)
    exact = distribute(GCN(64, 64, 2, 8))
    _step(exact, local)
    later = [_step(exact, local) for _ in range(steps)]
    checks = []
    for _ in range(steps):
        start = time.perf_counter()
        check_first_use("GCNConv", local.adj, local.x, lambda: None, None)
        checks.append(1e3 * (time.perf_counter() - start))
    torch.manual_seed(0)
    int8 = distribute(GCN(64, 64, 2, 8), halo_precision="int8")
    _step(int8, local)
    agreed, local_only = [], []
    encode = halo.encode_together
    for _ in range(steps):
        agreed.append(_step(int8, local))
        # the rank-local encoding of before
        halo.encode_together = lambda rows, precision, group, index=None: halo.encode_rows(rows, precision, index)
        try:
            local_only.append(_step(int8, local))
        finally:
            halo.encode_together = encode
    return median(checks), median(later), median(agreed), median(local_only)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    per_rank = launch(_worker, 2, args.nodes, args.steps, timeout=1200)
    first, later, agreed, local_only = (max(r[k] for r in per_rank) for k in range(4))
    rows = [["consistency check, once per layer and shard", f"{first:.2f}", "fingerprint + 1 all-gather"],
            ["forward + backward after the first call", f"{later:.1f}", "exact halos, no check"],
            ["int8 step, encoding agreed (1 all-reduce per exchange)", f"{agreed:.1f}", "4 compressed exchanges"],
            ["int8 step, rank-local encoding (before)", f"{local_only:.1f}", "same model, alternated"]]
    print_table(HEADERS, rows)
    notes = (f"{args.nodes} nodes (SBM, degree 10), 64 features, GCN 64-64-8, random partition; slowest rank's "
             f"median of {args.steps} steps; load average {os.getloadavg()[0]:.1f} (shared machine).")
    write_table_section("agreement_cost", "Cost of the agreed checks (issue #23)", "agreement_cost.py", notes,
                        HEADERS, rows)


if __name__ == "__main__":
    main()
