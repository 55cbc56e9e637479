"""(a) Per-epoch bytes moved, sparsity-aware 1D vs oblivious (CAGNET 1D), from the plan.

No processes: the plan of every rank is computed in one process for
P = 4, 16, 64, 256.  Model: the example's 2-layer GCN (hidden 16), whose
layers exchange 16 and C columns (the linear map runs before the SpMM),
forward and backward, float32.

    python benchmarks/volume.py [--graphs Cora CiteSeer mdual copter2 4elt] [--parts 4 16 64 256]
"""
import argparse
import time

from _common import load_graph, print_table, write_table_section

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.algorithms import bytes_per_epoch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graphs", nargs="+", default=["Cora", "CiteSeer", "mdual", "copter2", "4elt"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 16, 64, 256])
    p.add_argument("--methods", nargs="+", default=["random", "contiguous", "metis"])
    p.add_argument("--hidden", type=int, default=16)
    args = p.parse_args()

    headers = ["graph", "P", "method", "SA MB/epoch", "oblivious MB/epoch", "SA/oblivious",
               "max send rows", "avg send rows", "max msgs", "compute imb.", "partition s"]
    rows = []
    print(*headers, sep="\t")
    for name in args.graphs:
        data = load_graph(name)
        classes = int(data.y.max()) + 1 if data.y is not None else 8
        widths = [args.hidden, classes]
        for P in args.parts:
            for method in args.methods:
                t0 = time.perf_counter()
                stats = SparsityAwarePartitioner(P, method=method)(data).comm_stats
                seconds = time.perf_counter() - t0
                d = stats.as_dict()
                sa = bytes_per_epoch(stats, widths) / 1e6
                ob = bytes_per_epoch(stats, widths, algorithm="oblivious") / 1e6
                rows.append([name, P, method, f"{sa:.3f}", f"{ob:.3f}", f"{sa / ob:.3f}",
                             int(d["max_rows_sent"]), f"{d['avg_rows_sent']:.0f}", int(d["max_messages"]),
                             f"{d['compute_imbalance']:.3f}", f"{seconds:.2f}"])
                print(*rows[-1], sep="\t", flush=True)
    print_table(headers, rows)
    write_table_section(
        "volume", "(a) Bytes per epoch from the plan: sparsity-aware 1D vs oblivious", "volume.py",
        f"2-layer GCN, hidden {args.hidden}, float32, forward + backward exchanges; "
        f"'compute imb.' = max/avg nonzeros per rank.", headers, rows)

if __name__ == "__main__":
    main()
