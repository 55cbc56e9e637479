"""Graphs, models and one rank's training run for ``halo_compression.py`` (issue #16, part 4).

Every number a run returns is this rank's own (bytes it sent, its share of the loss, its
correct predictions); the caller sums over ranks, so a run issues no collectives beyond the
model's exchanges, the loss count and the gradient sync.
"""
import time

import torch
import torch.nn.functional as F
from _common import load_graph, sparse_sbm_edges
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT, GraphSAGE

from pyg_sparsecomm import DistributedGCNConv, comm_counter, distribute, distributed_loss, sync_gradients
from pyg_sparsecomm.comm import seed_rounding

HIDDEN = 64
DROPOUT = 0.5
LR, WEIGHT_DECAY = 0.01, 5e-4
HALO_KINDS = ("halo", "halo_grad")

#: the options compared, as keyword arguments of DistributedGCNConv / distribute
OPTIONS = {
    "exact": {},
    "bf16": {"halo_precision": "bf16"},
    "fp16": {"halo_precision": "fp16"},
    "int8": {"halo_precision": "int8"},
    "int4": {"halo_precision": "int4"},
    "stale": {"staleness": 1},
    "stale+smooth0.9": {"staleness": 1, "stale_smoothing": 0.9},
    "int8+stale": {"halo_precision": "int8", "staleness": 1},
}
MODELS = ("GCN", "GraphSAGE", "GAT")
SBM_NAME = "SBM-100k"


# graphs -----------------------------------------------------------------------------------
def learnable_sbm(num_nodes: int = 100_000, num_classes: int = 8, degree: float = 8.0, p_in: float = 0.5,
                  num_features: int = 64, feature_noise: float = 6.0, seed: int = 0) -> Data:
    """A sparse SBM (``_common.sparse_sbm_edges``, O(E) memory) whose blocks are the classes and
    whose features are a noisy class centroid, so that a GCN learns it through the graph.
    Features are scaled to unit noise (``centroid / feature_noise + N(0, 1)``): at the noise's own
    scale (std 6) GAT's attention logits saturate and it stays at chance (13.9 % after 100 epochs
    against 12.5 %), while scaled it learns like the other models.
    Masks: 1 % train, 5 % validation, the remaining 94 % test (random, fixed ``seed``)."""
    edge_index, y = sparse_sbm_edges(num_nodes, num_classes, degree, p_in, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    centroids = torch.randn(num_classes, num_features, generator=gen)
    x = (centroids[y] + feature_noise * torch.randn(num_nodes, num_features, generator=gen)) / feature_noise
    perm = torch.randperm(num_nodes, generator=gen)
    n_train, n_val = num_nodes // 100, num_nodes // 20
    masks = {}
    for name, idx in (("train_mask", perm[:n_train]), ("val_mask", perm[n_train:n_train + n_val]),
                      ("test_mask", perm[n_train + n_val:])):
        masks[name] = torch.zeros(num_nodes, dtype=torch.bool)
        masks[name][idx] = True
    return Data(x=x, y=y, edge_index=edge_index, num_nodes=num_nodes, **masks)


def graph(name: str) -> Data:
    """Cora / CiteSeer (Planetoid split, raw files copied to a temp root) or ``SBM-100k``."""
    if name == SBM_NAME:
        return learnable_sbm()
    return load_graph(name)


# models -----------------------------------------------------------------------------------
class GCNNet(torch.nn.Module):
    """Kipf & Welling's 2-layer GCN on :class:`DistributedGCNConv` (dropout on both inputs)."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, **options) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList([DistributedGCNConv(in_channels, hidden, cached=True, **options),
                                          DistributedGCNConv(hidden, out_channels, cached=True, **options)])

    def forward(self, x, adj):
        x = F.dropout(x, DROPOUT, self.training)
        x = F.dropout(self.convs[0](x, adj).relu(), DROPOUT, self.training)
        return self.convs[1](x, adj)


def build_model(name: str, in_channels: int, out_channels: int, options: dict) -> torch.nn.Module:
    """``GCN``: :class:`GCNNet`; ``GraphSAGE`` / ``GAT`` (heads = 1): PyG's models through
    ``distribute``.  Hidden width 64, 2 layers, dropout 0.5."""
    if name == "GCN":
        return GCNNet(in_channels, HIDDEN, out_channels, **options)
    kwargs = {"heads": 1} if name == "GAT" else {}
    cls = {"GraphSAGE": GraphSAGE, "GAT": GAT}[name]
    return distribute(cls(in_channels, HIDDEN, num_layers=2, out_channels=out_channels, dropout=DROPOUT,
                          **kwargs), **options)


# one run ----------------------------------------------------------------------------------
class LayerBytes:
    """Forward halo bytes this rank sent inside each layer, while attached (module hooks)."""

    def __init__(self, layers) -> None:
        self.bytes = [0] * len(layers)
        self.handles = []
        for i, layer in enumerate(layers):
            self.handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: self._mark(i, -1)))
            self.handles.append(layer.register_forward_hook(lambda m, a, o, i=i: self._mark(i, 1)))

    def _mark(self, i: int, sign: int) -> None:
        self.bytes[i] += sign * comm_counter().bytes_sent("halo")

    def detach(self) -> list[int]:
        for h in self.handles:
            h.remove()
        return self.bytes


class Run:
    """Full-batch training of one model on one rank's shard, epoch by epoch."""

    def __init__(self, model_name: str, local: Data, num_classes: int, options: dict, seed: int) -> None:
        torch.manual_seed(seed)  # the same initial parameters on every rank
        seed_rounding()  # each run restarts its rounding draws, as if alone in its process
        self.local = local
        self.model = build_model(model_name, local.x.size(1), num_classes, options)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
        self.history = {k: [] for k in ("loss", "epoch_s", "comm_s", "bytes")}
        self.evals = {"epoch": [], "correct": [], "total": []}
        self.layer_bytes: list[int] = []

    def epoch(self, count_layers: bool = False) -> None:
        """One training epoch (forward, backward, gradient sync, Adam step), timed and counted."""
        local, counter = self.local, comm_counter()
        hooks = LayerBytes(self.model.convs) if count_layers else None
        counter.reset()
        self.model.train()
        t0 = time.perf_counter()
        self.opt.zero_grad()
        out = self.model(local.x, local.adj)
        loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])
        loss.backward()
        sync_gradients(self.model)
        self.opt.step()
        self.history["epoch_s"].append(time.perf_counter() - t0)
        self.history["comm_s"].append(counter.seconds)
        self.history["bytes"].append(sum(counter.bytes_sent(k) for k in HALO_KINDS))
        self.history["loss"].append(float(loss.detach()))
        if hooks is not None:
            self.layer_bytes = hooks.detach()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> None:
        """This rank's correct predictions and row counts on the train, val and test masks."""
        self.model.eval()
        pred = self.model(self.local.x, self.local.adj).argmax(dim=-1)
        masks = (self.local.train_mask, self.local.val_mask, self.local.test_mask)
        self.evals["epoch"].append(epoch)
        self.evals["correct"].append([int((pred[m] == self.local.y[m]).sum()) for m in masks])
        self.evals["total"].append([int(m.sum()) for m in masks])

    def train(self, epochs: int, eval_every: int) -> dict:
        """``epochs`` epochs, evaluating every ``eval_every`` and after the last; the per-layer
        bytes are counted in epoch 3 (epoch 1 of a stale run exchanges synchronously)."""
        for e in range(1, epochs + 1):
            self.epoch(count_layers=e == min(3, epochs))
            if e % eval_every == 0 or e == epochs:
                self.evaluate(e)
        return {**self.history, "evals": self.evals, "layer_bytes": self.layer_bytes,
                "rows_sent": int(sum(self.local.adj.plan.send_counts))}
