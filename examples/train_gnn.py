"""Full-graph training of a standard PyG model across processes: GCN, GraphSAGE, GIN or GAT.

    torchrun --standalone --nproc-per-node 2 examples/train_gnn.py --model sage
    torchrun --standalone --nproc-per-node 4 examples/train_gnn.py --model gat --dataset Cora --root data/

The model is PyG's own (``torch_geometric.nn.models``), built exactly as in a
single-process script; ``distribute(model)`` makes it run on this rank's shard.
The lines that differ from a single-process PyG script are marked ``# <- distributed``.
Without torchrun it runs on one process.  ``--checkpoint-dir DIR`` saves checkpoints and resumes
from the newest one (as ``train_gcn.py``).
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE
from train_gcn import add_checkpoint_args, resume  # --checkpoint-dir: save, and resume after a restart

from pyg_sparsecomm import (  # <- distributed
    SparsityAwarePartitioner,
    checkpoint,
    comm_counter,
    distribute,
    distributed_loss,
    global_accuracy,
    global_sum,
    shard,
)
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.launch.runtime import device_clock, run_job

MODELS = {"gcn": GCN, "sage": GraphSAGE, "gin": GIN, "gat": GAT}

CPU = torch.device("cpu")


def build_model(name: str, in_channels: int, hidden: int, out_channels: int, dropout: float,
                norm: str = None, num_layers: int = 2) -> torch.nn.Module:
    kwargs = {"heads": 4} if name == "gat" else {}
    return MODELS[name](in_channels, hidden, num_layers=num_layers, out_channels=out_channels, dropout=dropout,
                        norm=norm, **kwargs)


def run(args, rank: int, world_size: int, device: torch.device = CPU, verbose: bool = True) -> dict:
    torch.manual_seed(args.seed)                               # same initial parameters on every rank
    data = load_dataset(args.dataset, args.root, args.seed)
    num_classes = int(data.y.max()) + 1
    data = SparsityAwarePartitioner(world_size, method=args.method, seed=args.seed)(data)  # <- distributed
    local = shard(data).to(device)                                                          # <- distributed
    if verbose and rank == 0:
        print(f"P={world_size} model={args.model} method={args.method} algorithm={args.algorithm}\n"
              f"  {data.comm_stats}")
    del data                                                   # keep only this rank's share

    model = build_model(args.model, local.x.size(1), args.hidden, num_classes, args.dropout, args.norm)
    # rank 0's parameters everywhere; gradients summed in backward, unless DDP does it (--ddp)
    model = distribute(model, algorithm=args.algorithm, sync_gradients=not args.ddp).to(device)  # <- distributed
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    step_model, loss_scale = model, 1.0
    if args.ddp and dist.is_initialized():
        # DDP averages gradients, the exact recipe sums every rank's share: scale the loss by P. Its
        # bucket all-reduces run in a group of their own, apart from the halo exchanges' default group.
        step_model = DistributedDataParallel(model, process_group=dist.new_group(backend=dist.get_backend()))
        loss_scale = float(world_size)
    history = {k: [] for k in ("loss", "train_acc", "val_acc", "test_acc", "epoch_s", "bytes")}
    saved = {"model": model, "shard": local, "optimizer": optimizer}  # what a checkpoint holds
    point = resume(args, saved, rank, verbose)                # the newest checkpoint in --checkpoint-dir, if any
    start = 1 if point is None else point.step + 1
    history = history if point is None else point.extra
    for epoch in range(start, args.epochs + 1):
        comm_counter().reset()
        t0 = device_clock(device)
        model.train()
        optimizer.zero_grad()
        out = step_model(local.x, local.adj)                                               # <- local.adj
        loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])  # <- dist.
        (loss * loss_scale).backward()                    # distribute() sums the ranks' gradient shares
        optimizer.step()
        epoch_s = device_clock(device) - t0                                                # CUDA: kernels done
        sent = int(global_sum(torch.tensor(comm_counter().bytes_sent())))

        model.eval()
        with torch.no_grad():
            pred = model(local.x, local.adj).argmax(dim=-1)
        accs = [global_accuracy(pred[m], local.y[m]) for m in (local.train_mask, local.val_mask, local.test_mask)]
        for key, value in zip(history, [float(loss), *accs, epoch_s, sent], strict=False):
            history[key].append(value)
        if verbose and rank == 0 and (epoch % args.log_every == 0 or epoch == args.epochs):
            print(f"epoch {epoch:4d} loss {history['loss'][-1]:.4f} train {accs[0]:.3f} val {accs[1]:.3f} "
                  f"test {accs[2]:.3f} | {epoch_s * 1e3:.1f} ms | {sent / 1e6:.3f} MB sent")
        if args.checkpoint_dir and (epoch % args.checkpoint_every == 0 or epoch == args.epochs):
            checkpoint.save(args.checkpoint_dir, epoch, extra=history, **saved)
    return history


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="sage", choices=sorted(MODELS))
    p.add_argument("--dataset", default="SBM", choices=["SBM", "Cora", "CiteSeer", "PubMed"],
                   help="SBM is generated locally (no download); Planetoid sets need --root")
    p.add_argument("--root", default="data", help="Planetoid root (raw files under ROOT/NAME/raw)")
    p.add_argument("--method", default="metis", help="partitioning method")
    p.add_argument("--algorithm", default="1d", help="SpMM algorithm of the linear aggregations, or 'auto'")
    p.add_argument("--norm", default=None, help="e.g. batch_norm (statistics over all ranks)")
    p.add_argument("--ddp", action="store_true",
                   help="sync gradients with DistributedDataParallel (own process group) instead of "
                        "distribute()'s own sync; both exact, see benchmarks/RESULTS.md (gradient_sync)")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    add_checkpoint_args(p, "epochs")
    return p.parse_args(argv)


def main(argv=None) -> None:
    run_job(run, parse_args(argv))   # torchrun's job (120 s collective timeout); reports on rank 0


if __name__ == "__main__":
    main()
