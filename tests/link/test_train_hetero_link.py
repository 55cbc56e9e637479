"""examples/train_hetero_link.py (issue 48): PyG's hetero_link_pred model on a generated MovieLens-shaped
graph.  One P = 2 launch runs both modes: the full-graph loss and train/val/test RMSE curves equal the
single-process run of the same script (P = 1, in this process), and the pairs' exchange sends bytes at
P = 2 only; the ``--loader link-neighbor`` steps (weighted loss) equal single-process PyG on the
reference batches (``hetero_link_global_batches`` of the unsharded training split: the same pairs,
ratings and sampled neighbourhoods), step by step, with the RMSE after the epoch, at P = 1 and 2."""
import sys
from pathlib import Path

import torch
from torch_geometric.data import HeteroData

from pyg_sparsecomm.loader import HeteroNeighborSampling
from pyg_sparsecomm.sampling.link_rules import LinkBatching, hetero_link_global_batches
from pyg_sparsecomm.testing import launch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_hetero_link as example  # noqa: E402

SIZES = ["--users", "60", "--movies", "40", "--features", "8", "--avg-ratings", "6", "--hidden", "16"]
FULL = SIZES + ["--epochs", "4"]
LINK_NEIGHBOR = SIZES + ["--epochs", "1", "--loader", "link-neighbor", "--fanouts", "4", "3", "--batch-size", "70",
                         "--weighted-loss"]
CURVES = ("loss", "train_rmse", "val_rmse", "test_rmse")


def _run(argv, rank=0, world_size=1):
    return example.run(example.parse_args(argv), rank, world_size, verbose=False)


def _worker(rank, world_size):
    torch.set_num_threads(1)
    return {"full": _run(FULL, rank, world_size), "link-neighbor": _run(LINK_NEIGHBOR, rank, world_size)}


def _relabelled(data: HeteroData, hood, pairs):
    """The batch's subgraph in batch positions (PyG's ``LinkNeighborLoader`` batch): ``x_dict``,
    ``edge_index_dict`` and the pairs' ``[2, m]`` positions."""
    position = {t: torch.full((data[t].num_nodes,), -1) for t in data.node_types}
    for t in data.node_types:
        position[t][hood.n_id[t]] = torch.arange(hood.n_id[t].numel())
    x_dict = {t: data[t].x[hood.n_id[t]] for t in data.node_types}
    edge_index_dict = {}
    for (s, r, d), e_id in hood.e_id.items():
        edge_index = data[(s, r, d)].edge_index[:, e_id]
        edge_index_dict[(s, r, d)] = torch.stack([position[s][edge_index[0]], position[d][edge_index[1]]])
    return x_dict, edge_index_dict, torch.stack([position["user"][pairs[0]], position["movie"][pairs[1]]])


def _pyg_link_neighbor(argv):
    """The example's ``--loader link-neighbor`` epoch as single-process PyG: the model and loss of the
    example, on the reference batches of the unsharded training split; its step losses and RMSEs."""
    args = example.parse_args(argv)
    train, val, test = example.make_splits(args)
    rates = train[example.RATES]
    weight = torch.bincount(rates.edge_label)
    weight = weight.max() / weight
    sampling = HeteroNeighborSampling(batch_size=1, seed=args.seed, input_type="user",
                                      relations=tuple((et, tuple(args.fanouts)) for et in train.edge_types))
    rule = LinkBatching(rates.edge_label_index.size(1), args.batch_size, args.users, args.movies, None, 1.0, True,
                        args.seed)
    batches = hetero_link_global_batches(train, sampling, rule, example.RATES, rates.edge_label_index,
                                         rates.edge_label, epoch=0)
    torch.manual_seed(args.seed)
    model = example.Model(args.hidden, train.metadata())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps = []
    for pairs, label, _, _, hood in batches:
        x_dict, edge_index_dict, index = _relabelled(train, hood, pairs)
        optimizer.zero_grad()
        loss = example.weighted_mse_loss(model(x_dict, edge_index_dict, index), label, weight)
        loss.backward()
        optimizer.step()
        steps.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        rmse = [float((model(d.x_dict, d.edge_index_dict, d[example.RATES].edge_label_index).clamp(0, 5)
                       - d[example.RATES].edge_label).pow(2).mean().sqrt()) for d in (train, val, test)]
    return steps, rmse


def _assert_link_neighbor(history, reference, who):
    steps, rmse = reference
    torch.testing.assert_close(torch.tensor(history["step_loss"]), torch.tensor(steps), rtol=1e-5, atol=1e-6,
                               msg=lambda m: f"{who}: step losses: {m}")
    got = torch.tensor([history[k][0] for k in ("train_rmse", "val_rmse", "test_rmse")])
    torch.testing.assert_close(got, torch.tensor(rmse), rtol=1e-5, atol=1e-6, msg=lambda m: f"{who}: RMSE: {m}")


def test_example_equals_single_process():
    single = _run(FULL)
    assert single["loss"][-1] < single["loss"][0], "the full-graph run does not learn"
    assert max(single["pair_bytes"]) == 0  # one process: no pair leaves it
    reference = _pyg_link_neighbor(LINK_NEIGHBOR)
    assert len(reference[0]) >= 2, "the reference epoch has fewer than 2 steps"
    _assert_link_neighbor(_run(LINK_NEIGHBOR), reference, "P = 1")
    for rank, out in enumerate(launch(_worker, 2)):
        for key in CURVES:
            torch.testing.assert_close(torch.tensor(out["full"][key]), torch.tensor(single[key]), rtol=1e-5,
                                       atol=1e-6, msg=lambda m, key=key: f"rank {rank}: full graph {key}: {m}")
        assert min(out["full"]["pair_bytes"]) > 0 and min(out["link-neighbor"]["pair_bytes"]) > 0
        _assert_link_neighbor(out["link-neighbor"], reference, f"P = 2, rank {rank}")
