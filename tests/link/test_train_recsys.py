"""examples/train_recsys.py (issue 48, item 6): full-graph LightGCN on a generated Amazon-Book-shaped graph.
Its loss, precision@20 and recall@20 curves over 2 epochs equal single-process PyG's (``LightGCN`` on the
whole ``edge_index``, the example's batches, the training pairs' scores set to -inf before ``topk``, PyG's
``LinkPredPrecision``/``LinkPredRecall``) in one process and at P = 2 on every rank; the layers' halo, the
pairs' exchange and the top-k exchange send bytes at P = 2 only."""
import sys
import warnings
from pathlib import Path

import torch
from torch_geometric.metrics import LinkPredPrecision, LinkPredRecall
from torch_geometric.nn import LightGCN

from pyg_sparsecomm.testing import launch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_recsys as example  # noqa: E402

ARGV = ["--users", "90", "--books", "120", "--interactions", "1500", "--dim", "16", "--batch-size", "256",
        "--epochs", "2", "--lr", "0.01", "--lambda-reg", "0.01"]
CURVES = ("loss", "precision", "recall")
BYTES = ("layer_bytes", "pair_bytes", "grad_bytes", "topk_bytes")


def _run(rank=0, world_size=1):
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyG's num_nodes inference on the shard
        return example.run(example.parse_args(ARGV), rank, world_size, verbose=False)


def _pyg() -> dict:
    """The example's recipe as single-process PyG: loss, precision@k and recall@k per epoch."""
    args = example.parse_args(ARGV)
    data, train, test = example.make_graph(args)
    torch.manual_seed(args.seed)
    model = LightGCN(data.num_nodes, args.dim, num_layers=args.layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    out: dict[str, list] = {key: [] for key in CURVES}
    for _ in range(args.epochs):
        steps = example.batches(train, args, generator)
        out["loss"].append(example.train_epoch(model, optimizer, data.edge_index, steps, args.lambda_reg))
        with torch.no_grad():
            emb = model.get_embedding(data.edge_index)
            logits = emb[:args.users] @ emb[args.users:].t()
            logits[train[0], train[1] - args.users] = float("-inf")
            top = logits.topk(args.k, dim=-1).indices + args.users
        for key, metric in (("precision", LinkPredPrecision(args.k)), ("recall", LinkPredRecall(args.k))):
            metric.update(top, test)
            out[key].append(float(metric.compute()))
    return out


def _assert_curves(history: dict, reference: dict, who: str) -> None:
    for key in CURVES:
        torch.testing.assert_close(torch.tensor(history[key], dtype=torch.float64),
                                   torch.tensor(reference[key], dtype=torch.float64), rtol=0, atol=1e-5,
                                   msg=lambda m, key=key: f"{who}: {key}: {m}")


def test_example_equals_single_process_pyg():
    reference = _pyg()
    assert reference["loss"][-1] < reference["loss"][0], "the reference does not learn"
    assert reference["recall"][-1] > 0, "no test pair is ever recommended: the check would be vacuous"
    single = _run()
    _assert_curves(single, reference, "P = 1")
    assert all(max(single[key]) == 0 for key in BYTES)  # one process: nothing is sent
    for rank, history in enumerate(launch(_run, 2, timeout=300)):
        _assert_curves(history, reference, f"P = 2, rank {rank}")
        assert all(min(history[key]) > 0 for key in BYTES), {key: history[key] for key in BYTES}
