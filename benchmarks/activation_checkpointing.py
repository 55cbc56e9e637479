"""Memory per rank of a 28-layer DeepGCN (PyG's ogbn_proteins_deepgcn.py: DeepGCNLayer(GENConv,
LayerNorm, ReLU, block="res+")) under distribute(), with and without ``ckpt_grad=True``.

    python benchmarks/activation_checkpointing.py            # SBM graph, 3,000 nodes, P = 1, 2, 4
    python benchmarks/activation_checkpointing.py --write    # + a RESULTS.md section

Per rank and configuration, one training step (forward, distributed_loss, backward):

* ``saved``: the bytes autograd holds for backward at the end of the forward (every distinct
  storage packed by ``torch.autograd.graph.saved_tensors_hooks``): the activations checkpointing
  trades for recomputation, exact and independent of the machine's load;
* ``peak``: the rank's resident set growth over its first step (Linux ``VmHWM`` after
  ``/proc/self/clear_refs``, minus the resident set before it; each configuration in fresh
  processes): what the host really needed, the allocator's slack and the first call's plans
  included;
* ``time``: the step's wall time (2 cores shared: only the ratio within one run means something).
"""
import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as Fn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import markdown_table, print_table, sparse_sbm_graph, with_features, write_table_section  # noqa: E402

LAYERS, HIDDEN, CLASSES = 28, 64, 8


class DeeperGCN(torch.nn.Module):
    """PyG's ogbn_proteins_deepgcn.py model (no edge features)."""

    def __init__(self, in_channels: int, ckpt_grad: bool) -> None:
        from torch_geometric.nn import GENConv
        from torch_geometric.nn.models import DeepGCNLayer
        super().__init__()
        self.node_encoder = torch.nn.Linear(in_channels, HIDDEN)
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            conv = GENConv(HIDDEN, HIDDEN, aggr="softmax", t=1.0, learn_t=True, num_layers=2, norm="layer")
            self.layers.append(DeepGCNLayer(conv, torch.nn.LayerNorm(HIDDEN), torch.nn.ReLU(inplace=True),
                                            block="res+", dropout=0.0, ckpt_grad=ckpt_grad))
        self.lin = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        x = self.node_encoder(x)
        x = self.layers[0].conv(x, edge_index)
        for layer in self.layers[1:]:
            x = layer(x, edge_index)
        return self.lin(self.layers[0].act(self.layers[0].norm(x)))


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _step(model, local) -> tuple[int, float]:
    """Saved bytes and wall time of one training step."""
    from pyg_sparsecomm import distributed_loss
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(local.x, local.adj)
    loss = distributed_loss(Fn.cross_entropy, out[local.train_mask], local.y[local.train_mask])
    loss.backward()
    return sum(storages.values()), time.perf_counter() - start


def _worker(rank, world_size, num_nodes, ckpt):
    """One configuration in fresh processes: the first step's resident growth, the second's saved
    bytes and time (after the first call's plans and checks)."""
    from pyg_sparsecomm import SparsityAwarePartitioner, distribute, shard
    torch.set_num_threads(1)
    data = with_features(sparse_sbm_graph(num_nodes, 16, 10.0, 0.8, seed=0), num_classes=CLASSES)
    data.train_mask[:] = True
    local = shard(SparsityAwarePartitioner(world_size, method="metis", seed=0)(data))
    torch.manual_seed(0)
    model = distribute(DeeperGCN(data.num_features, ckpt_grad=ckpt))
    model.train()
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    before = _status("VmRSS")
    _step(model, local)
    peak = _status("VmHWM") - before
    model.zero_grad()
    saved, seconds = _step(model, local)
    return saved, peak, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3_000)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--write", action="store_true", help="write the RESULTS.md section")
    args = parser.parse_args()
    from pyg_sparsecomm.memory import format_bytes
    from pyg_sparsecomm.testing import launch
    headers = ["P", "rank", "saved", "saved ckpt", "saved ratio", "peak", "peak ckpt", "peak saved", "time",
               "time ckpt"]
    rows = []
    for world_size in args.ranks:
        plain = launch(_worker, world_size, args.nodes, False, timeout=3600)
        checkpointed = launch(_worker, world_size, args.nodes, True, timeout=3600)
        for rank, ((s0, p0, t0), (s1, p1, t1)) in enumerate(zip(plain, checkpointed, strict=True)):
            rows.append([world_size, rank, format_bytes(s0), format_bytes(s1), f"{s1 / s0:.3f}", format_bytes(p0),
                         format_bytes(p1), format_bytes(p0 - p1), f"{t0:.2f} s", f"{t1:.2f} s"])
    print_table(headers, rows)
    if args.write:
        notes = (f"\n28-layer DeepGCN (GENConv softmax aggregation, LayerNorm, ReLU, res+; hidden {HIDDEN}) on an "
                 f"SBM graph of {args.nodes} nodes (degree 10, 64 features), one training step per rank, "
                 f"`ckpt_grad=False` and `True` in fresh processes (reentrant checkpoints; gradients equal to "
                 f"one process: tests/nn/test_checkpointing.py). `saved`: bytes autograd holds for backward after the "
                 f"forward (exact); `peak`: resident growth over the first step (allocator slack included); times "
                 f"under load on 2 shared cores (load at the run: {Path('/proc/loadavg').read_text().split()[0]}): "
                 f"compare only within a row.")
        write_table_section("activation_checkpointing", "Activation checkpointing: memory per rank",
                            "activation_checkpointing.py --write", notes, headers, rows)
        print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
