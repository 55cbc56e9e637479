"""Heterogeneous graphs (issue 26, item 5, full graph): an MLPerf-shaped RGAT (PyG ``HeteroConv`` of
one ``GATConv`` per edge type, reverses included, 3 layers, 4 heads) on the IGBH-shaped generator.
Epoch time (forward + backward + Adam step; medians) of ``distribute(model)`` at P ranks vs
single-process PyG on the same cores, and the halo rows/bytes of the deduplicated exchange (one
per source node type, what ``distribute()`` runs) vs one exchange per relation (``HeteroCommStats``,
as in ``hetero_volume.py``).

    python benchmarks/hetero_rgat.py --papers 4000 --parts 2 4 --epochs 5 --hidden 64
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, HeteroConv

from pyg_sparsecomm import SparsityAwarePartitioner, comm_counter, distribute, distributed_loss, shard
from pyg_sparsecomm.graph.datasets import igbh_like
from pyg_sparsecomm.testing import launch

HEADS, LAYERS, FEATURES, CLASSES = 4, 3, 128, 16


class RGAT(torch.nn.Module):
    """MLPerf's RGAT shape: per layer a ``HeteroConv`` of ``GATConv`` per edge type (sum), then a linear head."""

    def __init__(self, edge_types, hidden: int) -> None:
        super().__init__()
        widths = [FEATURES] + [hidden] * LAYERS
        self.convs = torch.nn.ModuleList(
            HeteroConv({et: GATConv((w_in, w_in), hidden // HEADS, heads=HEADS, add_self_loops=False)
                        for et in edge_types}, aggr="sum") for w_in in widths[:-1])
        self.head = torch.nn.Linear(hidden, CLASSES)

    def forward(self, x_dict, edge_index_dict):
        for i, conv in enumerate(self.convs):
            x_dict = conv(x_dict, edge_index_dict)
            if i < LAYERS - 1:
                x_dict = {t: x.relu() for t, x in x_dict.items()}
        return self.head(x_dict["paper"])


def graph(papers: int):
    return igbh_like(papers, num_features=FEATURES, num_classes=CLASSES, seed=0)


def epochs(model, x_dict, adj_dict, y, mask, loss_of, num_epochs: int, sync=lambda: None) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(num_epochs):
        sync()
        start = time.perf_counter()
        opt.zero_grad()
        loss_of(model(x_dict, adj_dict)[mask], y[mask]).backward()
        opt.step()
        sync()
        times.append(time.perf_counter() - start)
    return times


def single_process(papers: int, hidden: int, num_epochs: int, threads: int) -> float:
    data = graph(papers)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = RGAT(data.edge_types, hidden)
    return statistics.median(epochs(model, data.x_dict, data.edge_index_dict, data["paper"].y,
                                    data["paper"].train_mask, F.cross_entropy, num_epochs + 1)[1:])


def _worker(rank, world_size, papers, hidden, num_epochs):
    data = SparsityAwarePartitioner(world_size, method="metis", seed=1)(graph(papers))
    local = shard(data)
    torch.manual_seed(0)
    model = distribute(RGAT(data.edge_types, hidden))
    y, mask = local["paper"].y, local["paper"].train_mask
    loss_of = lambda out, target: distributed_loss(F.cross_entropy, out, target)  # noqa: E731
    times = epochs(model, local.x_dict, local.adj_dict, y, mask, loss_of, num_epochs + 1,
                   sync=torch.distributed.barrier)[1:]
    comm_counter().reset()
    epochs(model, local.x_dict, local.adj_dict, y, mask, loss_of, 1)
    return times, comm_counter().bytes_received("halo"), comm_counter().calls["halo"], data.comm_stats


def distributed_row(papers: int, hidden: int, num_epochs: int, P: int, reference: float) -> str:
    results = launch(_worker, P, papers, hidden, num_epochs, timeout=1200)
    epoch = statistics.median(max(r[0][i] for r in results) for i in range(num_epochs))
    stats, counted = results[0][3], sum(r[1] for r in results)
    per_relation = counted * stats.relation_rows / max(stats.total_rows, 1)
    return (f"| {P} | {epoch:.3f} | {reference:.3f} | {reference / epoch:.2f} | {stats.total_rows} | "
            f"{stats.relation_rows} | {counted / 1e6:.2f} | {per_relation / 1e6:.2f} | {results[0][2]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--papers", type=int, default=4000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    data = graph(args.papers)
    nodes = {t: data[t].num_nodes for t in data.node_types}
    edges = sum(data[e].edge_index.size(1) for e in data.edge_types)
    print(f"load average (1, 5, 15 min) {os.getloadavg()}; igbh_like({args.papers}): {nodes}, {edges} edges, "
          f"{len(data.edge_types)} edge types; RGAT {LAYERS} layers, hidden {args.hidden}, {HEADS} heads, "
          f"features {FEATURES}; medians of {args.epochs} epochs after one warm-up")
    one_thread = single_process(args.papers, args.hidden, args.epochs, 1)
    reference = single_process(args.papers, args.hidden, args.epochs, 2)  # the two cores the P ranks share
    print(f"single-process PyG, 1 thread: {one_thread:.3f} s/epoch")
    print("| P | epoch s (distributed) | epoch s (PyG, 1 process, 2 threads) | speed-up | halo rows/layer, "
          "one exchange per source type | one per relation | counted halo MB/epoch (fwd+bwd) | "
          "per relation MB/epoch (est.) | halo exchanges/rank/epoch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for P in args.parts:
        print(distributed_row(args.papers, args.hidden, args.epochs, P, reference), flush=True)


if __name__ == "__main__":
    main()
