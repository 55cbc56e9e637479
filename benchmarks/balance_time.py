"""Time of max-send balancing on graphs of about 1M and 2M edges at P = 64 (issue #3).

For every graph and starting partition: the refinement alone
(``refine_max_send``) without and with its receive phase (side by side, the
receive phase's cost and gain), and the whole ``+vb`` balancing with its default
send-balanced restarts (``balance_max_send``, 4 restarts, run only when the
refined maximum is more than 1.15x the average send volume), each the median of
``--reps`` runs, with the max send / max receive volume before and after.  The
base method's own time is not included (``partition_quality.py`` reports it).

    python benchmarks/balance_time.py [--graphs mdual copter2 rmat18] [--parts 64] [--reps 3]
"""
import argparse
import time

import torch
from _common import median, print_table, write_table_section
from partition_quality import graph

from pyg_sparsecomm import CommStats
from pyg_sparsecomm.partition import METHODS
from pyg_sparsecomm.partition.balance import balance_max_send, refine_max_send
from pyg_sparsecomm.plan import comm_pattern


def timed(fn, reps):
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graphs", nargs="+", default=["mdual", "copter2", "rmat18"])
    p.add_argument("--parts", nargs="+", type=int, default=[64])
    p.add_argument("--starts", nargs="+", default=["random", "contiguous", "metis"])
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(2)
    headers = ["graph", "edges", "P", "start", "send / recv", "refined, send only", "refined", "balanced",
               "send only s", "refine s", "balance s"]
    rows = []
    print(*headers, sep="\t")
    for name in args.graphs:
        data = graph(name)
        ei, n = data.edge_index, data.num_nodes
        for P in args.parts:
            for start in args.starts:
                part = METHODS[start](ei, n, P, 0)

                def maxima(q):
                    stats = CommStats.from_pattern(comm_pattern(ei, q, n, P))
                    return f"{int(stats.rows_sent.max())} / {int(stats.rows_received.max())}"
                send_only, t_send_only = timed(lambda: refine_max_send(ei, n, part, P, epsilon=0.05, receive=False),
                                               args.reps)
                refined, t_refine = timed(lambda: refine_max_send(ei, n, part, P, epsilon=0.05), args.reps)
                balanced, t_balance = timed(lambda: balance_max_send(ei, n, part, P, epsilon=0.05), args.reps)
                rows.append([name, ei.size(1), P, start, maxima(part), maxima(send_only), maxima(refined),
                             maxima(balanced), f"{t_send_only:.1f}", f"{t_refine:.1f}", f"{t_balance:.1f}"])
                print(*rows[-1], sep="\t", flush=True)
    print_table(headers, rows)
    write_table_section(
        "balance_time", "Max-send balancing time (issue #3)", "balance_time.py",
        f"Max send / max receive rows per SpMM; seconds, median of {args.reps} runs, 2 threads, base partition "
        "excluded; epsilon 0.05, total volume +10 % at most. 'refined, send only' = refinement without its "
        "receive phase (`receive=False`), 'refined' = refinement (default), 'balanced' = refinement + default "
        "send-balanced restarts (one multi-constraint METIS call and one refinement each, METIS objective "
        "'auto').", headers, rows)


if __name__ == "__main__":
    main()
