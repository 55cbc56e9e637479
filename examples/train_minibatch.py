"""Mini-batch training of a standard PyG model across processes: GCN, GraphSAGE, GIN or GAT.

    torchrun --standalone --nproc-per-node 2 examples/train_minibatch.py                   # SBM, GraphSAGE
    torchrun --standalone --nproc-per-node 4 examples/train_minibatch.py --dataset Cora --root data/ \\
        --batch-size 32 --method stochastic_hypergraph
    torchrun --standalone --nproc-per-node 2 examples/train_minibatch.py --loader subset --batch-size 512

The script is PyG's ``NeighborLoader`` recipe: the model is PyG's own
(``torch_geometric.nn.models``), ``distribute(model)`` makes it run on this rank's shard, and
``DistributedNeighborLoader`` takes the place of ``NeighborLoader``.  Every rank iterates the
loader together; a batch holds this rank's rows of it, seeds first, so the loss is taken over
``out[:batch.batch_size]`` (``batch.global_batch_size`` seed rows over all ranks).  The batches
are the same whatever the number of processes.  Evaluation is full-graph inference on the
shard.  The lines that differ from a single-process PyG script are marked ``# <- distributed``.
Without torchrun it runs on one process.  ``--checkpoint-dir DIR`` saves a checkpoint every
``--checkpoint-every`` batches and at every epoch's end, and resumes from the newest one, within
an epoch at the batch after the last one trained (the loader's position is in the checkpoint).
"""
import argparse
import time

import torch
import torch.nn.functional as F
from train_gcn import add_checkpoint_args, resume  # --checkpoint-dir: save, and resume after a restart
from train_gnn import MODELS, build_model  # the same models as full-graph training

from pyg_sparsecomm import (  # <- distributed
    SparsityAwarePartitioner,
    checkpoint,
    comm_counter,
    distribute,
    distributed_loss,
    global_accuracy,
    global_sum,
    partition_on_rank_zero,
    shard,
    sync_gradients,
)
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.launch.runtime import device_clock, run_job
from pyg_sparsecomm.loader import (  # <- distributed
    DistributedNeighborLoader,
    DistributedNodeSubsetLoader,
    NeighborSampling,
    NodeSubsetSampling,
)

#: comm_counter() kinds: the feature rows the layers move (forward and backward), and the ids that
#: sampling (one request exchange per hop) and the batch's plan (one reply) move
HALO_KINDS = ("halo", "halo_grad")
SAMPLING_KINDS = ("sample", "sample_counts", "plan", "plan_counts")

CPU = torch.device("cpu")


def partition_options(args, data) -> dict:
    """Options of the partitioning method: the stochastic hypergraph partition (VLDB'23 §4.3.3)
    is built from the batches the loader below draws (the same rule, batch size, seed and seed
    candidates), so it optimises the volume of the batches this script trains on."""
    if args.method != "stochastic_hypergraph":
        return {}
    if args.loader == "neighbor":
        sampling = NeighborSampling(batch_size=args.batch_size, num_neighbors=tuple(args.num_neighbors),
                                    shuffle=True, seed=args.seed)
    else:
        sampling = NodeSubsetSampling(batch_size=args.batch_size, shuffle=True, seed=args.seed)
    return {"sampling": sampling, "input_nodes": data.train_mask}


def make_loader(args, local):
    if args.loader == "neighbor":
        return DistributedNeighborLoader(local, num_neighbors=args.num_neighbors,            # <- distributed
                                         batch_size=args.batch_size, input_nodes=local.train_mask,
                                         shuffle=True, seed=args.seed)
    return DistributedNodeSubsetLoader(local, batch_size=args.batch_size,                    # <- distributed
                                       input_nodes=local.train_mask, shuffle=True, seed=args.seed)


def run(args, rank: int, world_size: int, device: torch.device = CPU, verbose: bool = True) -> dict:
    data = load_dataset(args.dataset, args.root, args.seed)
    num_classes = int(data.y.max()) + 1
    partitioner = SparsityAwarePartitioner(world_size, method=args.method, seed=args.seed,  # <- distributed
                                           **partition_options(args, data))
    data = partition_on_rank_zero(partitioner, data)                    # <- distributed (rank 0 partitions)
    local = shard(data).to(device)                                                         # <- distributed
    if verbose and rank == 0:
        print(f"P={world_size} model={args.model} loader={args.loader} method={args.method} "
              f"batch_size={args.batch_size}" + (f" num_neighbors={args.num_neighbors} trim={args.trim}"
                                                 if args.loader == "neighbor" else "") + f"\n  {data.comm_stats}")
    del data                                                   # keep only this rank's share

    loader = make_loader(args, local)
    trim = args.trim and args.loader == "neighbor"
    torch.manual_seed(args.seed)                               # same initial parameters on every rank
    model = build_model(args.model, local.x.size(1), args.hidden, num_classes, args.dropout,
                        num_layers=len(args.num_neighbors))
    model = distribute(model).to(device)                                                   # <- distributed
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    keys = ("loss", "batch_loss", "train_acc", "val_acc", "test_acc", "epoch_s", "sample_s", "batches",
            "halo_bytes", "sample_bytes")
    history: dict[str, list] = {k: [] for k in keys}
    saved = {"model": model, "shard": local, "optimizer": optimizer, "loader": loader}  # what a checkpoint holds
    step, epoch_so_far = 0, {"losses": [], "seeds": []}      # batches trained; the epoch's (if resumed mid-epoch)
    point = resume(args, saved, rank, verbose)                # the loader stands where the checkpoint was saved
    if point is not None:
        step, (history, epoch_so_far) = point.step, point.extra
    counter = comm_counter()
    for epoch in range(loader.epoch + 1, args.epochs + 1):
        counter.reset()
        model.train()
        losses = [torch.tensor(v, device=device) for v in epoch_so_far["losses"]]
        seeds, sample_s = list(epoch_so_far["seeds"]), 0.0
        epoch_so_far = {"losses": [], "seeds": []}
        t0 = t_prev = device_clock(device)
        for batch in loader:                                   # collective: every rank iterates together
            sample_s += time.perf_counter() - t_prev           # sampling + the batch's plan
            optimizer.zero_grad()
            hops = {"num_sampled_nodes_per_hop": batch.num_sampled_nodes,
                    "num_sampled_edges_per_hop": batch.num_sampled_edges} if trim else {}
            out = model(batch.x, batch.adj, **hops)                                       # <- batch.adj
            s = batch.batch_size                               # this rank's seed rows come first
            loss = distributed_loss(F.cross_entropy, out[:s], batch.y[:s])                 # <- distributed
            loss.backward()
            sync_gradients(model)                                                          # <- distributed
            optimizer.step()
            losses.append(loss.detach())                       # the batch's mean loss over all its seeds
            seeds.append(batch.global_batch_size)
            step += 1
            if args.checkpoint_dir and args.checkpoint_every and step % args.checkpoint_every == 0:
                so_far = {"losses": [float(v) for v in losses], "seeds": seeds}   # mid-epoch: the loader's position
                checkpoint.save(args.checkpoint_dir, step, extra=(history, so_far), **saved)
            t_prev = time.perf_counter()
        epoch_s = device_clock(device) - t0
        batch_loss = torch.stack(losses).tolist()              # one read of the device at the epoch's end
        halo = sum(counter.bytes_sent(k) for k in HALO_KINDS)
        sampled = sum(counter.bytes_sent(k) for k in SAMPLING_KINDS)
        halo, sampled = (int(v) for v in global_sum(torch.tensor([halo, sampled])))

        model.eval()
        with torch.no_grad():
            pred = model(local.x, local.adj).argmax(dim=-1)    # full-graph inference on the shard
        accs = [global_accuracy(pred[m], local.y[m]) for m in (local.train_mask, local.val_mask, local.test_mask)]
        epoch_loss = sum(v * n for v, n in zip(batch_loss, seeds, strict=True)) / sum(seeds)
        for key, value in zip(keys, [epoch_loss, batch_loss, *accs, epoch_s, sample_s, len(seeds), halo, sampled],
                              strict=True):
            history[key].append(value)
        if verbose and rank == 0 and (epoch % args.log_every == 0 or epoch == args.epochs):
            print(f"epoch {epoch:3d} loss {epoch_loss:.4f} train {accs[0]:.3f} val {accs[1]:.3f} "
                  f"test {accs[2]:.3f} | {epoch_s:.2f} s ({len(seeds)} batches, sampling+plan {sample_s:.2f} s) "
                  f"| per batch: {halo / len(seeds) / 1e3:.1f} kB halo, {sampled / len(seeds) / 1e3:.1f} kB "
                  f"sampling/plan ids")
        if args.checkpoint_dir:                                # every epoch's end, too
            checkpoint.save(args.checkpoint_dir, step, extra=(history, {"losses": [], "seeds": []}), **saved)
    return history


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="sage", choices=sorted(MODELS))
    p.add_argument("--loader", default="neighbor", choices=["neighbor", "subset"],
                   help="neighbor: sampled neighbourhoods of seed nodes (PyG's NeighborLoader); subset: random "
                        "node sets and the subgraphs they induce (VLDB'23 Fig. 5), seeds = their training nodes")
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[10, 5],
                   help="neighbours sampled per hop (-1: all); also the model's number of layers")
    p.add_argument("--batch-size", type=int, default=None,
                   help="seeds per batch (neighbor, default 32) or nodes per batch (subset, default 800), on "
                        "average; the built-in graphs have 140-160 training nodes")
    p.add_argument("--trim", action=argparse.BooleanOptionalAction, default=True,
                   help="trim the batch layer by layer, as PyG's trim_to_layer (neighbour batches; node-subset "
                        "batches are never trimmed); --no-trim runs every layer on the whole batch")
    p.add_argument("--dataset", default="SBM", choices=["SBM", "Cora", "CiteSeer", "PubMed"],
                   help="SBM is generated locally (no download); Planetoid sets need --root")
    p.add_argument("--root", default="data", help="Planetoid root (raw files under ROOT/NAME/raw)")
    p.add_argument("--method", default="metis",
                   help="partitioning method, e.g. metis, hypergraph or stochastic_hypergraph (optimised for "
                        "this script's batches)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=1)
    add_checkpoint_args(p, "batches (and every epoch's end)")
    args = p.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = 32 if args.loader == "neighbor" else 800
    return args


def main(argv=None) -> None:
    run_job(run, parse_args(argv))   # torchrun's job (120 s collective timeout); reports on rank 0


if __name__ == "__main__":
    main()
