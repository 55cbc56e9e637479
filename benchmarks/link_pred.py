"""Full-graph link prediction: bytes of the pairs' exchange and epoch time vs single-process PyG (issue 29).

The recipe of ``examples/train_link.py`` (PyG's ``link_pred.py`` with GraphSAGE, 2 layers, hidden and
output 64, dot-product decoder, BCE, Adam) on a synthetic SBM graph (``_common.sparse_sbm_graph``, 64
random features), split by ``RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True)``; every
epoch draws as many fresh negatives as there are positive training pairs.

* **PyG**: one process, ``--pyg-threads`` threads (default 1: on a shared machine two threads
  contend), PyG's ``negative_sampling`` (method ``"sparse"``) every epoch.
* **distributed**: P processes of 1 thread (gloo), METIS partition of the message-passing graph;
  negatives drawn by hashes (``pyg_sparsecomm.link.negative_sampling``, each rank its share), their
  plan built (``local_pairs``), positives' plan built once (``distribute_pairs``).

Reported per configuration: median epoch time (negatives + plan + forward + backward + step) over
``--epochs`` epochs in each of ``--rounds`` rounds that alternate PyG and the distributed runs (the
per-round ratio is each round's distributed median over PyG's); the negative draw and the pair-plan
build alone (rank 0); the bytes the pairs' forward exchange sent per epoch over all ranks, counted
(``comm_counter``) and predicted (``DistributedPairs.predicted_bytes``), beside the layers' halo bytes.

    python benchmarks/link_pred.py [--nodes 20000] [--degree 10] [--parts 2 4] [--epochs 5] [--rounds 3]
"""
import argparse
import os
import random
import time

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from _common import median, print_table, sparse_sbm_graph, with_features, write_table_section
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.utils import negative_sampling as pyg_negative_sampling

from pyg_sparsecomm import SparsityAwarePartitioner, comm_counter, distribute, distributed_loss, global_sum, shard
from pyg_sparsecomm.link import distribute_pairs, local_pairs, negative_sampling
from pyg_sparsecomm.testing import launch

WIDTH = 64


def _split(args):
    data = with_features(sparse_sbm_graph(args.nodes, 50, args.degree, 0.9, seed=0), WIDTH)
    torch.manual_seed(0)
    random.seed(0)
    train, _, _ = T.RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True,
                                    add_negative_train_samples=False)(data)
    return train


def _model(in_channels):
    torch.manual_seed(0)
    return GraphSAGE(in_channels, WIDTH, num_layers=2, out_channels=WIDTH)


def _pyg_epochs(train, epochs: int, threads: int) -> list[float]:
    torch.set_num_threads(threads)
    model = _model(train.num_features)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(epochs + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        neg = pyg_negative_sampling(train.edge_index, train.num_nodes, train.edge_label_index.size(1))
        pairs = torch.cat([train.edge_label_index, neg], dim=1)
        label = torch.cat([train.edge_label, torch.zeros(neg.size(1))])
        opt.zero_grad()
        z = model(train.x, train.edge_index)
        F.binary_cross_entropy_with_logits((z[pairs[0]] * z[pairs[1]]).sum(-1), label).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times[1:]


def _distributed(rank, world_size, train, epochs: int) -> dict:
    train = SparsityAwarePartitioner(world_size, method="metis", seed=0)(train)
    local = shard(train)
    positives = distribute_pairs(train.edge_label_index, train.edge_label, train)
    model = distribute(_model(train.num_features))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    out: dict[str, list] = {k: [] for k in ("epoch", "negatives", "plan", "pair_bytes", "predicted", "halo_bytes")}
    for epoch in range(epochs + 1):
        t0 = time.perf_counter()
        neg = negative_sampling(train.edge_index, train.num_nodes, train.edge_label_index.size(1), epoch=epoch,
                                part=train)
        t1 = time.perf_counter()
        negatives = local_pairs(neg, train)
        t2 = time.perf_counter()
        opt.zero_grad()
        comm_counter().reset()
        z = model(local.x, local.adj)
        halo = comm_counter().bytes_sent("halo")
        score = torch.cat([(a * b).sum(-1) for a, b in (positives.gather(z), negatives.gather(z))])
        pair_bytes = comm_counter().bytes_sent("halo") - halo
        label = torch.cat([positives.edge_label, torch.zeros(len(negatives))])
        distributed_loss(F.binary_cross_entropy_with_logits, score, label).backward()
        opt.step()
        t3 = time.perf_counter()
        if epoch == 0:
            continue  # warm-up
        predicted = sum(p.predicted_bytes(WIDTH)["sent"] for p in (positives, negatives))
        for key, value in (("epoch", t3 - t0), ("negatives", t1 - t0), ("plan", t2 - t1)):
            out[key].append(value)
        for key, value in (("pair_bytes", pair_bytes), ("predicted", predicted), ("halo_bytes", halo)):
            out[key].append(int(global_sum(torch.tensor(value))))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=20000)
    p.add_argument("--degree", type=float, default=10.0)
    p.add_argument("--parts", type=int, nargs="+", default=[2, 4])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pyg-threads", type=int, default=1)
    args = p.parse_args()
    train = _split(args)
    pyg: list[float] = []
    runs: dict[int, list[dict]] = {P: [] for P in args.parts}
    ratios: dict[int, list[float]] = {P: [] for P in args.parts}
    for _ in range(args.rounds):
        round_pyg = _pyg_epochs(train, args.epochs, args.pyg_threads)
        pyg += round_pyg
        for P in args.parts:
            run = launch(_distributed, P, train, args.epochs, timeout=1800)[0]
            runs[P].append(run)
            ratios[P].append(median(run["epoch"]) / median(round_pyg))
    rows = [[f"PyG, 1 process x {args.pyg_threads} thread(s)", f"{median(pyg) * 1e3:.1f}", "1.00"] + ["-"] * 5]
    for P in args.parts:
        every = {k: [v for run in runs[P] for v in run[k]] for k in runs[P][0]}
        assert every["pair_bytes"] == every["predicted"], "counted pair bytes differ from the prediction"
        rows.append([f"distributed, P = {P} x 1 thread", f"{median(every['epoch']) * 1e3:.1f}",
                     f"{median(ratios[P]):.2f} ({min(ratios[P]):.2f}-{max(ratios[P]):.2f})",
                     f"{median(every['negatives']) * 1e3:.1f}", f"{median(every['plan']) * 1e3:.1f}",
                     f"{median(every['pair_bytes']) / 1e6:.3f}", f"{median(every['predicted']) / 1e6:.3f}",
                     f"{median(every['halo_bytes']) / 1e6:.3f}"])
    headers = ["configuration", "median epoch ms", "vs PyG (rounds)", "negatives ms (r0)", "pair plan ms (r0)",
               "pair MB/epoch counted", "predicted", "layer halo MB/epoch"]
    print_table(headers, rows)
    load = os.getloadavg()
    notes = (f"SBM graph: {args.nodes} nodes, degree {args.degree}, 50 blocks, 90 % inside; RandomLinkSplit "
             f"(val 0.05, test 0.1, undirected): {train.edge_index.size(1)} message-passing edges, "
             f"{train.edge_label_index.size(1)} positive training pairs and as many fresh negatives per epoch. "
             f"PyG: {args.pyg_threads} thread(s). GraphSAGE 2 layers, width {WIDTH}, dot-product decoder, BCE, Adam. "
             f"{args.rounds} rounds alternating "
             f"PyG and the distributed runs, {args.epochs} epochs each after one warm-up; 'vs PyG' is the median "
             f"(min-max) of the per-round ratios of medians. Pair bytes: the forward exchange of both pairs' "
             f"embeddings (the backward moves as many back), summed over ranks; counted == predicted (asserted). "
             f"Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} cores "
             f"shared with other jobs: times are noisy.")
    write_table_section("link_pred", "Full-graph link prediction: pair exchange and epoch time (issue 29)",
                        "link_pred.py", notes, headers, rows)


if __name__ == "__main__":
    main()
