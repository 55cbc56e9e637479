"""Full-graph 2-layer GCN training across processes (Kipf & Welling, PyG's gcn.py).

    torchrun --standalone --nproc-per-node 4 examples/train_gcn.py
    torchrun --standalone --nproc-per-node 4 examples/train_gcn.py --dataset Cora --root data/

With ``--checkpoint-dir DIR`` it saves a checkpoint every ``--checkpoint-every`` epochs and resumes
from the newest one in DIR, so under ``torchrun --max-restarts N`` a job whose rank died continues.

Compared with a single-process PyG script only three things differ (marked
"# <- distributed"): the conv class, the partition/shard lines, and the loss
reduction plus gradient sync.  Runs on CPU with gloo; with CUDA available each
rank takes GPU ``LOCAL_RANK`` and NCCL.  Without torchrun it runs on one process.
"""
import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from pyg_sparsecomm import (  # <- dist.
    DistributedGCNConv,
    NodeDropout,
    SparsityAwarePartitioner,
    checkpoint,
    comm_counter,
    distributed_loss,
    global_accuracy,
    global_sum,
    load_shard,
    partition_on_rank_zero,
    save_partition,
    shard,
    sync_gradients,
)
from pyg_sparsecomm.algorithms import ALGORITHMS
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.launch.runtime import device_clock, run_job
from pyg_sparsecomm.store.files import partition_source

CPU = torch.device("cpu")


class GCN(torch.nn.Module):
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 dropout: float = 0.5, algorithm: str = "1d", exact_dropout: bool = False,
                 replication: int = 1) -> None:
        super().__init__()
        self.dropout = dropout
        # NodeDropout keys its masks on global node ids: the run then equals a single-process
        # run with the same masks exactly, whatever the partition.
        self.drops = torch.nn.ModuleList([NodeDropout(dropout, seed=i) for i in range(2)]) if exact_dropout \
            else None
        self.conv1 = DistributedGCNConv(in_channels, hidden_channels, cached=True,  # <- distributed
                                        algorithm=algorithm, replication=replication)
        self.conv2 = DistributedGCNConv(hidden_channels, out_channels, cached=True,
                                        algorithm=algorithm, replication=replication)

    def drop(self, x, n_id, layer: int):
        if self.drops is not None:
            return self.drops[layer](x, n_id)
        return F.dropout(x, p=self.dropout, training=self.training)

    def forward(self, x, adj, n_id=None):
        x = self.drop(x, n_id, 0)
        x = self.conv1(x, adj).relu()
        x = self.drop(x, n_id, 1)
        return self.conv2(x, adj)


def global_max(value: torch.Tensor) -> torch.Tensor:
    value = value.detach().clone().reshape(())
    if dist.is_initialized():
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value


@contextmanager
def timed(seconds: dict, key: str) -> Iterator[None]:
    """Adds the wall time of the ``with`` block to ``seconds[key]``."""
    start = time.perf_counter()
    yield
    seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - start


def run(args, rank: int, world_size: int, device: torch.device = CPU, verbose: bool = True) -> dict:
    torch.manual_seed(args.seed)  # same initial parameters on every rank
    # 1.5D: P/c block rows, each replicated on the c ranks of a grid row
    grid = process_grid(args.replication) if args.replication > 1 else None
    num_parts = world_size // args.replication
    partitioner = SparsityAwarePartitioner(num_parts, method=args.method, seed=args.seed)  # <- distributed
    seconds = {}  # graph (generation or reading), partition, shard: timed apart
    if args.partition_dir:
        # Partition once (rank 0), then every rank reads only its own part file.  What this run
        # is about to use is checked against the cache, so one made with another dataset, method,
        # seed or P raises instead of being reused.
        source = partition_source(partitioner, dataset=args.dataset)
        if rank == 0 and not (Path(args.partition_dir) / "manifest.json").exists():
            with timed(seconds, "graph"):
                data = load_dataset(args.dataset, args.root, args.seed, barrier=False)
            with timed(seconds, "partition"):
                save_partition(partitioner(data), args.partition_dir, source=source)
            del data
        if dist.is_initialized():
            dist.barrier()
        with timed(seconds, "shard"):
            local = load_shard(args.partition_dir, grid=grid, expected_source=source)
        stats = (f"loaded {args.partition_dir}/part-{local.adj.plan.rank}.pt: {local.num_nodes} rows, "
                 f"halo {local.adj.halo_size}")
    else:
        with timed(seconds, "graph"):
            data = load_dataset(args.dataset, args.root, args.seed)
        with timed(seconds, "partition"):
            data = partition_on_rank_zero(partitioner, data)  # <- distributed (rank 0 partitions)
        with timed(seconds, "shard"):
            local = shard(data, grid=grid)  # <- distributed
        stats = data.comm_stats
        del data  # keep only this rank's share
    local = local.to(device)
    num_classes = int(global_max(local.y.max() if local.y.numel() else local.y.new_zeros(()))) + 1

    model = GCN(local.x.size(1), args.hidden, num_classes, args.dropout, args.algorithm,
                args.exact_dropout, args.replication).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    if verbose and rank == 0:
        layout = f" replication={args.replication} ({num_parts} block rows)" if grid is not None else ""
        times = ", ".join(f"{k} {v:.2f}s" for k, v in seconds.items())
        print(f"P={world_size} dataset={args.dataset} method={args.method} algorithm={args.algorithm}{layout} "
              f"| {times}")
        print(f"  {stats}")

    history = {k: [] for k in ("loss", "train_acc", "val_acc", "test_acc", "epoch_s", "comm_s", "bytes")}
    saved = {"model": model, "shard": local, "optimizer": optimizer}  # what a checkpoint holds
    point = resume(args, saved, rank, verbose)  # the newest checkpoint in --checkpoint-dir, if any
    start = 1 if point is None else point.step + 1
    history = history if point is None else point.extra
    counter = comm_counter()
    # the bar on stderr, only on a terminal (disable=None): the epoch lines (tqdm.write) go to stdout, and
    # a redirected log holds them alone
    bar = tqdm(range(start, args.epochs + 1), disable=None if verbose and rank == 0 and args.progress else True,
               desc="epochs", leave=False, file=sys.stderr)
    for epoch in bar:
        counter.reset()
        t0 = device_clock(device)
        model.train()
        optimizer.zero_grad()
        out = model(local.x, local.adj, local.n_id)
        mask = local.train_mask
        loss = distributed_loss(F.cross_entropy, out[mask], local.y[mask])  # <- distributed
        loss.backward()
        sync_gradients(model)                                              # <- distributed
        optimizer.step()
        epoch_s = device_clock(device) - t0                               # CUDA: the epoch's kernels done
        comm_s, sent = counter.seconds, counter.bytes_sent()

        model.eval()
        with torch.no_grad():
            pred = model(local.x, local.adj, local.n_id).argmax(dim=-1)
        accs = [global_accuracy(pred[m], local.y[m]) for m in (local.train_mask, local.val_mask,
                                                                 local.test_mask)]
        total_loss = float(loss)                          # the whole-graph loss
        total_bytes = int(global_sum(torch.tensor(sent)))
        for key, value in zip(history, [total_loss, *accs, epoch_s, comm_s, total_bytes], strict=False):
            history[key].append(value)
        if verbose and rank == 0 and epoch == 1 and args.algorithm == "auto":
            for conv in (model.conv1, model.conv2):
                tqdm.write(conv.explain_algorithm())
        if verbose and rank == 0 and (epoch % args.log_every == 0 or epoch == args.epochs):
            tqdm.write(f"epoch {epoch:4d} loss {total_loss:.4f} train {accs[0]:.3f} val {accs[1]:.3f} "
                       f"test {accs[2]:.3f} | {epoch_s * 1e3:.1f} ms/epoch (comm {comm_s * 1e3:.1f} ms, "
                       f"compute {(epoch_s - comm_s) * 1e3:.1f} ms) | {total_bytes / 1e6:.3f} MB sent")
        if args.checkpoint_dir and (epoch % args.checkpoint_every == 0 or epoch == args.epochs):
            checkpoint.save(args.checkpoint_dir, epoch, extra=history, **saved)
    return history


def resume(args, saved: dict, rank: int, verbose: bool = True) -> checkpoint.ResumePoint | None:
    """Restores the newest checkpoint in ``--checkpoint-dir`` into ``saved``'s objects; where it stood
    (``None``: no checkpoint option or none saved yet, a fresh start)."""
    if not args.checkpoint_dir:
        return None
    try:
        point = checkpoint.load(args.checkpoint_dir, allow_repartition=args.allow_repartition, **saved)
    except checkpoint.PartitionMismatchError as error:  # e.g. an elastic job restarted with another P
        raise SystemExit(f"{error}\nIn this example: pass --allow-repartition") from error
    if point is not None and verbose and rank == 0:
        how = f", re-partitioned from {point.world_size} ranks" if point.repartitioned else ""
        print(f"resumed from {point.path} (step {point.step}{how})")
    return point


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="SBM", choices=["SBM", "Cora", "CiteSeer"],
                   help="SBM is generated locally (no download); Planetoid sets need --root")
    p.add_argument("--root", default="data", help="Planetoid root (raw files under ROOT/NAME/raw)")
    p.add_argument("--method", default="metis", help="partitioning method")
    p.add_argument("--algorithm", default="1d", choices=[*sorted(ALGORITHMS), "auto"],
                   help="distributed SpMM: '1d' is sparsity-aware, 'auto' picks by the cost model; "
                        "1.5D ones need --replication, 'rdma' mpiexec (default: %(default)s)")
    p.add_argument("--replication", type=int, default=1,
                   help="1.5D: replicas c of every block row (P/c parts; needs --algorithm 1.5d, "
                        "1.5d_oblivious or auto)")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exact-dropout", action="store_true",
                   help="dropout masks keyed on global node ids (identical to single-process training)")
    p.add_argument("--partition-dir", help="partition once into DIR (rank 0), then each rank loads only "
                                           "its own part file; reused when DIR already holds a partition "
                                           "made the same way (else an error names what differs)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    add_checkpoint_args(p, "epochs")
    return p.parse_args(argv)


def add_checkpoint_args(p: argparse.ArgumentParser, unit: str) -> None:
    p.add_argument("--checkpoint-dir", help="save checkpoints into DIR and resume from the newest one there "
                                            "(under torchrun --max-restarts, a restarted job continues)")
    p.add_argument("--checkpoint-every", type=int, default=10,
                   help=f"{unit} between checkpoints (default: %(default)s)")
    p.add_argument("--allow-repartition", action="store_true",
                   help="resume a checkpoint saved on another partition (another number of ranks): parameters and "
                        "optimizer state carry over, the ranks' own state (stale halos, random streams) starts anew")


def main(argv=None) -> None:
    run_job(run, parse_args(argv))   # torchrun's job (120 s collective timeout); reports on rank 0


if __name__ == "__main__":
    main()
