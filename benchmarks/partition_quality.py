"""Partition quality: volume, max send volume, messages, imbalance and time per method.

For every graph and P: random, contiguous, METIS (edge cut) and the column-net
hypergraph (Mt-KaHyPar, km1), each alone and followed by max-send-volume
balancing (``+vb``, epsilon 5 %).  Volumes are per SpMM, in rows, from the plan.

    python benchmarks/partition_quality.py [--graphs Cora CiteSeer 4elt copter2 mdual rmat18]
                                           [--parts 4 16 64 256]
"""
import argparse
import time

import torch

from _common import load_graph, print_table, write_table_section
from pyg_sparsecomm import CommStats, comm_pattern
from pyg_sparsecomm.datasets import rmat_graph
from pyg_sparsecomm.partition import METHODS
from pyg_sparsecomm.partition.balance import refine_max_send


def graph(name):
    if name.startswith("rmat"):  # the ICS'24 Figure 1 parameters: a = 0.6, b = c = d = 0.4/3
        return rmat_graph(int(name[4:]), 8, 0.6, 0.4 / 3, 0.4 / 3)
    return load_graph(name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graphs", nargs="+", default=["Cora", "CiteSeer", "4elt", "copter2", "mdual", "rmat18"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 16, 64, 256])
    p.add_argument("--methods", nargs="+", default=["random", "contiguous", "metis", "hypergraph"])
    p.add_argument("--epsilon", type=float, default=0.05, help="compute imbalance allowed to +vb")
    args = p.parse_args()
    torch.set_num_threads(2)
    headers = ["graph", "P", "method", "total rows", "max send", "max recv", "max msgs", "avg msgs",
               "imbalance", "total/METIS", "max send/METIS", "seconds"]
    rows = []
    print(*headers, sep="\t")
    for name in args.graphs:
        data = graph(name)
        ei, n = data.edge_index, data.num_nodes
        for P in args.parts:
            results = {}
            for method in args.methods:
                t0 = time.perf_counter()
                part = METHODS[method](ei, n, P, 0)
                t_base = time.perf_counter() - t0
                results[method] = (part, t_base)
                t0 = time.perf_counter()
                results[method + "+vb"] = (refine_max_send(ei, n, part, P, epsilon=args.epsilon),
                                           t_base + time.perf_counter() - t0)
            stats = {m: CommStats.from_pattern(comm_pattern(ei, part, n, P)).as_dict()
                     for m, (part, _) in results.items()}
            ref = stats.get("metis")
            for m, d in stats.items():
                rel = (lambda k: f"{d[k] / ref[k]:.3f}" if ref and ref[k] else "-")  # noqa: E731
                rows.append([name, P, m, d["total_rows"], int(d["max_rows_sent"]), int(d["max_rows_received"]),
                             int(d["max_messages"]), f"{d['avg_messages']:.1f}", f"{d['compute_imbalance']:.3f}",
                             rel("total_rows"), rel("max_rows_sent"), f"{results[m][1]:.2f}"])
                print(*rows[-1], sep="\t", flush=True)
    print_table(headers, rows)
    write_table_section(
        "partition_quality", "Partition quality (issue #3)", "partition_quality.py",
        f"Per SpMM, rows; '+vb' = max-send-volume balancing with compute imbalance <= "
        f"{1 + args.epsilon:.2f}; seconds include the base method.", headers, rows)

if __name__ == "__main__":
    main()
