"""Full-graph link prediction across processes: GraphSAGE encoder, dot-product decoder (PyG's
``examples/link_pred.py``, with GraphSAGE).

    torchrun --standalone --nproc-per-node 2 examples/train_link.py
    torchrun --standalone --nproc-per-node 4 examples/train_link.py --dataset Cora --root data/
    torchrun --standalone --nproc-per-node 2 examples/train_link.py --loader link-neighbor --batch-size 512

The order of the steps:

1. split the *whole* graph with PyG's ``RandomLinkSplit`` (every rank computes the same split
   from the same seed), so validation and test edges never enter message passing;
2. partition and shard the message-passing graph (``train_data``) only;
3. every supervision pair is held by the owner of its source (``distribute_pairs``); the target's
   embedding arrives through the pairs' exchange plan, built once for the fixed pairs;
4. every epoch draws fresh negatives by hashes of global ids (the same pairs on any number of
   ranks), each rank those whose source it owns, and builds their plan (``local_pairs``).

With ``--loader link-neighbor`` the training steps are mini-batches of PyG's ``LinkNeighborLoader``
(``DistributedLinkNeighborLoader``: pairs and binary negatives drawn by hashes, the endpoints'
sampled neighbourhoods; evaluation stays full-graph).  AUC and Hits@K are computed over all ranks'
pairs.  The lines that differ from a single-process PyG script are marked ``# <- distributed``.
Without torchrun it runs on one process.
"""
import argparse
import random

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.nn.models import GraphSAGE

from pyg_sparsecomm import SparsityAwarePartitioner, comm_counter, distribute, distributed_loss, global_sum, shard
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.launch.runtime import device_clock, run_job
from pyg_sparsecomm.link import (  # <- distributed
    distribute_pairs,
    global_auc,
    global_hits_at_k,
    local_pairs,
    negative_sampling,
)
from pyg_sparsecomm.loader import DistributedLinkNeighborLoader

CPU = torch.device("cpu")


def split(data: Data, seed: int):
    """PyG's ``RandomLinkSplit`` of the whole graph, the same on every rank: it permutes the edges with
    torch's generator and draws the validation and test negatives with Python's ``random``; both seeded."""
    torch.manual_seed(seed)
    random.seed(seed)
    transform = T.RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True,
                                  add_negative_train_samples=False)
    return transform(Data(x=data.x, edge_index=data.edge_index, num_nodes=data.num_nodes))


def decode(z_src: torch.Tensor, z_dst: torch.Tensor) -> torch.Tensor:
    return (z_src * z_dst).sum(dim=-1)


def full_graph_step(args, model, optimizer, local, train_data, positives, epoch: int):
    """One full-graph step on fresh negatives; returns the loss and the pairs' bytes sent (counted, predicted)."""
    neg = negative_sampling(train_data.edge_index, train_data.num_nodes,                                # <- dist.
                            num_neg_samples=train_data.edge_label_index.size(1), seed=args.seed, epoch=epoch,
                            part=train_data)
    negatives = local_pairs(neg, train_data).to(local.x.device)                                         # <- dist.
    model.train()
    optimizer.zero_grad()
    z = model(local.x, local.adj)                                                                       # <- adj
    before = comm_counter().bytes_sent("halo")
    score = torch.cat([decode(*positives.gather(z)), decode(*negatives.gather(z))])                      # <- dist.
    pair_bytes = comm_counter().bytes_sent("halo") - before
    label = torch.cat([positives.edge_label, torch.zeros(len(negatives), device=z.device)])
    loss = distributed_loss(F.binary_cross_entropy_with_logits, score, label)                           # <- dist.
    loss.backward()
    optimizer.step()
    predicted = sum(p.predicted_bytes(z.size(1), z.element_size())["sent"] for p in (positives, negatives))
    return float(loss.detach()), pair_bytes, predicted


def minibatch_epoch(model, optimizer, loader, device):
    """One epoch of ``DistributedLinkNeighborLoader`` batches; returns the mean batch loss and the pairs'
    bytes sent (counted, predicted)."""
    model.train()
    losses, pair_bytes, predicted = [], 0, 0
    for batch in loader:                        # rows on the shard's device; the pair index follows z's device
        optimizer.zero_grad()
        z = model(batch.x, batch.edge_index)
        before = comm_counter().bytes_sent("halo")
        score = decode(z[batch.edge_label_index[0]], z[batch.edge_label_index[1]])  # targets of other ranks: exchanged
        pair_bytes += comm_counter().bytes_sent("halo") - before
        predicted += batch.pairs.predicted_bytes(z.size(1), z.element_size())["sent"]  # the same exchange's plan
        label = batch.edge_label.to(z.device, z.dtype)
        loss = distributed_loss(F.binary_cross_entropy_with_logits, score, label)                        # <- dist.
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return sum(losses) / max(len(losses), 1), pair_bytes, predicted


def run(args, rank: int, world_size: int, device: torch.device = CPU, verbose: bool = True) -> dict:
    data = load_dataset(args.dataset, args.root, args.seed)
    if args.dataset == "SBM":  # its features are noisy centroids of norm ~50: unit rows keep the logits sane
        data.x = F.normalize(data.x, dim=-1)
    train_data, val_data, test_data = split(data, args.seed)
    train_data = SparsityAwarePartitioner(world_size, method=args.method, seed=args.seed)(train_data)  # <- dist.
    local = shard(train_data).to(device)                                                                # <- dist.
    positives = distribute_pairs(train_data.edge_label_index, train_data.edge_label, train_data).to(device)  # <-
    val = distribute_pairs(val_data.edge_label_index, val_data.edge_label, train_data).to(device)      # <- dist.
    test = distribute_pairs(test_data.edge_label_index, test_data.edge_label, train_data).to(device)   # <- dist.

    torch.manual_seed(args.seed)                               # same initial parameters on every rank
    model = GraphSAGE(data.num_features, args.hidden, num_layers=2, out_channels=args.out, dropout=0.0)
    model = distribute(model).to(device)                                                                # <- dist.
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    history: dict[str, list] = {k: [] for k in ("loss", "val_auc", "test_auc", "test_hits", "epoch_s",
                                                "pair_bytes", "pair_bytes_predicted")}
    loader = None
    if args.loader == "link-neighbor":                                                                  # <- dist.
        loader = DistributedLinkNeighborLoader(local, args.num_neighbors, train_data.edge_label_index,
                                               train_data.edge_label, neg_sampling="binary",
                                               batch_size=args.batch_size, shuffle=True, seed=args.seed)
    for epoch in range(1, args.epochs + 1):
        t0 = device_clock(device)
        comm_counter().reset()
        if loader is None:
            loss, pair_bytes, predicted = full_graph_step(args, model, optimizer, local, train_data, positives, epoch)
        else:
            loss, pair_bytes, predicted = minibatch_epoch(model, optimizer, loader, device)
        epoch_s = device_clock(device) - t0

        model.eval()
        with torch.no_grad():
            z = model(local.x, local.adj)
            val_auc = global_auc(decode(*val.gather(z)), val.edge_label)                              # <- dist.
            test_score = decode(*test.gather(z))
            test_auc = global_auc(test_score, test.edge_label)
            positive = test.edge_label.bool()
            hits = global_hits_at_k(test_score[positive], test_score[~positive], args.hits_k)
        values = [loss, val_auc, test_auc, hits, epoch_s, int(global_sum(torch.tensor(pair_bytes))),
                  int(global_sum(torch.tensor(predicted)))]
        for key, value in zip(history, values, strict=True):
            history[key].append(value)
        if verbose and rank == 0 and (epoch % args.log_every == 0 or epoch == args.epochs):
            print(f"epoch {epoch:4d} loss {values[0]:.4f} val AUC {val_auc:.4f} test AUC {test_auc:.4f} "
                  f"Hits@{args.hits_k} {hits:.4f} | {epoch_s * 1e3:.1f} ms | pairs {values[5] / 1e6:.3f} MB sent")
    if verbose and rank == 0:
        print(f"final test AUC {history['test_auc'][-1]:.4f}")
    return history


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="SBM", choices=["SBM", "Cora", "CiteSeer", "PubMed"],
                   help="SBM is generated locally (no download); Planetoid sets need --root")
    p.add_argument("--root", default="data", help="Planetoid root (raw files under ROOT/NAME/raw)")
    p.add_argument("--method", default="metis", help="partitioning method")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--out", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hits-k", type=int, default=20)
    p.add_argument("--loader", default="full", choices=["full", "link-neighbor"],
                   help="full-graph steps, or mini-batches of DistributedLinkNeighborLoader")
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[10, 5])
    p.add_argument("--batch-size", type=int, default=512, help="pairs per mini-batch (on average)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    return p.parse_args(argv)


def main(argv=None) -> None:
    run_job(run, parse_args(argv))   # torchrun's job (120 s collective timeout); reports on rank 0


if __name__ == "__main__":
    main()
