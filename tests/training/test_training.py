"""Whole training runs: the example on P ranks equals single-process PyG, epoch by epoch."""
import argparse
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from reference import reference_epoch
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import NodeDropout, load_shard
from pyg_sparsecomm.comm import ProcessGrid
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.testing import launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import train_gcn  # noqa: E402


class ReferenceGCN(torch.nn.Module):
    """The example's model written with plain PyG GCNConv, for one process."""

    def __init__(self, in_channels, hidden, out_channels, dropout=0.0):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden, cached=True)
        self.conv2 = GCNConv(hidden, out_channels, cached=True)
        self.drops = torch.nn.ModuleList([NodeDropout(dropout, seed=i) for i in range(2)])

    def forward(self, x, edge_index):
        x = self.conv1(self.drops[0](x), edge_index).relu()
        return self.conv2(self.drops[1](x), edge_index)


def reference_history(args):
    """Single-process losses and test accuracies for the example's ``args``; the partition, algorithm
    and world size do not enter, so a run is computed once and shared by the tests that compare with it."""
    return _reference_history(args.dataset, args.root, args.seed, args.hidden, args.dropout, args.exact_dropout,
                              args.lr, args.weight_decay, args.epochs)


@functools.cache
def _reference_history(dataset, root, seed, hidden, dropout, exact_dropout, lr, weight_decay, epochs):
    args = argparse.Namespace(dataset=dataset, root=root, seed=seed, hidden=hidden, dropout=dropout,
                              exact_dropout=exact_dropout, lr=lr, weight_decay=weight_decay, epochs=epochs)
    torch.manual_seed(args.seed)
    data = load_dataset(args.dataset, args.root, args.seed)
    assert args.exact_dropout or args.dropout == 0, "only layout-independent dropout can be compared"
    model = ReferenceGCN(data.num_features, args.hidden, int(data.y.max()) + 1, args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    losses, test_acc = [], []
    for _ in range(args.epochs):
        losses.append(reference_epoch(model, opt, data))
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(-1)
        test_acc.append(float((pred[data.test_mask] == data.y[data.test_mask]).float().mean()))
    return tuple(losses), tuple(test_acc)


def _run(rank, world_size, argv):
    return train_gcn.run(train_gcn.parse_args(argv), rank, world_size, verbose=False)


@pytest.mark.parametrize("world_size,method,algorithm,replication", [
    (4, "metis", "1d", 1), (3, "random", "oblivious", 1), (2, "hypergraph", "1d", 1),
    (4, "metis", "1.5d", 2), (4, "random", "1.5d_oblivious", 2)])
def test_cora_training_equals_single_process(planetoid_root, world_size, method, algorithm, replication):
    # No dropout (its random masks differ between layouts) and a larger step, so that
    # 30 epochs reach the usual ~80 % on Cora.
    argv = ["--dataset", "Cora", "--root", planetoid_root, "--epochs", "30", "--dropout", "0", "--lr", "0.1",
            "--method", method, "--algorithm", algorithm, "--replication", str(replication)]
    ref_loss, ref_acc = reference_history(train_gcn.parse_args(argv))
    hist = launch(_run, world_size, argv)
    for h in hist[1:]:  # every rank reports the same global numbers
        assert h["loss"] == hist[0]["loss"] and h["test_acc"] == hist[0]["test_acc"]
    torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_loss), rtol=1e-4, atol=1e-6)
    assert ref_loss[-1] < 0.85 * ref_loss[0]  # it really trained
    assert abs(hist[0]["test_acc"][-1] - ref_acc[-1]) <= 0.002
    assert hist[0]["test_acc"][-1] >= 0.77
    assert all(b > 0 for b in hist[0]["bytes"])


@pytest.mark.parametrize("method", ["contiguous", "metis+vb", "hypergraph+vb", "stochastic_hypergraph"])
def test_cora_training_with_every_partitioner(planetoid_root, method):
    """The methods the test above leaves out: the loss curve still equals GCNConv's."""
    argv = ["--dataset", "Cora", "--root", planetoid_root, "--epochs", "8", "--dropout", "0", "--lr", "0.1",
            "--method", method]
    ref_loss, _ = reference_history(train_gcn.parse_args(argv))
    hist = launch(_run, 3, argv)
    torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_loss), rtol=1e-4, atol=1e-6)
    assert ref_loss[-1] < 0.9 * ref_loss[0]


def test_training_with_dropout_equals_single_process(planetoid_root):
    """NodeDropout draws the same masks in every layout: dropout 0.5 runs match exactly too."""
    argv = ["--dataset", "Cora", "--root", planetoid_root, "--epochs", "20", "--dropout", "0.5",
            "--exact-dropout", "--method", "random"]
    ref_loss, ref_acc = reference_history(train_gcn.parse_args(argv))
    hist = launch(_run, 3, argv)
    torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_loss), rtol=1e-4, atol=1e-6)
    assert abs(hist[0]["test_acc"][-1] - ref_acc[-1]) <= 0.002
    assert len(set(ref_loss)) == len(ref_loss)  # dropout really changed the masks every epoch


def test_citeseer_two_ranks(planetoid_root):
    argv = ["--dataset", "CiteSeer", "--root", planetoid_root, "--epochs", "10", "--dropout", "0"]
    ref_loss, _ = reference_history(train_gcn.parse_args(argv))
    hist = launch(_run, 2, argv)
    torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_loss), rtol=1e-4, atol=1e-6)


def test_example_runs_under_torchrun():
    """The README's main command, shortened: torchrun, gloo, the built-in SBM graph."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(EXAMPLES / "train_gcn.py"), "--epochs", "5", "--log-every", "1", "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final test accuracy" in proc.stdout
    assert "MB sent" in proc.stdout and "comm" in proc.stdout


def test_example_partition_once_then_load_per_rank(planetoid_root, tmp_path):
    """--partition-dir: rank 0 partitions and saves, every rank loads only its file; same training."""
    parts = tmp_path / "parts"
    argv = ["--dataset", "Cora", "--root", planetoid_root, "--epochs", "5", "--dropout", "0",
            "--partition-dir", str(parts)]
    first = launch(_run, 3, argv)
    assert sorted(p.name for p in parts.iterdir()) == ["manifest.json", "part-0.pt", "part-1.pt", "part-2.pt"]
    second = launch(_run, 3, argv)  # reuses the saved partition
    ref_loss, _ = reference_history(train_gcn.parse_args(argv))
    for hist in (first, second):
        torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_loss), rtol=1e-4, atol=1e-6)
    with pytest.raises(RuntimeError, match="has 3 parts but the world size is 2"):
        launch(_run, 2, argv)


def test_example_partition_dir_with_15d_grid(planetoid_root, tmp_path):
    """A saved partition into P/c parts: each replica of a block row loads the same part file."""
    parts = tmp_path / "parts15"
    argv = ["--dataset", "Cora", "--root", planetoid_root, "--epochs", "5", "--dropout", "0",
            "--partition-dir", str(parts), "--algorithm", "1.5d", "--replication", "2"]
    hist = launch(_run, 4, argv)
    assert sorted(p.name for p in parts.iterdir()) == ["manifest.json", "part-0.pt", "part-1.pt"]
    ref_loss, _ = reference_history(train_gcn.parse_args(argv))
    torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_loss), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="needs P/c=4"):
        load_shard(parts, grid=ProcessGrid(2, world_size=8, rank=0))
    replica = load_shard(parts, grid=ProcessGrid(2, world_size=4, rank=3))  # block row 1, replica 1
    assert replica.adj.plan.rank == 1 and replica.replica == 1 and bool(replica.owner_mask[1])


@pytest.mark.slow
@pytest.mark.parametrize("world_size,replication,algorithm", [(8, 2, "auto"), (16, 4, "1.5d")])
def test_15d_training_on_larger_grids_equals_single_process(world_size, replication, algorithm, tmp_path):
    """1.5D whole training at P = 8 (c = 2) and P = 16 (c = 4) on the built-in SBM graph.  Rank 0
    generates and partitions the graph once (``--partition-dir``), every rank loads its part: not
    each of the 16 processes of two cores generating the same graph."""
    argv = ["--dataset", "SBM", "--epochs", "8", "--dropout", "0", "--lr", "0.05", "--hidden", "8",
            "--method", "metis", "--algorithm", algorithm, "--replication", str(replication),
            "--partition-dir", str(tmp_path / "parts")]
    ref_loss, ref_acc = reference_history(train_gcn.parse_args(argv))
    hist = launch(_run, world_size, argv, timeout=900)
    for h in hist[1:]:
        assert h["loss"] == hist[0]["loss"] and h["test_acc"] == hist[0]["test_acc"]
    torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_loss), rtol=1e-4, atol=1e-6)
    assert ref_loss[-1] < 0.9 * ref_loss[0]
    assert abs(hist[0]["test_acc"][-1] - ref_acc[-1]) <= 0.002
