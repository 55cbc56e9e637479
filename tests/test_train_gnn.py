"""examples/train_gnn.py on P ranks trains PyG's own GCN/GraphSAGE/GIN/GAT exactly as a
single-process PyG loop over the whole graph does (dropout 0, BatchNorm on), with gradients
synced by sync_gradients or (GraphSAGE) by DistributedDataParallel."""
import sys
from pathlib import Path

import pytest
import torch
from reference import reference_epoch

from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.testing import launch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_gnn  # noqa: E402


def reference_losses(args):
    torch.manual_seed(args.seed)
    data = load_dataset(args.dataset, args.root, args.seed)
    model = train_gnn.build_model(args.model, data.num_features, args.hidden, int(data.y.max()) + 1,
                                  args.dropout, args.norm)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    return [reference_epoch(model, opt, data) for _ in range(args.epochs)]


MODELS = ["gcn", "sage", "gin", "gat"]


def argv(model):
    return ["--model", model, "--epochs", "8", "--dropout", "0", "--norm", "batch_norm", "--hidden", "16"]


def _run(rank, world_size):
    out = {m: train_gnn.run(train_gnn.parse_args(argv(m)), rank, world_size, verbose=False) for m in MODELS}
    out["sage+ddp"] = train_gnn.run(train_gnn.parse_args(argv("sage") + ["--ddp"]), rank, world_size, verbose=False)
    return out


@pytest.mark.slow
def test_example_trains_like_single_process_pyg():
    per_rank = launch(_run, 3, timeout=300)
    for model in MODELS + ["sage+ddp"]:
        ref = reference_losses(train_gnn.parse_args(argv(model.split("+")[0])))
        assert ref[-1] < ref[0], model
        for histories in per_rank:
            torch.testing.assert_close(torch.tensor(histories[model]["loss"]), torch.tensor(ref), atol=1e-4,
                                       rtol=1e-4, msg=lambda m: f"{model}: {m}")
            assert histories[model]["bytes"][0] > 0, model
