"""Full-graph LightGCN recommendation across processes (PyG's ``examples/lightgcn.py``) on a generated
Amazon-Book-shaped graph (no download).

    python examples/train_recsys.py
    torchrun --standalone --nproc-per-node 2 examples/train_recsys.py
    torchrun --standalone --nproc-per-node 4 examples/train_recsys.py --users 100000 --books 50000 \
        --interactions 1700000 --epochs 1

The recipe is PyG's: a ``LightGCN`` (an embedding of every node, ``LGConv`` layers, the layers' mean)
on the user-book graph made homogeneous (users first, books offset by the number of users), every
training interaction a positive pair, one random book per positive as its negative, mini-batches of
``--batch-size`` positives per step, each step propagating the whole graph, PyG's BPR loss with the
:math:`\\lambda`-term (``recommendation_loss``), Adam.  An epoch is one pass over the training pairs.

The order of the steps:

1. every rank builds the same graph (``amazon_book_like``, sized by ``--users``/``--books``/
   ``--interactions``; its held-out interactions are the test pairs) and draws the same batches and
   negatives from one generator seeded with ``--seed``: the pairs are given as global ids, the same
   on every rank, and each rank scores those whose user it owns;
2. ``partition_and_shard`` partitions the graph once (on rank 0) and gives every rank its shard;
   ``distribute(LightGCN(...))`` cuts the embedding table to the rows of the nodes the rank owns at
   the first call on the shard (no rank holds the whole table);
3. evaluation is ``recommend(..., exclude=training pairs)``: the 20 best books of every user over the
   books of all ranks, the training interactions excluded (each rank sends its users' embeddings to
   the ranks owning books and gets back their best candidates, never a score matrix), then precision@20
   and recall@20 of the test pairs through the distributed metrics (sums over all ranks' users).

Every epoch prints the loss, precision@20 and recall@20 (whole-graph values, the same on every rank),
and the bytes all ranks sent (``comm_counter``): the ``LGConv`` layers' halo (forward), the pairs'
exchange (forward: the books' or users' rows of pairs owned elsewhere, the pairs' plans and the
all-reduce that gives every rank every pair's score, as PyG's loop expects), all gradients sent back
(backward) and the top-:math:`k` exchange of the evaluation.  Every rank's peak
memory is printed at the end.  Lines that differ from a single-process PyG script are marked
``# <- distributed``.  Without torchrun it runs on one process.
"""
import argparse

import torch
from torch_geometric.nn import LightGCN

from pyg_sparsecomm import comm_counter, distribute, global_sum, partition_and_shard
from pyg_sparsecomm.graph.datasets import amazon_book_like
from pyg_sparsecomm.launch.runtime import device_clock, run_job
from pyg_sparsecomm.link import DistributedLinkPredPrecision, DistributedLinkPredRecall

CPU = torch.device("cpu")
#: the kinds of ``comm_counter`` the top-k exchange of ``recommend`` counts under
TOPK_KINDS = ("topk_users", "topk_user_ids", "topk_scores", "topk_ids")
#: the kinds a training step's forward counts under: the layers' halo and the pairs' rows (``"halo"``),
#: the pairs' plans, the all-reduce that gives every rank all the pairs' scores
FORWARD_KINDS = ("halo", "pair_plan", "pair_plan_counts", "replicated_rows")


def make_graph(args):
    """The homogeneous user-book graph (users ``0..U-1``, books ``U..U+B-1``), its training pairs
    ``(user, book)`` and its test pairs, the same on every rank."""
    hetero = amazon_book_like(args.users, args.books, args.interactions, seed=args.seed)
    data = hetero.to_homogeneous()
    test = data.edge_label_index
    del data.node_type, data.edge_type, data.edge_label_index
    data.num_nodes = args.users + args.books
    train = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    return data, train, test


def batches(train: torch.Tensor, args, generator: torch.Generator) -> list[torch.Tensor]:
    """One epoch of PyG's mini-batches: ``[2, 2b]`` positives then their negatives ``[user, random
    book]``, from ``generator`` (the same on every rank: the pairs are global ids)."""
    out = []
    for index in torch.randperm(train.size(1), generator=generator).split(args.batch_size):
        pos = train[:, index]
        neg = torch.stack([pos[0], torch.randint(args.users, args.users + args.books, (index.numel(),),
                                                 generator=generator)])
        out.append(torch.cat([pos, neg], dim=1))
    return out


class LayerBytes:
    """Bytes the ``LGConv`` layers' halo exchanges send forward on this rank (``comm_counter()``'s
    ``"halo"`` kind while a layer runs), summed since the last :meth:`take`.

    Args:
        layers (torch.nn.ModuleList): the model's ``convs``.
    """

    def __init__(self, layers: torch.nn.ModuleList) -> None:
        self.sent, self._start = 0, 0
        for layer in layers:
            layer.register_forward_pre_hook(self._before)
            layer.register_forward_hook(self._after)

    def _before(self, module, inputs) -> None:
        self._start = comm_counter().bytes_sent("halo")

    def _after(self, module, inputs, output) -> None:
        self.sent += comm_counter().bytes_sent("halo") - self._start

    def take(self) -> int:
        sent, self.sent = self.sent, 0
        return sent


def train_epoch(model, optimizer, edge_index, steps: list[torch.Tensor], lambda_reg: float) -> float:
    """One pass over the training pairs; returns PyG's mean loss over the positives."""
    model.train()
    total_loss = total_examples = 0.0
    for edge_label_index in steps:
        optimizer.zero_grad()
        pos_rank, neg_rank = model(edge_index, edge_label_index).chunk(2)
        loss = model.recommendation_loss(pos_rank, neg_rank, node_id=edge_label_index.unique(),
                                         lambda_reg=lambda_reg)
        loss.backward()
        optimizer.step()
        size = edge_label_index.size(1) // 2
        total_loss += float(loss.detach()) * size
        total_examples += size
    return total_loss / max(total_examples, 1)


@torch.no_grad()
def evaluate(model, local, args, train: torch.Tensor, test: torch.Tensor, k: int) -> tuple[float, float]:
    """Precision@k and recall@k of the test pairs over all users, training pairs excluded."""
    model.eval()
    users, books = torch.arange(args.users), torch.arange(args.users, args.users + args.books)
    top = model.recommend(local.edge_index, src_index=users, dst_index=books, k=k, exclude=train)  # <- exclude
    owned_users = local.n_id[local.n_id < args.users].sort().values.cpu()  # top's rows: these users, in order
    mine = torch.isin(test[0], owned_users)                                                       # <- dist.
    truth = torch.stack([torch.searchsorted(owned_users, test[0, mine]), test[1, mine]]).to(top.device)
    metrics = [DistributedLinkPredPrecision(k), DistributedLinkPredRecall(k)]                     # <- dist.
    for metric in metrics:
        metric.update(top, truth)
    precision, recall = (float(metric.compute()) for metric in metrics)
    return precision, recall


def bytes_by_kind(kinds) -> int:
    """Bytes this rank sent under ``kinds`` since the counter's last reset."""
    return sum(comm_counter().bytes_sent(kind) for kind in kinds)


def run(args, rank: int, world_size: int, device: torch.device = CPU, verbose: bool = True) -> dict:
    data, train, test = make_graph(args)
    torch.manual_seed(args.seed)                                 # the same initial table on every rank
    model = distribute(LightGCN(data.num_nodes, args.dim, num_layers=args.layers)).to(device)       # <- dist.
    local = partition_and_shard(data, method=args.method, seed=args.seed).to(device)               # <- dist.
    if verbose and rank == 0:
        print(f"P={world_size} amazon_book_like({args.users}, {args.books}): {train.size(1)} training and "
              f"{test.size(1)} test interactions, method={args.method}")
    del data                                                     # keep only this rank's shard
    layer_bytes = LayerBytes(model.convs)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)         # the same batches on every rank
    history: dict[str, list] = {k: [] for k in ("loss", "precision", "recall", "epoch_s", "layer_bytes",
                                                "pair_bytes", "grad_bytes", "topk_bytes")}
    for epoch in range(1, args.epochs + 1):
        steps = batches(train, args, generator)
        comm_counter().reset()
        layer_bytes.take()
        t0 = device_clock(device)
        loss = train_epoch(model, optimizer, local.edge_index, steps, args.lambda_reg)
        epoch_s = device_clock(device) - t0
        layers = layer_bytes.take()
        sent = [layers, bytes_by_kind(FORWARD_KINDS) - layers,
                bytes_by_kind(("halo_grad",))]
        comm_counter().reset()
        precision, recall = evaluate(model, local, args, train, test, args.k)
        sent.append(bytes_by_kind(TOPK_KINDS))
        sent = [int(v) for v in global_sum(torch.tensor(sent))]
        for key, value in zip(history, [loss, precision, recall, epoch_s, *sent], strict=True):
            history[key].append(value)
        if verbose and rank == 0 and (epoch % args.log_every == 0 or epoch == args.epochs):
            print(f"Epoch {epoch:03d} loss {loss:.6f} precision@{args.k} {precision:.6f} recall@{args.k} "
                  f"{recall:.6f} | {epoch_s * 1e3:.0f} ms, {len(steps)} steps | MB sent: layers' halo "
                  f"{sent[0] / 1e6:.2f}, pairs {sent[1] / 1e6:.2f}, gradients {sent[2] / 1e6:.2f}, "
                  f"top-{args.k} {sent[3] / 1e6:.2f}")
    return history


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=5000, help="users of the generated graph")
    p.add_argument("--books", type=int, default=8000, help="books of the generated graph")
    p.add_argument("--interactions", type=int, default=100000,
                   help="interactions drawn (duplicates removed; a fifth held out for testing)")
    p.add_argument("--dim", type=int, default=64, help="embedding dimensions")
    p.add_argument("--layers", type=int, default=2, help="LGConv layers")
    p.add_argument("--batch-size", type=int, default=8192, help="positive training pairs per step")
    p.add_argument("--lambda-reg", type=float, default=1e-4, help="the BPR loss's L2 weight (PyG's lambda_reg)")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--k", type=int, default=20, help="recommendations per user scored")
    p.add_argument("--method", default="metis", help="partitioning method")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=1)
    return p.parse_args(argv)


def main(argv=None) -> None:
    run_job(run, parse_args(argv))   # torchrun's job (120 s collective timeout); prints every rank's peak memory


if __name__ == "__main__":
    main()
