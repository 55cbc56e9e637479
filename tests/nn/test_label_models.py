"""LabelPropagation, CorrectAndSmooth and MaskLabel under distribute() == single-process PyG (issue 54),
in real gloo runs at P = 1..4 on a directed graph with isolated nodes, self-loops and (P >= 3) an empty
part, with masks given as the whole graph's ids converted by shard_index (a part owning none of them),
as the shard's bool masks, as a shard's train_idx attribute, and labels as classes one rank lacks the
largest of; a plain integer index on a partitioned graph is refused on every rank, naming the fix."""
import warnings

import pytest
import torch
from test_distribute_layers import make_graph
from torch_geometric.nn import GCNConv, LabelPropagation
from torch_geometric.nn.models import CorrectAndSmooth, MaskLabel

from pyg_sparsecomm import LossNormalisationWarning, distribute, shard, shard_index, sync_gradients
from pyg_sparsecomm.testing import launch

C = 4  # classes


def labelled(world_size: int):
    """make_graph's graph with labels (the largest class only at a node of part 0), a list of ids that
    part 1 owns none of (with a duplicate), its mask, and soft predictions."""
    data = make_graph(world_size)
    gen = torch.Generator().manual_seed(21)
    n = data.num_nodes
    data.y = torch.randint(0, C - 1, (n,), generator=gen)
    data.y[int(torch.nonzero(data.part == 0)[0])] = C - 1
    candidates = torch.nonzero(data.part != 1).view(-1) if world_size > 1 else torch.arange(n)
    ids = candidates[torch.randperm(candidates.numel(), generator=gen)[: candidates.numel() // 2]]
    data.ids = torch.cat([ids, ids[:1]])  # not an index attribute by name: the test passes it by hand
    data.train_idx = ids.flip(0)
    data.mask = torch.zeros(n, dtype=torch.bool)
    data.mask[ids] = True
    data.y_soft = torch.rand(n, C, generator=gen).softmax(-1)
    data.x_emb = torch.randn(n, 8, generator=gen)
    return data


class LabelModel(torch.nn.Module):
    """MaskLabel before a GCNConv, as UniMP uses it (labels of the masked rows added to the input)."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.label = MaskLabel(C, 8, method=method)
        self.conv = GCNConv(8 if method == "add" else 16, C)

    def forward(self, x, y, mask, edge_index):
        return self.conv(self.label(x, y, mask), edge_index)


def run(data, edge_index, ids, mask, train_idx, distributed: bool) -> dict:
    """Every model's outputs (and MaskLabel's gradients) on ``data``: the whole graph, or a shard."""
    prepare = (lambda m: distribute(m)) if distributed else (lambda m: m)
    out = {}
    lp = prepare(LabelPropagation(num_layers=3, alpha=0.8))
    out["lp ids"] = lp(data.y, edge_index, mask=ids)
    out["lp mask"] = lp(data.y, edge_index, mask=mask)
    out["lp train_idx"] = lp(data.y, edge_index, mask=train_idx)
    out["lp [n, 1] labels"] = lp(data.y.view(-1, 1), edge_index, mask=ids)
    for autoscale in (True, False):
        cs = prepare(CorrectAndSmooth(2, 0.8, 2, 0.7, autoscale=autoscale, scale=0.6))
        y_true = data.y[ids]
        corrected = cs.correct(data.y_soft, y_true, ids, edge_index)
        out[f"c&s correct autoscale={autoscale}"] = corrected
        out[f"c&s smooth autoscale={autoscale}"] = cs.smooth(corrected, data.y[mask], mask, edge_index)
    for method in ("add", "concat"):
        torch.manual_seed(0)
        model = prepare(LabelModel(method))
        x = data.x_emb.clone().requires_grad_()
        result = model(x, data.y, ids, edge_index)
        (result * torch.arange(1, C + 1)).sum().backward()
        if distributed:
            sync_gradients(model)
        out[f"mask label {method}"] = result.detach()
        out[f"mask label {method} x.grad"] = x.grad
        out.update({f"mask label {method} {k}.grad": p.grad for k, p in model.named_parameters()})
    return out


def _worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum
    data = labelled(world_size)
    local = shard(data)
    adj = local.adj.with_value(None)
    ids = shard_index(data.ids, local)
    results = run(local, adj, ids, local.mask, local.train_idx, distributed=True)
    refusals = {}
    for name, call in {
        "LabelPropagation": lambda: distribute(LabelPropagation(2, 0.5))(local.y, adj, mask=data.ids),
        "CorrectAndSmooth": lambda: distribute(CorrectAndSmooth(1, 0.5, 1, 0.5)).correct(
            local.y_soft, local.y[ids], data.ids, adj),
        "MaskLabel": lambda: distribute(MaskLabel(C, 8))(local.x_emb, local.y, data.ids),
        "a mask over all nodes": lambda: distribute(LabelPropagation(2, 0.5))(local.y, adj, mask=data.mask),
    }.items():
        try:
            call()
            refusals[name] = None
        except ValueError as error:
            refusals[name] = str(error)
    return local.n_id, results, refusals


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_label_models_match_pyg(world_size):
    data = labelled(world_size)
    ref = run(data, data.edge_index, data.ids, data.mask, data.train_idx, distributed=False)
    per_rank = launch(_worker, world_size, timeout=600)
    for name, expected in ref.items():
        if ".grad" in name and "x.grad" not in name:  # parameter gradients: every rank the whole one
            for rank, (_, results, _) in enumerate(per_rank):
                torch.testing.assert_close(results[name], expected, atol=1e-5, rtol=1e-4,
                                           msg=lambda m: f"P={world_size} rank {rank} {name}: {m}")
            continue
        got = torch.zeros_like(expected)
        for n_id, results, _ in per_rank:
            got[n_id] = results[name]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4, msg=lambda m: f"P={world_size} {name}: {m}")
    for rank, (_, _, refusals) in enumerate(per_rank):
        for name in ("LabelPropagation", "CorrectAndSmooth", "MaskLabel"):
            if world_size == 1:  # one part: its rows are the graph's nodes, in order; PyG's reading
                assert refusals[name] is None, (name, refusals[name])
            else:
                assert "shard_index(split_idx, data)" in refusals[name], (rank, name, refusals[name])
        if world_size > 1:
            assert "a bool mask of shape" in refusals["a mask over all nodes"], refusals
