"""(b) Measured epoch time under gloo and (c) the P = 1 overhead against PyG's GCNConv.

(b) The example's 2-layer GCN (hidden 16, dropout 0.5, METIS partition),
sparsity-aware 1D, the same overlapped with the local SpMM (``1d_overlap``; its
comm time is only the wait that was not hidden), oblivious (CAGNET 1D) and
single-process PyG ``GCNConv``
(edge_index, cached), P = 1, 2, 4 processes of 1 thread each on this machine.
Median epoch time (forward + backward + gradient sync + Adam step) of rank 0
after warm-up, and the median time spent inside communication calls.

(c) In one process, interleaved, the same model with ``DistributedGCNConv``
on a P = 1 shard vs ``GCNConv`` on ``edge_index`` (PyG's default path) and on a
torch CSR ``adj_t`` (PyG's fastest path without torch_sparse).

    python benchmarks/epoch_time.py [--graphs Cora mdual] [--epochs 30]
"""
import argparse

import torch
import torch.nn.functional as F
from _common import load_graph, median, print_table, train_epochs, with_features, write_table_section
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, shard
from pyg_sparsecomm.testing import launch


class Net(torch.nn.Module):
    def __init__(self, conv, in_channels, hidden, out_channels, **kw):
        super().__init__()
        self.conv1 = conv(in_channels, hidden, cached=True, **kw)
        self.conv2 = conv(hidden, out_channels, cached=True, **kw)

    def forward(self, x, adj):
        x = F.dropout(x, 0.5, self.training)
        x = F.dropout(self.conv1(x, adj).relu(), 0.5, self.training)
        return self.conv2(x, adj)


def adam(model):
    return torch.optim.Adam(model.parameters(), lr=0.01)


def _distributed(rank, world_size, data, algorithm, epochs, warmup):
    torch.manual_seed(0)
    data = SparsityAwarePartitioner(world_size, "metis")(data)
    local = shard(data)
    classes = int(data.y.max()) + 1
    model = Net(DistributedGCNConv, local.x.size(1), 16, classes, algorithm=algorithm)
    times, comm, sent = train_epochs(model, adam(model), local.x, local.adj, local.y, local.train_mask,
                                     warmup + epochs)
    return times[warmup:], comm[warmup:], sent[-1]


def _pyg(rank, world_size, data, epochs, warmup):
    torch.manual_seed(0)
    model = Net(GCNConv, data.x.size(1), 16, int(data.y.max()) + 1)
    times, _, _ = train_epochs(model, adam(model), data.x, data.edge_index, data.y, data.train_mask, warmup + epochs,
                            distributed=False)
    return times[warmup:]


def overhead(data, epochs, rounds=5):
    """(c): interleaved rounds in one process (1 thread); returns medians in ms."""
    torch.set_num_threads(1)
    classes = int(data.y.max()) + 1
    local = shard(SparsityAwarePartitioner(1, "contiguous")(data), rank=0, world_size=1)
    adj_t = torch.sparse_coo_tensor(data.edge_index.flip(0), torch.ones(data.edge_index.size(1)),
                                    (data.num_nodes, data.num_nodes)).coalesce().to_sparse_csr()
    runs = {"DistributedGCNConv (P=1)": (DistributedGCNConv, local.x, local.adj),
            "GCNConv edge_index": (GCNConv, data.x, data.edge_index),
            "GCNConv torch CSR adj_t": (GCNConv, data.x, adj_t)}
    samples = {k: [] for k in runs}
    for _ in range(rounds):
        for name, (conv, x, adj) in runs.items():
            torch.manual_seed(0)
            model = Net(conv, x.size(1), 16, classes)
            times, _, _ = train_epochs(model, adam(model), x, adj, data.y, data.train_mask, epochs + 3,
                                       distributed=False)
            samples[name] += times[3:]
    return {k: median(v) * 1e3 for k, v in samples.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graphs", nargs="+", default=["Cora", "mdual"])
    p.add_argument("--parts", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()

    headers_b = ["graph", "P", "algorithm", "median epoch ms", "median comm ms", "MB sent/epoch (rank 0)",
                 "vs PyG 1 proc"]
    rows_b, rows_c = [], []
    for name in args.graphs:
        data = with_features(load_graph(name))
        pyg_ms = median(launch(_pyg, 1, data, args.epochs, args.warmup)[0]) * 1e3
        rows_b.append([name, 1, "PyG GCNConv", f"{pyg_ms:.2f}", "-", "-", "1.00"])
        print_table(headers_b, rows_b[-1:])
        for P in args.parts:
            for algorithm in ["1d", "1d_overlap", "oblivious"]:
                times, comm, sent = launch(_distributed, P, data, algorithm, args.epochs, args.warmup)[0]
                ms = median(times) * 1e3
                rows_b.append([name, P, algorithm, f"{ms:.2f}", f"{median(comm) * 1e3:.2f}",
                               f"{sent / 1e6:.3f}", f"{ms / pyg_ms:.2f}"])
                print_table(headers_b, rows_b[-1:])
        o = overhead(data, args.epochs)
        base = o["GCNConv edge_index"]
        for k, v in o.items():
            rows_c.append([name, k, f"{v:.2f}", f"{v / base:.3f}", f"{v / o['GCNConv torch CSR adj_t']:.3f}"])
    headers_c = ["graph", "model", "median epoch ms", "ratio vs GCNConv edge_index", "ratio vs GCNConv CSR"]
    print()
    print_table(headers_b, rows_b)
    print()
    print_table(headers_c, rows_c)
    write_table_section(
        "epoch_time", "(b) Measured epoch time under gloo", "epoch_time.py",
        f"One thread per process; P = 4 oversubscribes the 2 cores. Medians over {args.epochs} epochs "
        f"after {args.warmup} warm-up epochs, rank 0.", headers_b, rows_b)
    write_table_section(
        "overhead", "(c) P = 1 overhead of DistributedGCNConv vs GCNConv (target <= 1.10x)", "epoch_time.py",
        "One process, one thread, the three models interleaved over 5 rounds; medians.", headers_c, rows_c)

if __name__ == "__main__":
    main()
