"""Expected mini-batch volume: stochastic hypergraph (SHP) vs hypergraph (HP) vs METIS vs random.

Each partition is evaluated on 64 held-out batches (epochs SHP's sample does not reach) of the
loaders' rules: mean rows moved per mini-batch SpMM (the km1 of each batch's column nets), for
node subsets (``NodeSubsetSampling``: 256 random nodes and the subgraph they induce) and
neighbour sampling (``NeighborSampling``: 256 seeds, fanouts 10, 5), seeds from every node.
SHP is built from the same rule's batches (its default sample, eq. (14) with θ = 0.1, δ = 0.5).

    python benchmarks/minibatch_volume.py [--graphs Cora CiteSeer] [--parts 4 16]
"""
import argparse
import time

from _common import load_graph, print_table, write_table_section

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.loader import NeighborSampling, NodeSubsetSampling
from pyg_sparsecomm.partition.stochastic import expected_minibatch_volume


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graphs", nargs="+", default=["Cora", "CiteSeer"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 16])
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args()
    specs = {"node subset": NodeSubsetSampling(batch_size=args.batch_size),
             "neighbor [10,5]": NeighborSampling(batch_size=args.batch_size, num_neighbors=(10, 5))}
    headers = ["graph", "P", "sampling", "method", "rows / mini-batch", "vs random", "partition s"]
    rows = []
    for name in args.graphs:
        data = load_graph(name)
        for P in args.parts:
            for sname, spec in specs.items():
                vols = {}
                for method, kw in [("random", {}), ("metis", {}), ("hypergraph", {}),
                                   ("stochastic_hypergraph", {"sampling": spec})]:
                    t0 = time.perf_counter()
                    part = SparsityAwarePartitioner(P, method, **kw)(data).part
                    seconds = time.perf_counter() - t0
                    vols[method] = expected_minibatch_volume(data.edge_index, data.num_nodes, part, spec,
                                                             num_batches=64)
                    rows.append([name, P, sname, method, f"{vols[method]:.1f}",
                                 f"{vols[method] / vols['random']:.3f}", f"{seconds:.2f}"])
                    print(*rows[-1], sep="\t", flush=True)
    print_table(headers, rows)
    write_table_section("minibatch_volume", "Expected mini-batch volume: stochastic hypergraph model (issue #3)",
                        "minibatch_volume.py",
                        "Mean over 64 held-out batches of the loaders' rules, rows per SpMM; SHP from the same "
                        "rule's batches (default sample: epoch 0, grown to eq. (14), θ = 0.1, δ = 0.5).",
                        headers, rows)


if __name__ == "__main__":
    main()
