"""Partition quality: volume, max send volume, messages, imbalance and time per method.

For every graph and P: random, contiguous, METIS (edge cut) and the column-net
hypergraph (Mt-KaHyPar, km1), each alone and followed by max-send-volume
balancing (``+vb``: refinement of the max send, then max receive volume, plus
send-balanced multi-constraint restarts, epsilon 5 %, total volume +10 % at
most).  ``--loose-total 0.3`` adds rows ``metis+vb*``/``hypergraph+vb*`` with
that total-volume budget.  ``--merge``
keeps the table rows of the graphs/P not rerun.  Volumes are per SpMM, in rows,
from the plan.

    python benchmarks/partition_quality.py [--graphs Cora CiteSeer 4elt copter2 mdual rmat18]
                                           [--parts 4 16 64 256] [--loose-total 0.3] [--merge]
"""
import argparse
import re
import time

import torch
from _common import RESULTS, load_graph, print_table, write_table_section

from pyg_sparsecomm import CommStats
from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.partition import METHODS
from pyg_sparsecomm.partition.balance import balance_max_send
from pyg_sparsecomm.plan import comm_pattern


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
    p.add_argument("--restarts", type=int, default=4, help="send-balanced restarts of +vb")
    p.add_argument("--loose-total", type=float, default=None,
                   help="also run metis/hypergraph +vb* with this total-volume budget")
    p.add_argument("--loose-restarts", type=int, default=None,
                   help="send-balanced restarts of +vb* (default: --restarts)")
    p.add_argument("--merge", action="store_true", help="keep the old rows of graphs/P not rerun")
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
                budgets = [("+vb", 0.1, args.restarts)]
                if args.loose_total is not None and method in ("metis", "hypergraph"):
                    budgets.append(("+vb*", args.loose_total, args.loose_restarts or args.restarts))
                for suffix, budget, restarts in budgets:
                    t0 = time.perf_counter()
                    results[method + suffix] = (
                        balance_max_send(ei, n, part, P, epsilon=args.epsilon, max_total_increase=budget,
                                         restarts=restarts, seed=0),
                        t_base + time.perf_counter() - t0)
            stats = {m: CommStats.from_pattern(comm_pattern(ei, part, n, P)).as_dict()
                     for m, (part, _) in results.items()}
            ref = stats.get("metis")
            for m, d in stats.items():
                def rel(k, d=d, ref=ref):
                    return f"{d[k] / ref[k]:.3f}" if ref and ref[k] else "-"
                rows.append([name, P, m, d["total_rows"], int(d["max_rows_sent"]), int(d["max_rows_received"]),
                             int(d["max_messages"]), f"{d['avg_messages']:.1f}", f"{d['compute_imbalance']:.3f}",
                             rel("total_rows"), rel("max_rows_sent"), f"{results[m][1]:.2f}"])
                print(*rows[-1], sep="\t", flush=True)
    print_table(headers, rows)
    if args.merge:
        rows = merged(rows, len(headers))
    loose = (f"; '+vb*' = {args.loose_restarts or args.restarts} restarts and total volume "
             f"+{args.loose_total:.0%} at most" if args.loose_total is not None else "")
    write_table_section(
        "partition_quality", "Partition quality (issue #3)", "partition_quality.py",
        f"Per SpMM, rows; '+vb' = max-send-volume balancing (refinement: max send, then max receive, then "
        f"total volume + {args.restarts} send-balanced multi-constraint restarts, METIS objective 'auto': "
        f"volume, edge cut on graphs with hubs) with compute imbalance <= {1 + args.epsilon:.2f} and total "
        f"volume +10 % at most{loose}; seconds include the base method."
        + (" Rows of graphs/P not in this invocation are kept from an earlier run (--merge)." if args.merge else ""),
        headers, rows)


def merged(rows, width):
    """New rows plus the old table's rows of (graph, P) pairs not rerun, in graph then P order."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    section = re.search(r"<!-- BEGIN partition_quality -->(.*?)<!-- END partition_quality -->", text, re.DOTALL)
    rerun = {(r[0], int(r[1])) for r in rows}
    old = []
    for line in (section.group(1).splitlines() if section else []):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == width and cells[1].isdigit() and (cells[0], int(cells[1])) not in rerun:
            old.append([cells[0], int(cells[1])] + cells[2:])
    graphs = list(dict.fromkeys([r[0] for r in old + rows]))
    return sorted(old + rows, key=lambda r: (graphs.index(r[0]), r[1]))

if __name__ == "__main__":
    main()
