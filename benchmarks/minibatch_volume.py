"""Expected mini-batch volume: stochastic hypergraph (SHP) vs hypergraph (HP) vs METIS vs random.

Each partition is evaluated on 64 fresh random mini-batches (a different seed from the one SHP
was built with): mean rows moved per mini-batch SpMM, node sampling (all in-edges of 256 seed
nodes) and neighbour sampling (256 seeds, fanouts 10, 5).

    python benchmarks/minibatch_volume.py [--graphs Cora CiteSeer] [--parts 4 16]
"""
import argparse
import time

from _common import load_graph, print_table, write_table_section

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.partition.stochastic import expected_minibatch_volume, neighbor_sampler, node_sampler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graphs", nargs="+", default=["Cora", "CiteSeer"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 16])
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args()
    samplers = {"node": (node_sampler(args.batch_size), {"batch_size": args.batch_size}),
                "neighbor [10,5]": (neighbor_sampler(args.batch_size, [10, 5]),
                                    {"batch_size": args.batch_size, "fanouts": [10, 5]})}
    headers = ["graph", "P", "sampling", "method", "rows / mini-batch", "vs random", "partition s"]
    rows = []
    for name in args.graphs:
        data = load_graph(name)
        for P in args.parts:
            for sname, (sampler, opts) in samplers.items():
                vols = {}
                for method, kw in [("random", {}), ("metis", {}), ("hypergraph", {}),
                                   ("stochastic_hypergraph", opts)]:
                    t0 = time.perf_counter()
                    part = SparsityAwarePartitioner(P, method, **kw)(data).part
                    seconds = time.perf_counter() - t0
                    vols[method] = expected_minibatch_volume(data.edge_index, data.num_nodes, part, sampler, 64)
                    rows.append([name, P, sname, method, f"{vols[method]:.1f}",
                                 f"{vols[method] / vols['random']:.3f}", f"{seconds:.2f}"])
                    print(*rows[-1], sep="\t", flush=True)
    print_table(headers, rows)
    write_table_section("minibatch_volume", "Expected mini-batch volume: stochastic hypergraph model (issue #3)",
                        "minibatch_volume.py",
                        "Mean over 64 held-out random mini-batches, rows per SpMM.", headers, rows)


if __name__ == "__main__":
    main()
