"""How much of the halo exchange the overlapped algorithms hide (issue #5, part 1).

The example's 2-layer GCN (hidden 16, METIS partition) trained with ``"1d"``
(blocking exchange), ``"1d_overlap"`` (non-blocking all-to-allv, owned-column
SpMM while the halo travels) and ``"1d_overlap_p2p"`` (the same with
``batch_isend_irecv`` to the peers that have rows only), in one job per P,
interleaved in rounds so that the three see the same machine state.

Per epoch: the communication time of ``"1d"`` is the whole exchange (blocking);
for the overlapped algorithms the counter times only the wait that was *not*
hidden (exposed).  hidden = 1d comm - exposed comm; fraction hidden = hidden /
1d comm.  Medians over all rounds, rank 0, 1 thread per process.

    python benchmarks/overlap.py [--graphs Cora mdual] [--parts 2 4] [--rounds 5 --epochs 8]
"""
import argparse

import torch
from _common import load_graph, median, print_table, train_epochs, with_features, write_table_section

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, shard
from pyg_sparsecomm.testing import launch

ALGORITHMS = ["1d", "1d_overlap", "1d_overlap_p2p"]


class Net(torch.nn.Module):
    def __init__(self, in_channels, hidden, out_channels, algorithm):
        super().__init__()
        self.conv1 = DistributedGCNConv(in_channels, hidden, cached=True, algorithm=algorithm)
        self.conv2 = DistributedGCNConv(hidden, out_channels, cached=True, algorithm=algorithm)

    def forward(self, x, adj):
        return self.conv2(self.conv1(x, adj).relu(), adj)


def _job(rank, world_size, data, rounds, epochs, warmup):
    torch.manual_seed(0)
    local = shard(SparsityAwarePartitioner(world_size, "metis")(data))
    classes = int(data.y.max()) + 1
    models = {a: Net(local.x.size(1), 16, classes, a) for a in ALGORITHMS}
    optims = {a: torch.optim.Adam(m.parameters(), lr=0.01) for a, m in models.items()}
    samples = {a: ([], []) for a in ALGORITHMS}
    for round_ in range(rounds):
        for algorithm in ALGORITHMS:
            skip = warmup if round_ == 0 else 0
            times, comm, _ = train_epochs(models[algorithm], optims[algorithm], local.x, local.adj, local.y,
                                          local.train_mask, epochs + skip)
            samples[algorithm][0].extend(times[skip:])
            samples[algorithm][1].extend(comm[skip:])
    return samples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", nargs="+", default=["Cora", "mdual"])
    p.add_argument("--parts", nargs="+", type=int, default=[2, 4])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    headers = ["graph", "P", "algorithm", "median epoch ms", "exposed comm ms", "hidden comm ms",
               "fraction hidden", "compute ms", "epoch vs 1d"]
    rows = []
    for name in args.graphs:
        data = with_features(load_graph(name))
        for P in args.parts:
            samples = launch(_job, P, data, args.rounds, args.epochs, args.warmup, timeout=3600)[0]
            blocking_comm = median(samples["1d"][1])
            base_epoch = median(samples["1d"][0])
            for algorithm in ALGORITHMS:
                epoch, exposed = median(samples[algorithm][0]), median(samples[algorithm][1])
                hidden = max(blocking_comm - exposed, 0.0) if algorithm != "1d" else 0.0
                rows.append([name, P, algorithm, f"{epoch * 1e3:.1f}", f"{exposed * 1e3:.2f}", f"{hidden * 1e3:.2f}",
                             f"{hidden / blocking_comm:.2f}" if blocking_comm else "-",
                             f"{(epoch - exposed) * 1e3:.1f}", f"{epoch / base_epoch:.3f}"])
                print_table(headers, rows[-1:])
    print()
    print_table(headers, rows)
    write_table_section(
        "overlap", "(f) Hidden vs exposed halo communication (issue #5 part 1)", "overlap.py",
        f"2-layer GCN, hidden 16, METIS; the three algorithms interleaved in {args.rounds} rounds of {args.epochs} "
        f"epochs in one job; medians, rank 0, 1 thread per process (P = 4 oversubscribes the 2 cores). "
        f"'1d' comm = the whole blocking exchange; exposed = the wait the overlap did not hide.", headers, rows)


if __name__ == "__main__":
    main()
