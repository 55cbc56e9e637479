"""RGAT on an IGBH-shaped heterogeneous graph across processes, shaped like MLPerf's GNN benchmark:
PyG's ``HeteroConv`` with one ``GATConv`` per edge type (reverses included), 3 layers; full-graph
training by default, neighbour-sampled mini-batches (fanouts 15/10/5) with ``--minibatch``.

    torchrun --standalone --nproc-per-node 2 examples/train_rgat.py                  # full graph
    torchrun --standalone --nproc-per-node 2 examples/train_rgat.py --minibatch      # fanouts 15/10/5
    torchrun --standalone --nproc-per-node 4 examples/train_rgat.py --papers 20000 --hidden 128

The graph is ``pyg_sparsecomm.graph.datasets.igbh_like`` (paper, author, institute, fos; cites,
written_by, affiliated_to, topic and their reverses; power-law degrees; generated, no
download), sized by ``--papers``.  The model is PyG's own; ``distribute(model)`` runs it on this
rank's ``HeteroData`` shard with one halo exchange per source node type and layer (every
relation reading a type shares it).  With ``--minibatch``, ``DistributedNeighborLoader`` takes the
place of PyG's ``NeighborLoader`` on the ``HeteroData`` (``num_neighbors`` per hop for every
relation, ``input_nodes=("paper", train_mask)``); a batch's ``adj_dict`` is what the model takes
as ``edge_index_dict``, ``trim_to_layer`` trims it layer by layer (``--no-trim``: not), and its seeds
lead ``out[:batch["paper"].batch_size]``.  Evaluation is
full-graph inference on the shard.  Lines that differ from a single-process PyG script are
marked ``# <- distributed``.  Without torchrun it runs on one process.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, HeteroConv
from train_minibatch import CPU, HALO_KINDS, SAMPLING_KINDS  # comm_counter() kinds: feature rows; sampling ids

from pyg_sparsecomm import (  # <- distributed
    SparsityAwarePartitioner,
    comm_counter,
    distribute,
    distributed_loss,
    global_accuracy,
    global_sum,
    shard,
)
from pyg_sparsecomm.graph.datasets import igbh_like
from pyg_sparsecomm.launch.runtime import device_clock, run_job
from pyg_sparsecomm.loader import DistributedNeighborLoader, trim_to_layer  # <- distributed


class RGAT(torch.nn.Module):
    r"""MLPerf's RGAT: per layer :math:`h_d' = \sum_{(s, r, d)} \mathrm{GAT}_{r}(h_s, h_d)` over every
    relation into type :math:`d` (``HeteroConv(..., aggr="sum")``), ``heads`` heads of
    ``hidden // heads`` channels concatenated, ReLU between layers, then a linear head on papers."""

    def __init__(self, edge_types, in_channels: int, hidden: int, heads: int, num_classes: int,
                 num_layers: int = 3) -> None:
        super().__init__()
        widths = [in_channels] + [hidden] * num_layers
        self.convs = torch.nn.ModuleList(
            HeteroConv({et: GATConv((i, i), hidden // heads, heads=heads, add_self_loops=False) for et in edge_types},
                       aggr="sum") for i in widths[:-1])
        self.head = torch.nn.Linear(hidden, num_classes)

    def forward(self, x_dict, edge_index_dict, num_sampled_nodes_dict=None, num_sampled_edges_dict=None):
        for i, conv in enumerate(self.convs):
            if num_sampled_nodes_dict is not None:  # layer i needs the hops 0 .. L - i only (PyG's trim_to_layer)
                x_dict, edge_index_dict, _ = trim_to_layer(i, num_sampled_nodes_dict, num_sampled_edges_dict,
                                                           x_dict, edge_index_dict)
            x_dict = conv(x_dict, edge_index_dict)
            if i < len(self.convs) - 1:
                x_dict = {t: h.relu() for t, h in x_dict.items()}
        return self.head(x_dict["paper"])


def make_graph(args):
    return igbh_like(num_papers=args.papers, num_features=args.features, num_classes=args.classes, seed=args.seed)


def train_full(model, optimizer, local) -> tuple[float, int]:
    optimizer.zero_grad()
    out = model(local.x_dict, local.adj_dict)                                    # <- adj_dict
    mask = local["paper"].train_mask
    loss = distributed_loss(F.cross_entropy, out[mask], local["paper"].y[mask])   # <- distributed
    loss.backward()
    optimizer.step()
    return float(loss.detach()), 1


def train_minibatch(model, optimizer, loader, trim: bool) -> tuple[float, int]:
    total = seeds = batches = 0
    for batch in loader:                                       # collective: every rank iterates together
        optimizer.zero_grad()
        hops = (batch.num_sampled_nodes_dict, batch.num_sampled_edges_dict) if trim else ()
        out = model(batch.x_dict, batch.adj_dict, *hops)                          # <- batch.adj_dict
        s = batch["paper"].batch_size                          # this rank's seeds come first
        loss = distributed_loss(F.cross_entropy, out[:s], batch["paper"].y[:s])   # <- distributed
        loss.backward()
        optimizer.step()
        total += float(loss.detach()) * batch.global_batch_size
        seeds += batch.global_batch_size
        batches += 1
    return total / max(seeds, 1), batches


def run(args, rank: int, world_size: int, device: torch.device = CPU, verbose: bool = True) -> dict:
    data = make_graph(args)
    data = SparsityAwarePartitioner(world_size, method=args.method, seed=args.seed)(data)   # <- distributed
    local = shard(data).to(device)                                                         # <- distributed
    if verbose and rank == 0:
        mode = (f"mini-batch {args.fanouts} x {args.batch_size} seeds, trim={args.trim}" if args.minibatch
                else "full graph")
        print(f"P={world_size} RGAT {args.layers} layers hidden {args.hidden} heads {args.heads}, {mode}, "
              f"igbh_like({args.papers}) method={args.method}\n  {data.comm_stats}")
    del data                                                   # keep only this rank's share
    torch.manual_seed(args.seed)                               # the same initial parameters on every rank
    model = RGAT(local.edge_types, args.features, args.hidden, args.heads, args.classes, args.layers)
    model = distribute(model).to(device)                                                   # <- distributed
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = DistributedNeighborLoader(local, num_neighbors=args.fanouts, batch_size=args.batch_size,  # <- distr.
                                       input_nodes=("paper", local["paper"].train_mask), shuffle=True,
                                       seed=args.seed) if args.minibatch else None
    history: dict[str, list] = {k: [] for k in ("loss", "val_acc", "test_acc", "epoch_s", "halo_bytes",
                                                "sample_bytes", "batches")}
    counter = comm_counter()
    for epoch in range(1, args.epochs + 1):
        counter.reset()
        model.train()
        t0 = device_clock(device)
        if loader is not None:
            loss, batches = train_minibatch(model, optimizer, loader, args.trim)
        else:
            loss, batches = train_full(model, optimizer, local)
        epoch_s = device_clock(device) - t0
        halo, sampled = (int(v) for v in global_sum(torch.tensor([sum(counter.bytes_sent(k) for k in kinds)
                                                                   for kinds in (HALO_KINDS, SAMPLING_KINDS)])))
        model.eval()
        with torch.no_grad():
            pred = model(local.x_dict, local.adj_dict).argmax(dim=-1)   # full-graph inference on the shard
        paper = local["paper"]
        accs = [global_accuracy(pred[m], paper.y[m]) for m in (paper.val_mask, paper.test_mask)]
        for key, value in zip(history, [loss, *accs, epoch_s, halo, sampled, batches], strict=True):
            history[key].append(value)
        if verbose and rank == 0:
            print(f"epoch {epoch:3d} loss {loss:.4f} val {accs[0]:.3f} test {accs[1]:.3f} | {epoch_s:.2f} s, "
                  f"{batches} batch(es), halo {halo / 1e6:.2f} MB, sampling/plan ids {sampled / 1e6:.2f} MB")
    return history


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minibatch", action="store_true", help="neighbour-sampled mini-batches (default: full graph)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5],
                   help="neighbours sampled per hop for every relation (-1: all), with --minibatch")
    p.add_argument("--batch-size", type=int, default=256, help="seed papers per batch, with --minibatch")
    p.add_argument("--trim", action=argparse.BooleanOptionalAction, default=True,
                   help="with --minibatch: trim the batch layer by layer (trim_to_layer of x_dict and adj_dict); "
                        "--no-trim runs every layer on the whole batch")
    p.add_argument("--papers", type=int, default=4000, help="papers of the generated graph (authors as many, "
                                                             "institutes papers/50, fields of study papers/10)")
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--method", default="metis", help="partitioning method (metis, random, hypergraph, ...)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.minibatch and len(args.fanouts) != args.layers:
        p.error(f"--fanouts gives {len(args.fanouts)} hops for {args.layers} layers: give one fanout per layer")
    if args.hidden % args.heads:
        p.error(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    return args


def main(argv=None) -> None:
    start = time.perf_counter()
    rank, _ = run_job(run, parse_args(argv))   # torchrun's job; prints every rank's peak memory on rank 0
    if rank == 0:
        print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
