"""What the collective checks of issue #23 cost (``nn/first_use.py``, ``comm.halo.encode_together``,
``comm.stale``).

* the consistency check a layer runs at its first call on a shard (fingerprint + one all-gather),
  timed alone;
* a forward + backward of a 2-layer ``distribute(GCN)`` whose later calls agree on two flags (a new
  shard somewhere, a failed local check somewhere: one host all-reduce per layer call) against
  the same step with this rank's checks only (how later calls ran before);
* a training step with ``halo_precision="int8"`` with the agreed encoding (one one-element
  all-reduce per compressed exchange) against the same step with the rank-local encoding, with
  ``staleness=0`` and with ``staleness=1`` (the pipelined exchange).

Steps with and without agreement are timed alternately, step by step, so they see the same machine
state; medians of ``--steps`` steps at P = 2 (gloo, 1 thread per rank) on an SBM graph.

    python benchmarks/agreement_cost.py [--nodes 20000] [--steps 30]
"""
import argparse
import contextlib
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


def _alternated(model, local, steps, agreed, local_only) -> tuple[float, float]:
    """Median step ms with the agreement and with ``local_only()`` (a new context each step), alternated."""
    with_agreement, without = [], []
    for _ in range(steps):
        with agreed():
            with_agreement.append(_step(model, local))
        with local_only():
            without.append(_step(model, local))
    return median(with_agreement), median(without)


@contextlib.contextmanager
def _patched(module, name, value):
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def _worker(rank, world_size, nodes, steps):
    from torch_geometric.nn.models import GCN

    from pyg_sparsecomm import SparsityAwarePartitioner, distribute, shard
    from pyg_sparsecomm.comm import halo, stale
    from pyg_sparsecomm.nn.runtime import checks as call_checks
    from pyg_sparsecomm.nn.runtime import first_use
    data = with_features(sparse_sbm_graph(nodes, 8, 10.0, 0.8, seed=0), num_features=64)
    local = shard(SparsityAwarePartitioner(world_size, method="random", seed=1)(data))
    checks = []
    for _ in range(steps):
        start = time.perf_counter()
        first_use.check_first_use("GCNConv", local.adj, local.x, lambda: None, None)
        checks.append(1e3 * (time.perf_counter() - start))

    def rank_local_calls():  # this rank's checks only, as later calls ran before
        original = call_checks.check_call  # since issue 57 steady-state calls reach it only when a key changed
        return _patched(call_checks, "check_call", lambda *args: original(*args[:7], collective=False))

    def rank_local_encode():
        return _patched(halo, "encode_together",
                        lambda rows, precision, group, index=None: halo.encode_rows(rows, precision, index))

    def rank_local_stale():
        return _patched(stale._Pipe, "_encode", lambda self, rows: self.codec.encode(rows))

    out = {}
    for name, kwargs, local_only in (("exact", {}, rank_local_calls),
                                     ("int8", {"halo_precision": "int8"}, rank_local_encode),
                                     ("int8 stale", {"halo_precision": "int8", "staleness": 1}, rank_local_stale)):
        torch.manual_seed(0)
        model = distribute(GCN(64, 64, 2, 8), **kwargs)
        _step(model, local)
        out[name] = _alternated(model, local, steps, contextlib.nullcontext, local_only)
    return median(checks), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    per_rank = launch(_worker, 2, args.nodes, args.steps, timeout=1800)
    first = max(r[0] for r in per_rank)
    cost = {name: tuple(max(r[1][name][k] for r in per_rank) for k in range(2)) for name in per_rank[0][1]}
    rows = [["consistency check, once per layer and shard", f"{first:.2f}", "fingerprint + 1 all-gather"]]
    for name, agreed_note, local_note in (
            ("exact", "later calls agreed: 1 host all-reduce of 2 flags per layer call (2 per step)",
             "this rank's checks only (before)"),
            ("int8", "+ encoding agreed: 1 all-reduce per compressed exchange (4 per step)",
             "rank-local encoding (before)"),
            ("int8 stale", "staleness=1, encoding agreed on the exchange's group (4 per step)",
             "rank-local encoding (before)")):
        agreed, local_only = cost[name]
        rows.append([f"{name} step (forward + backward), agreed", f"{agreed:.1f}", agreed_note])
        rows.append([f"{name} step, not agreed", f"{local_only:.1f}",
                     f"{local_note}; agreed costs {agreed - local_only:+.1f} ms ({agreed / local_only - 1:+.1%})"])
    print_table(HEADERS, rows)
    notes = (f"{args.nodes} nodes (SBM, degree 10), 64 features, GCN 64-64-8, random partition; slowest rank's "
             f"median of {args.steps} steps; load average {os.getloadavg()[0]:.1f} (shared machine).")
    write_table_section("agreement_cost", "Cost of the agreed checks (issue #23)", "agreement_cost.py", notes,
                        HEADERS, rows)


if __name__ == "__main__":
    main()
