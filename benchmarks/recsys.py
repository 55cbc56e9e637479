"""Full-graph LightGCN: epoch time, recall@20 and bytes at P = 2 and 4 vs single-process PyG (issue 48).

The recipe of ``examples/train_recsys.py`` (PyG's ``examples/lightgcn.py``: ``LightGCN``, 64 dimensions,
2 ``LGConv`` layers, BPR loss with lambda = 1e-4, Adam lr 0.001) on a generated Amazon-Book-shaped
bipartite graph (``amazon_book_like``: 100k users, 50k books, 1.7M interactions drawn by power laws, about
1.03M distinct after duplicates are removed, a fifth held out as test pairs).  The benchmark calls the
example's own functions (graph, batches, training epoch, evaluation).

An **epoch** is PyG's: one pass over all training pairs in mini-batches of ``--batch-size`` positives
(each with one random book as its negative), every step propagating the whole graph (forward and
backward through both layers) and stepping Adam.  PyG's script uses 8192 pairs per step (about 100 steps
here); the default here is 65536 (13 steps) so that three epochs of three configurations fit the time
box of a 2-core machine; the step's cost is dominated by the full-graph propagation, not the batch.

* **PyG**: one process (a worker of its own, so its peak memory is its own) per ``--pyg-threads``
  value (1 and 2 threads by default: 2 are the cores the P = 2 run uses), on the strongest path PyG's
  ``LGConv`` offers without ``torch_sparse``: the graph as a torch CSR ``adj_t``
  (``to_torch_csr_tensor``; ``LGConv`` normalises it with ``gcn_norm`` and multiplies with ``spmm``;
  about 5x faster per step than ``edge_index`` here).  Evaluation as PyG's script: score matrices of
  user batches, training pairs set to -inf, ``topk``, precision and recall of the test pairs.
* **distributed**: P processes of 1 thread (gloo), ``partition_and_shard`` (METIS on rank 0),
  ``distribute(LightGCN)`` (the table sharded by owner), the same batches (one seeded generator on
  every rank); evaluation ``recommend(exclude=training pairs)`` + the distributed precision/recall@20.

Reported per configuration: the median epoch time of ``--epochs`` epochs (rank 0's clock) and its ratio
to the fastest PyG run's; the evaluation's time; precision@20 and recall@20 after the same training
(the same batches, so equal up to float noise); the bytes all ranks sent per epoch: the layers' halo
(forward), the pairs' exchange (forward: rows of pairs owned elsewhere, the pairs' plans, the
all-reduce of every pair's score), the gradients (backward, both), and the top-20 exchange of one
evaluation; the peak resident memory per rank (every rank builds the whole graph before sharding it,
as the example does).

    python benchmarks/recsys.py [--quick] [--users 100000] [--books 50000] [--interactions 1700000]
        [--parts 2 4] [--epochs 3] [--batch-size 65536]
"""
import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import torch
from _common import median, print_table, write_table_section
from torch_geometric.nn import LightGCN
from torch_geometric.utils import to_torch_csr_tensor

from pyg_sparsecomm import comm_counter, distribute, global_sum, partition_and_shard
from pyg_sparsecomm.memory import peak_memory_bytes
from pyg_sparsecomm.testing import launch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_recsys as example  # noqa: E402

#: users scored at once by PyG's evaluation (its script uses the training batch size)
EVAL_USERS = 4096


def _example_args(args) -> argparse.Namespace:
    return example.parse_args(["--users", str(args.users), "--books", str(args.books), "--interactions",
                               str(args.interactions), "--batch-size", str(args.batch_size), "--epochs",
                               str(args.epochs)])


@torch.no_grad()
def _pyg_test(model, adj_t, train, test, num_users: int, k: int) -> tuple[float, float]:
    """PyG's ``examples/lightgcn.py`` ``test``: precision@k and recall@k over users with test pairs."""
    emb = model.get_embedding(adj_t)
    user_emb, book_emb = emb[:num_users], emb[num_users:]
    precision = recall = total = 0.0
    for start in range(0, num_users, EVAL_USERS):
        end = min(start + EVAL_USERS, num_users)
        logits = user_emb[start:end] @ book_emb.t()
        seen = (train[0] >= start) & (train[0] < end)
        logits[train[0, seen] - start, train[1, seen] - num_users] = float("-inf")
        truth = torch.zeros_like(logits, dtype=torch.bool)
        mine = (test[0] >= start) & (test[0] < end)
        truth[test[0, mine] - start, test[1, mine] - num_users] = True
        count = torch.bincount(test[0, mine] - start, minlength=end - start)
        hits = truth.gather(1, logits.topk(k, dim=-1).indices).sum(dim=-1)
        precision += float((hits / k).sum())
        recall += float((hits / count.clamp(min=1e-6)).sum())
        total += int((count > 0).sum())
    return precision / total, recall / total


def _pyg(rank, world_size, args, threads: int) -> dict:
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", "Sparse", UserWarning)  # torch's beta notes on CSR tensors
    data, train, test = example.make_graph(args)
    adj_t = to_torch_csr_tensor(data.edge_index.flip(0), size=(data.num_nodes, data.num_nodes))
    torch.manual_seed(args.seed)
    model = LightGCN(data.num_nodes, args.dim, num_layers=args.layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    out: dict = {"epoch": [], "loss": [], "train_pairs": train.size(1), "test_pairs": test.size(1)}
    for _ in range(args.epochs):
        steps = example.batches(train, args, generator)
        t0 = time.perf_counter()
        out["loss"].append(example.train_epoch(model, optimizer, adj_t, steps, args.lambda_reg))
        out["epoch"].append(time.perf_counter() - t0)
    out["steps"] = len(steps)
    t0 = time.perf_counter()
    out["precision"], out["recall"] = _pyg_test(model, adj_t, train, test, args.users, args.k)
    out["eval"] = time.perf_counter() - t0
    out["peak"] = [peak_memory_bytes()]
    return out


def _epoch_bytes(layer_bytes) -> list[int]:
    """This rank's bytes of the epoch: the layers' halo, the pairs' (forward), the gradients'."""
    layers = layer_bytes.take()
    return [layers, example.bytes_by_kind(example.FORWARD_KINDS) - layers,
            example.bytes_by_kind(("halo_grad",))]


def _distributed(rank, world_size, args) -> dict:
    data, train, test = example.make_graph(args)
    torch.manual_seed(args.seed)
    model = distribute(LightGCN(data.num_nodes, args.dim, num_layers=args.layers))
    t0 = time.perf_counter()
    local = partition_and_shard(data, method=args.method, seed=args.seed)
    out: dict = {"setup": time.perf_counter() - t0, "epoch": [], "loss": [], "bytes": []}
    del data
    layer_bytes = example.LayerBytes(model.convs)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    for _ in range(args.epochs):
        steps = example.batches(train, args, generator)
        comm_counter().reset()
        layer_bytes.take()
        t0 = time.perf_counter()
        out["loss"].append(example.train_epoch(model, optimizer, local.edge_index, steps, args.lambda_reg))
        out["epoch"].append(time.perf_counter() - t0)
        out["bytes"].append([int(v) for v in global_sum(torch.tensor(_epoch_bytes(layer_bytes)))])
    comm_counter().reset()
    t0 = time.perf_counter()
    out["precision"], out["recall"] = example.evaluate(model, local, args, train, test, args.k)
    out["eval"] = time.perf_counter() - t0
    out["topk_bytes"] = int(global_sum(torch.tensor(example.bytes_by_kind(example.TOPK_KINDS))))
    out["peak"] = [int(v) for v in _gathered(peak_memory_bytes(), world_size)]
    return out


def _gathered(value: int, world_size: int) -> torch.Tensor:
    """Every rank's ``value`` (rank order), on every rank."""
    import torch.distributed as dist
    values = [torch.zeros(1, dtype=torch.long) for _ in range(world_size)]
    dist.all_gather(values, torch.tensor([value]))
    return torch.cat(values)


def _row(name: str, run: dict, pyg_epoch: float) -> list:
    epoch = median(run["epoch"])
    per_epoch = [median([b[i] for b in run["bytes"]]) / 1e6 for i in range(3)] if "bytes" in run else [0] * 3
    peaks = "/".join(f"{p / 1e6:.0f}" for p in run["peak"])
    return [name, f"{epoch:.2f}", f"{epoch / pyg_epoch:.2f}", f"{run['eval']:.1f}", f"{run['loss'][-1]:.6f}",
            f"{run['precision']:.6f}", f"{run['recall']:.6f}", *(f"{v:.1f}" for v in per_epoch),
            f"{run.get('topk_bytes', 0) / 1e6:.1f}", peaks]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=100000)
    p.add_argument("--books", type=int, default=50000)
    p.add_argument("--interactions", type=int, default=1700000, help="drawn; about 1.03M distinct by default")
    p.add_argument("--parts", type=int, nargs="+", default=[2, 4])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=65536)
    p.add_argument("--pyg-threads", type=int, nargs="+", default=[1, 2],
                   help="PyG's torch threads, one run each (2: the cores the P = 2 run uses)")
    p.add_argument("--quick", action="store_true", help="a smoke run on a small graph (RESULTS.md untouched)")
    args = p.parse_args()
    if args.quick:
        args.users, args.books, args.interactions, args.epochs, args.batch_size = 2000, 1500, 30000, 2, 8192
    run_args = _example_args(args)
    pyg_runs = {t: launch(_pyg, 1, run_args, t, timeout=3600, threads=t, pg_timeout=900)[0]
                  for t in args.pyg_threads}
    dist_runs = {}
    for P in args.parts:
        dist_runs[P] = launch(_distributed, P, run_args, timeout=3600, pg_timeout=900)[0]
    pyg = min((pyg_runs[t] for t in args.pyg_threads), key=lambda run: median(run["epoch"]))
    pyg_epoch = median(pyg["epoch"])
    rows = [_row(f"PyG, 1 process x {t} thread(s), CSR adj_t", pyg_runs[t], pyg_epoch)
            for t in args.pyg_threads]
    rows += [_row(f"distributed, P = {P} x 1 thread", dist_runs[P], pyg_epoch) for P in args.parts]
    headers = ["configuration", "median epoch s", "vs PyG", "eval s", "loss (last epoch)", "precision@20",
               "recall@20", "layers' halo MB/epoch", "pairs MB/epoch", "gradients MB/epoch", "top-20 MB/eval",
               "peak MB per rank"]
    print_table(headers, rows)
    for P in args.parts:
        gap = abs(dist_runs[P]["recall"] - pyg["recall"])
        print(f"P = {P}: |recall@20 - PyG's| = {gap:.2e}, partition_and_shard {dist_runs[P]['setup']:.1f} s")
    if args.quick:
        return
    load = os.getloadavg()
    setup = ", ".join(f"P = {P}: {dist_runs[P]['setup']:.0f} s" for P in args.parts)
    notes = (f"amazon_book_like({args.users} users, {args.books} books, {args.interactions} drawn): "
             f"{pyg['train_pairs'] + pyg['test_pairs']} distinct interactions, {pyg['train_pairs']} training "
             f"(message passing in both directions) and {pyg['test_pairs']} test pairs. LightGCN, 64 dimensions, "
             f"2 layers, BPR with lambda 1e-4, Adam lr 0.001. An epoch is PyG's: all training pairs in "
             f"{pyg['steps']} mini-batches of {args.batch_size} positives (PyG's script: 8192), each with a "
             f"random book as negative, every step a full-graph forward and backward; median of {args.epochs} "
             f"epochs (rank 0's clock), in one run per configuration; precision/recall@20 after those epochs "
             f"(PyG's script's test vs recommend(exclude=training pairs) + the distributed metrics). Bytes sent "
             f"over all ranks: layers' halo = the LGConv exchanges forward; pairs = the rows of pairs owned "
             f"elsewhere, the per-step pairs' plans and the all-reduce of all pairs' scores, forward; "
             f"gradients = all of the backward; top-20 = one evaluation's recommend exchange. Peak = resident "
             f"set per rank (every rank builds the whole graph before sharding it). partition_and_shard "
             f"(METIS on rank 0, not in the epoch): {setup}. "
             f"Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} "
             f"cores shared with other jobs (P = 4 runs 4 processes on them): times are noisy. 'vs PyG': the epoch "
             f"over the fastest PyG run's.")
    write_table_section("recsys", "Full-graph LightGCN recommendation: epoch, recall@20 and bytes (issue 48)",
                        "recsys.py", notes, headers, rows)


if __name__ == "__main__":
    main()
