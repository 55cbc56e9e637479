"""1D vs 1.5D, sparsity-aware vs oblivious (issue #4): predicted and measured bytes and time.

(a) Predicted, any P (no processes): the example's 2-layer GCN (SpMM widths 16
and 8, float32, forward + backward), partitions into P/c parts by random and
METIS, every admissible c in {1, 2, 4}; bytes per epoch (all ranks, and the
busiest rank) and the α-β time of the slowest rank with the default CostModel.

(b) Measured under gloo, P = 4 and 8, c = 1 and 2: the same model trained for
some epochs; median epoch time, median time in communication calls and bytes
sent per epoch (all ranks, counted by the exchanges), next to the prediction.

    python benchmarks/algorithms_15d.py [--graphs Cora CiteSeer mdual rmat] [--parts 4 16 64 256]
"""
import argparse

import torch
from _common import load_graph, median, print_table, train_epochs, with_features, write_table_section
from torch_geometric.data import Data

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, shard
from pyg_sparsecomm.algorithms.cost import CostModel
from pyg_sparsecomm.algorithms.layout import admissible_replications, predict_from_partition
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.testing import launch

WIDTHS = [16, 8]


def graph(name: str) -> Data:
    if name == "rmat":
        return rmat_graph(scale=16, edge_factor=8, seed=0, directed=False)
    return load_graph(name)


def partition(data, method, num_parts, cache):
    key = (method, num_parts)
    if key not in cache:
        skeleton = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
        cache[key] = SparsityAwarePartitioner(num_parts, method=method, seed=0)(skeleton).part
    return cache[key]


def predicted(names, parts, methods):
    rows = []
    for name in names:
        data, cache = graph(name), {}
        for method in methods:
            for P in parts:
                for c in [c for c in admissible_replications(P) if c in (1, 2, 4)]:
                    part = partition(data, method, P // c, cache)
                    sparse, oblivious = predict_from_partition(
                        data.edge_index, data.num_nodes, part, P, c, WIDTHS,
                        algorithms=["1d", "oblivious"] if c == 1 else ["1.5d", "1.5d_oblivious"])
                    rows.append([name, P, method, c, sparse.algorithm, f"{sparse.total_bytes_sent / 1e6:.3f}",
                                 f"{oblivious.total_bytes_sent / 1e6:.3f}",
                                 f"{sparse.total_bytes_sent / oblivious.total_bytes_sent:.3f}",
                                 f"{sparse.max_bytes_sent / 1e6:.3f}", f"{oblivious.max_bytes_sent / 1e6:.3f}",
                                 f"{sparse.seconds * 1e3:.2f}", f"{oblivious.seconds * 1e3:.2f}",
                                 "sparse" if sparse.seconds <= oblivious.seconds else "oblivious"])
    return rows


class Net(torch.nn.Module):
    def __init__(self, in_channels, out_channels, **kw):
        super().__init__()
        self.conv1 = DistributedGCNConv(in_channels, WIDTHS[0], cached=True, **kw)
        self.conv2 = DistributedGCNConv(WIDTHS[0], out_channels, cached=True, **kw)

    def forward(self, x, adj):
        return self.conv2(self.conv1(x, adj).relu(), adj)


def _measure(rank, world_size, data, part, c, algorithms, epochs, warmup):
    grid = process_grid(c) if c > 1 else None
    data.part, data.num_parts = part, world_size // c
    local = shard(data, grid=grid)
    out = {}
    model = CostModel.calibrate()
    out["cost_model"] = (model.alpha, model.beta)
    for algorithm in algorithms:
        torch.manual_seed(0)
        model = Net(local.x.size(1), WIDTHS[1], algorithm=algorithm, replication=c)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        times, comm, sent = train_epochs(model, opt, local.x, local.adj, local.y, local.train_mask, warmup + epochs)
        times, comm, sent = times[warmup:], comm[warmup:], sent[warmup:]
        out[algorithm] = (times, comm, sent)
    return out


def measured(names, sizes, methods, epochs, warmup):
    rows = []
    for name in names:
        data, cache = with_features(graph(name), num_classes=WIDTHS[1]), {}
        data.y = data.y % WIDTHS[1]
        for method in methods:
            for P in sizes:
                for c in (1, 2):
                    part = partition(data, method, P // c, cache)
                    algorithms = ["1d", "oblivious"] if c == 1 else ["1.5d", "1.5d_oblivious"]
                    per_rank = launch(_measure, P, data, part, c, algorithms, epochs, warmup, timeout=3600)
                    predictions = predict_from_partition(data.edge_index, data.num_nodes, part, P, c, WIDTHS,
                                                         algorithms=algorithms)
                    calibrated = CostModel(*per_rank[0]["cost_model"])
                    recalibrated = predict_from_partition(data.edge_index, data.num_nodes, part, P, c, WIDTHS,
                                                          model=calibrated, algorithms=algorithms)
                    rows_of = zip(algorithms, predictions, recalibrated, strict=False)
                    for algorithm, prediction, calibrated_prediction in rows_of:
                        # bulk synchronous: an epoch lasts as long as its slowest rank
                        epoch = max(median(r[algorithm][0]) for r in per_rank)
                        comm = max(median(r[algorithm][1]) for r in per_rank)
                        sent = sum(r[algorithm][2][-1] for r in per_rank)
                        rows.append([name, P, method, c, algorithm, f"{epoch * 1e3:.1f}", f"{comm * 1e3:.1f}",
                                     f"{sent / 1e6:.3f}", f"{prediction.total_bytes_sent / 1e6:.3f}",
                                     f"{prediction.seconds * 1e3:.2f}", f"{calibrated_prediction.seconds * 1e3:.2f}",
                                     f"{calibrated.alpha * 1e6:.0f} / {1 / calibrated.beta / 1e9:.2f}"])
                        print_table(HEAD_B, rows[-1:])
    return rows


HEAD_A = ["graph", "P", "method", "c", "sparse alg.", "sparse MB", "oblivious MB", "sparse/obl.",
          "sparse max MB/rank", "obl. max MB/rank", "sparse pred. ms", "obl. pred. ms", "model picks"]
HEAD_B = ["graph", "P", "method", "c", "algorithm", "median epoch ms", "median comm ms", "MB sent/epoch",
          "predicted MB", "pred. comm ms (default α, β)", "pred. comm ms (calibrated)", "calibrated α µs / GB/s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", nargs="+", default=["Cora", "CiteSeer", "mdual", "rmat"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 16, 64, 256])
    p.add_argument("--methods", nargs="+", default=["random", "metis"])
    p.add_argument("--measure-graphs", nargs="+", default=["Cora", "mdual"])
    p.add_argument("--measure-sizes", nargs="+", type=int, default=[4, 8])
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--skip-measured", action="store_true")
    p.add_argument("--skip-predicted", action="store_true")
    args = p.parse_args()

    rows_a = [] if args.skip_predicted else predicted(args.graphs, args.parts, args.methods)
    if rows_a:
        print_table(HEAD_A, rows_a)
        write_table_section(
            "algorithms_15d_predicted", "(d) 1D vs 1.5D, sparse vs oblivious: predicted bytes and time per epoch",
            "algorithms_15d.py", f"2-layer GCN, SpMM widths {WIDTHS}, float32, forward + backward; partitions into "
            f"P/c parts; 'MB' = all ranks per epoch (halo exchanges, broadcasts/reduces, ring all-reduces); times from "
            f"the α-β model ({CostModel()}), slowest rank. R-MAT: scale 16, edge factor 8, symmetrised.",
            HEAD_A, rows_a)
    if args.skip_measured:
        return
    rows_b = measured(args.measure_graphs, args.measure_sizes, args.methods, args.epochs, args.warmup)
    write_table_section(
        "algorithms_15d_measured", "(e) 1D vs 1.5D measured under gloo", "algorithms_15d.py",
        f"The same model trained for {args.epochs} epochs after {args.warmup} warm-up epochs, 1 thread per process "
        f"(P = 4 and 8 oversubscribe the 2 cores). Epoch and comm times: medians, slowest rank. MB sent: all ranks, "
        f"counted by the exchanges (steady-state epoch), next to the model's prediction, with the default α, β and "
        f"with α, β calibrated in the same job (CostModel.calibrate()).", HEAD_B, rows_b)


if __name__ == "__main__":
    main()
