"""Layer-wise inference (PyG's reddit.py pattern) against the full-graph forward, per rank.

    python benchmarks/layerwise_inference.py                  # R-MAT scale 16 (65,536 nodes), P = 1, 2
    python benchmarks/layerwise_inference.py --write          # and the RESULTS.md section

A 2-layer ``SAGEConv`` model (64 -> 128 -> 8, ``distribute()``d) scores every node of an R-MAT graph
(``pyg_sparsecomm.graph.datasets.rmat_graph``, undirected, edge factor 8; random features) two ways
on each rank's shard (contiguous blocks of ids):

* **full graph**: ``model(local.x, local.adj)``, one SpMM per layer over the shard, one halo
  exchange per layer;
* **layer-wise**: ``model.inference(local.x, loader)`` with ``DistributedNeighborLoader(local,
  num_neighbors=[-1], shuffle=False, batch_size=B)``: every layer over in-order batches of all
  in-edges, the batches' seed rows concatenated (each batch sampled and planned anew per layer).

Each (method, P, B) runs in fresh processes (``launch``): the peak is the rank's resident memory
above what it held before the call, sampled every millisecond by a thread (freed memory is not
handed back to the OS, so two methods measured in one process would share one peak).  The time
is the median of three calls after one warm-up (the peak is that of the warm-up).  ``max |diff|``
compares the layer-wise output with the full-graph one.
"""
import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, markdown_table, print_table, write_section  # noqa: E402

NOTE = ("Layer-wise inference computes the rows of the full-graph forward (max |diff| at float32 rounding), and "
        "here it is both slower and larger: every batch is sampled and planned once per layer, and with "
        "num_neighbors=[-1] a batch's sampling state (a hop per shard row, the in-edge positions, the batch's "
        "plan and relabelled CSR) is of the order of the shard's adjacency, while the full graph's activations "
        "(128 floats per row) are not large enough to dominate. It is there so that PyG's scripts port "
        "unchanged; for inference on a shard, `model(data.x, data.edge_index)` is faster and smaller.")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRSS:
    """The largest resident set above the one at entry, sampled every millisecond."""

    def __enter__(self) -> "PeakRSS":
        self.base, self.peak, self._stop = _rss(), 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss() - self.base)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss() - self.base)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int) -> None:
        from torch_geometric.nn import SAGEConv
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(in_channels, hidden), SAGEConv(hidden, out_channels)])

    def forward(self, x, edge_index):
        return self.convs[1](self.convs[0](x, edge_index).relu(), edge_index)

    @torch.no_grad()
    def inference(self, x_all, loader):
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in loader:
                x = conv(x_all[batch.n_id], batch.edge_index)
                xs.append((x.relu() if i == 0 else x)[:batch.batch_size])
            x_all = torch.cat(xs)
        return x_all


def _measure(rank, world_size, scale, method, batch_size):
    from pyg_sparsecomm import distribute, shard
    from pyg_sparsecomm.graph.datasets import rmat_graph
    from pyg_sparsecomm.loader import DistributedNeighborLoader
    data = rmat_graph(scale=scale, edge_factor=8, seed=0, directed=False)
    num_nodes = data.num_nodes
    data.x = torch.randn(num_nodes, 64, generator=torch.Generator().manual_seed(0))
    data.part, data.num_parts = torch.arange(num_nodes) * world_size // num_nodes, world_size
    local = shard(data)
    torch.manual_seed(0)
    model = distribute(SAGE(64, 128, 8)).eval()
    if method == "full graph":
        run = lambda: model(local.x, local.adj)  # noqa: E731
    else:
        loader = DistributedNeighborLoader(local, [-1], batch_size=batch_size, shuffle=False)
        run = lambda: model.inference(local.x, loader)  # noqa: E731
    with torch.no_grad(), PeakRSS() as peak:
        out = run()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        with torch.no_grad():
            run()
        times.append(time.perf_counter() - start)
    with torch.no_grad():
        gap = (out - model(local.x, local.adj)).abs().max().item()
    return statistics.median(times), peak.peak / 2 ** 20, gap, int(local.adj.nnz)


def main() -> None:
    from pyg_sparsecomm.testing import launch
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=16)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    headers = ["P", "method", "batch size", "time / call (s, slowest rank)", "peak above entry (MiB, largest rank)",
               "max |diff| vs full graph", "in-edges per rank"]
    rows = []
    for P in args.world_sizes:
        for method, batch_size in [("full graph", None)] + [("layer-wise", b) for b in args.batch_sizes]:
            results = launch(_measure, P, args.scale, method, batch_size, timeout=1200)
            rows.append([P, method, batch_size or "-", f"{max(r[0] for r in results):.3f}",
                         f"{max(r[1] for r in results):.1f}", f"{max(r[2] for r in results):.1e}",
                         "/".join(str(r[3]) for r in results)])
            print_table(headers, rows[-1:])
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print_table(headers, rows)
    if args.write:
        body = (f"## Layer-wise inference against the full-graph forward (issue 54)\n\n"
                f"`python benchmarks/layerwise_inference.py --scale {args.scale}`: R-MAT graph, {1 << args.scale:,} "
                f"nodes, edge factor 8, undirected, a 2-layer SAGE (64 -> 128 -> 8). {machine()}; load average {load} "
                f"when it ran "
                f"(the machine was shared with other jobs: times are indicative only).\n\n"
                + markdown_table(headers, rows) +
                "\n\n" + NOTE)
        write_section("layerwise-inference", body)


if __name__ == "__main__":
    main()
