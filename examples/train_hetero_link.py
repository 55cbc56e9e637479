"""Heterogeneous link regression across processes: the ratings of ('user', 'rates', 'movie') on a
generated MovieLens-shaped graph (no download), with PyG's ``examples/hetero/hetero_link_pred.py``
model: a ``to_hetero(GNNEncoder)`` of two ``SAGEConv`` layers and an MLP ``EdgeDecoder`` of the pairs'
user and movie embeddings, trained with the (optionally weighted) MSE of the ratings.

    torchrun --standalone --nproc-per-node 2 examples/train_hetero_link.py
    torchrun --standalone --nproc-per-node 2 examples/train_hetero_link.py --loader link-neighbor --fanouts 10 5
    torchrun --standalone --nproc-per-node 4 examples/train_hetero_link.py --users 2000 --movies 1000 --weighted-loss

The order of the steps:

1. every rank builds the same graph (``movielens_like``, sized by ``--users``/``--movies``; users get
   one-hot features, users x users of them, so a few thousand users at most, and a reverse
   ``('movie', 'rev_rates', 'user')`` relation, as in PyG's script) and splits it with PyG's
   ``RandomLinkSplit`` after seeding torch and Python's ``random`` alike, so every rank holds the
   same split;
2. ``partition_and_shard((train_data, val_data, test_data))`` partitions the training graph once and
   shards every split with that partition: ``edge_index_dict`` is the shard's adjacency and the rated
   pairs' ``edge_label_index`` the pairs whose user this rank owns (``row, col = edge_label_index``
   index ``z_dict`` as PyG's tensor does, the movies owned elsewhere brought by the pairs' exchange);
3. by default every training step is the whole graph's (as PyG's script);
   with ``--loader link-neighbor`` the steps are mini-batches of ``DistributedLinkNeighborLoader``
   (PyG's ``LinkNeighborLoader`` on ``HeteroData``: ``edge_label_index=(edge_type, pairs)``, the
   ratings as ``edge_label``, no negatives, ``--fanouts`` per hop for every relation).  The loader
   takes the training pairs of the whole graph, the same on every rank: they are the unsharded
   split's ``train_data['user', 'rates', 'movie'].edge_label_index`` of step 1, kept before
   sharding (the loader checks that every rank passed the same pairs).

The loss and the train/validation/test RMSE are whole-graph values (the same on every rank), the
pairs' bytes those the decoder's exchanges sent over all ranks, and every rank's peak memory is
printed at the end.  Lines that differ from a single-process PyG script are marked ``# <- distributed``.
Without torchrun it runs on one process.
"""
import argparse
import random

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch.nn import Linear
from torch_geometric.nn import SAGEConv, to_hetero

from pyg_sparsecomm import comm_counter, distribute, distributed_loss, global_sum, partition_and_shard
from pyg_sparsecomm.graph.datasets import movielens_like
from pyg_sparsecomm.launch.runtime import device_clock, run_job
from pyg_sparsecomm.loader import DistributedLinkNeighborLoader

RATES, REV_RATES = ("user", "rates", "movie"), ("movie", "rev_rates", "user")
CPU = torch.device("cpu")


def make_splits(args):
    """PyG's script's graph and ``RandomLinkSplit``, the same on every rank (torch and Python's ``random``
    seeded with ``args.seed`` before the split)."""
    data = movielens_like(args.users, args.movies, args.features, args.avg_ratings, seed=args.seed)
    data["user"].x = torch.eye(data["user"].num_nodes)  # PyG's script: one-hot user features
    del data["user"].num_nodes
    data = T.ToUndirected()(data)                       # the reverse relation for message passing
    del data[REV_RATES].edge_label                      # its "reverse" labels are no targets
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    return T.RandomLinkSplit(num_val=0.1, num_test=0.1, neg_sampling_ratio=0.0, edge_types=[RATES],
                             rev_edge_types=[REV_RATES])(data)


def weighted_mse_loss(pred, target, weight=None):
    weight = 1. if weight is None else weight[target].to(pred.dtype)
    return (weight * (pred - target.to(pred.dtype)).pow(2)).mean()


class GNNEncoder(torch.nn.Module):
    def __init__(self, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden_channels)
        self.conv2 = SAGEConv((-1, -1), out_channels)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.conv2(x, edge_index)


class EdgeDecoder(torch.nn.Module):
    def __init__(self, hidden_channels):
        super().__init__()
        self.lin1 = Linear(2 * hidden_channels, hidden_channels)
        self.lin2 = Linear(hidden_channels, 1)

    def forward(self, z_dict, edge_label_index):
        row, col = edge_label_index                     # a shard's or a batch's pairs unpack as PyG's
        z = torch.cat([z_dict["user"][row], z_dict["movie"][col]], dim=-1)
        return self.lin2(self.lin1(z).relu()).view(-1)


class Model(torch.nn.Module):
    def __init__(self, hidden_channels, metadata):
        super().__init__()
        self.encoder = to_hetero(GNNEncoder(hidden_channels, hidden_channels), metadata, aggr="sum")
        self.decoder = EdgeDecoder(hidden_channels)

    def forward(self, x_dict, edge_index_dict, edge_label_index):
        z_dict = self.encoder(x_dict, edge_index_dict)
        return self.decoder(z_dict, edge_label_index)


class PairBytes:
    """Bytes the decoder's exchanges of the pairs' rows send on this rank (``comm_counter()``'s
    ``"halo"`` kind while the decoder runs forward), summed since the last :meth:`take`.

    Args:
        decoder (torch.nn.Module): the module indexing ``z_dict`` with the pairs.
    """

    def __init__(self, decoder: torch.nn.Module) -> None:
        self.sent, self._start = 0, 0
        decoder.register_forward_pre_hook(self._before)
        decoder.register_forward_hook(self._after)

    def _before(self, module, inputs) -> None:
        self._start = comm_counter().bytes_sent("halo")

    def _after(self, module, inputs, output) -> None:
        self.sent += comm_counter().bytes_sent("halo") - self._start

    def take(self) -> int:
        sent, self.sent = self.sent, 0
        return sent


def train_step(model, optimizer, x_dict, edge_index_dict, store, weight) -> float:
    """One step on ``store``'s pairs (a shard's or a batch's ``[RATES]``); returns the whole-graph loss."""
    optimizer.zero_grad()
    pred = model(x_dict, edge_index_dict, store.edge_label_index)
    target = store.edge_label.to(pred.device)  # a batch's labels stay on the CPU, as PyG's loader gives them
    loss = distributed_loss(weighted_mse_loss, pred, target, weight=weight)                              # <- dist.
    loss.backward()
    optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def rmse(model, local) -> float:
    """The RMSE of the clamped predictions over the split's pairs of all ranks (PyG's ``test``)."""
    pred = model(local.x_dict, local.edge_index_dict, local[RATES].edge_label_index).clamp(min=0, max=5)
    return float(distributed_loss(F.mse_loss, pred, local[RATES].edge_label.float()).sqrt())            # <- dist.


def run(args, rank: int, world_size: int, device: torch.device = CPU, verbose: bool = True) -> dict:
    train_data, val_data, test_data = make_splits(args)
    pairs, label = train_data[RATES].edge_label_index, train_data[RATES].edge_label  # whole, on every rank
    weight = None
    if args.weighted_loss:  # PyG's weights: few ratings of 0 and 1
        weight = torch.bincount(label)
        weight = (weight.max() / weight).to(device)
    metadata = train_data.metadata()
    splits = partition_and_shard((train_data, val_data, test_data), method=args.method, seed=args.seed)  # <- dist.
    train_local, val_local, test_local = (split.to(device) for split in splits)
    if verbose and rank == 0:
        mode = f"link-neighbor {args.fanouts} x {args.batch_size} pairs" if args.loader == "link-neighbor" else "full"
        print(f"P={world_size} movielens_like({args.users}, {args.movies}): {pairs.size(1)} training pairs, "
              f"{mode}, method={args.method}")
    del train_data, val_data, test_data                        # keep only this rank's shards
    loader = None
    if args.loader == "link-neighbor":                                                                  # <- dist.
        loader = DistributedLinkNeighborLoader(train_local, args.fanouts, (RATES, pairs), label,
                                               batch_size=args.batch_size, shuffle=True, seed=args.seed)
    torch.manual_seed(args.seed)                                # the same initial parameters on every rank
    model = distribute(Model(args.hidden, metadata)).to(device)                                         # <- dist.
    pair_bytes = PairBytes(model.decoder)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    history: dict[str, list] = {k: [] for k in ("loss", "train_rmse", "val_rmse", "test_rmse", "epoch_s",
                                                "pair_bytes", "step_loss")}
    for epoch in range(1, args.epochs + 1):
        model.train()
        t0 = device_clock(device)
        if loader is None:
            steps = [train_step(model, optimizer, train_local.x_dict, train_local.edge_index_dict,
                                train_local[RATES], weight)]
        else:
            steps = [train_step(model, optimizer, batch.x_dict, batch.adj_dict, batch[RATES], weight)  # <- adj
                     for batch in loader]                       # collective: every rank iterates together
        epoch_s = device_clock(device) - t0
        sent = int(global_sum(torch.tensor(pair_bytes.take())))
        model.eval()
        rmses = [rmse(model, local) for local in (train_local, val_local, test_local)]
        pair_bytes.take()                                       # the evaluation's exchanges are not training's
        history["step_loss"].extend(steps)
        for key, value in zip(history, [sum(steps) / max(len(steps), 1), *rmses, epoch_s, sent], strict=False):
            history[key].append(value)
        if verbose and rank == 0 and (epoch % args.log_every == 0 or epoch == args.epochs):
            print(f"epoch {epoch:4d} loss {history['loss'][-1]:.4f} train RMSE {rmses[0]:.4f} val RMSE "
                  f"{rmses[1]:.4f} test RMSE {rmses[2]:.4f} | {epoch_s * 1e3:.1f} ms, {len(steps)} step(s) | "
                  f"pairs {sent / 1e6:.3f} MB sent")
    return history


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=200, help="users of the generated graph (one-hot features)")
    p.add_argument("--movies", type=int, default=150, help="movies of the generated graph")
    p.add_argument("--features", type=int, default=16, help="width of the movies' features")
    p.add_argument("--avg-ratings", type=float, default=8.0, help="ratings drawn per user")
    p.add_argument("--loader", default="full", choices=["full", "link-neighbor"],
                   help="full-graph steps, or mini-batches of DistributedLinkNeighborLoader")
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 5],
                   help="neighbours sampled per hop for every relation (-1: all), with --loader link-neighbor")
    p.add_argument("--batch-size", type=int, default=256, help="training pairs per mini-batch (on average)")
    p.add_argument("--weighted-loss", action="store_true", help="PyG's weighted MSE (rare ratings weigh more)")
    p.add_argument("--method", default="metis", help="partitioning method")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    args = p.parse_args(argv)
    if args.loader == "link-neighbor" and len(args.fanouts) != 2:
        p.error(f"--fanouts gives {len(args.fanouts)} hops for the encoder's 2 layers: give one fanout per layer")
    return args


def main(argv=None) -> None:
    run_job(run, parse_args(argv))   # torchrun's job (120 s collective timeout); prints every rank's peak memory


if __name__ == "__main__":
    main()
