"""Heterogeneous graphs (issue 26): rows moved per layer with one exchange per source node type
(the union of the relations' halos, what ``distribute()`` runs) vs one exchange per relation, from
the partition's ``HeteroCommStats`` (no processes), on the IGBH-shaped generator; and the bytes a
real gloo run of ``distribute(to_hetero(GraphSAGE))`` counts against that prediction.

    python benchmarks/hetero_volume.py --papers 20000 --parts 2 4 8 16 [--measure-papers 2000]
"""
import argparse
import os
import sys
import time

import torch
from torch_geometric.nn import SAGEConv, to_hetero

from pyg_sparsecomm import SparsityAwarePartitioner, comm_counter, distribute, distributed_loss, shard
from pyg_sparsecomm.graph.datasets import igbh_like
from pyg_sparsecomm.testing import launch

WIDTH, HIDDEN = 64, 32


class SAGE(torch.nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(WIDTH, HIDDEN), SAGEConv(HIDDEN, num_classes)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def volume_table(papers: int, parts: list[int]) -> list[str]:
    data = igbh_like(papers, num_features=WIDTH, seed=0)
    rows = ["| method | P | rows/layer, one exchange per source type | one per relation | ratio | "
            "partition s |", "|---|---|---|---|---|---|"]
    for method in ("metis", "random"):
        for P in parts:
            start = time.perf_counter()
            stats = SparsityAwarePartitioner(P, method=method, seed=1)(data).comm_stats
            seconds = time.perf_counter() - start
            rows.append(f"| {method} | {P} | {stats.total_rows} | {stats.relation_rows} | "
                        f"{stats.total_rows / max(stats.relation_rows, 1):.3f} | {seconds:.2f} |")
    return rows


def _worker(rank, world_size, papers):
    data = SparsityAwarePartitioner(world_size, method="metis", seed=1)(igbh_like(papers, num_features=WIDTH, seed=0))
    local = shard(data)
    torch.manual_seed(0)
    model = distribute(to_hetero(SAGE(8), data.metadata(), aggr="sum"))
    comm_counter().reset()
    out = model(local.x_dict, local.adj_dict)["paper"]
    mask = local["paper"].train_mask
    distributed_loss(torch.nn.functional.cross_entropy, out[mask], local["paper"].y[mask]).backward()
    return comm_counter().bytes_received("halo"), comm_counter().calls["halo"], data.comm_stats


def measured(papers: int, P: int) -> list[str]:
    results = launch(_worker, P, papers, timeout=900)
    stats = results[0][2]
    counted = sum(r[0] for r in results)
    row_bytes = (WIDTH + HIDDEN) * 4
    return ["| P | counted halo bytes (forward, 2 layers) | predicted union | per relation | exchanges per rank |",
            "|---|---|---|---|---|",
            f"| {P} | {counted} | {stats.total_rows * row_bytes} | {stats.relation_rows * row_bytes} | "
            f"{results[0][1]} (4 source types x 2 layers) |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--papers", type=int, default=20000)
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--measure-papers", type=int, default=2000)
    parser.add_argument("--measure-parts", type=int, default=4)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; igbh_like({args.papers}) width {WIDTH}", file=sys.stderr)
    print("\n".join(volume_table(args.papers, args.parts)))
    print()
    print("\n".join(measured(args.measure_papers, args.measure_parts)))


if __name__ == "__main__":
    main()
