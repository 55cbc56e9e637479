"""PyG's ``explain`` and ``decomposed_layers`` setters assign ``conv.propagate``; set after
``distribute()`` they must leave the distributed layer equal to PyG's or raise a clear error, also
after being set back (before the fix: ``'tuple' object has no attribute 'chunk'`` and an
``IndexError`` on every later forward)."""
import pytest
import torch
from layer_specs import F
from test_distribute_layers import make_graph
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.models import GAT, GCN, EdgeCNN, GraphSAGE

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.testing import launch

C = 4
MODELS = {
    "GraphSAGE": lambda: GraphSAGE(F, 8, 2, C),
    "GCN": lambda: GCN(F, 8, 2, C),
    "GAT": lambda: GAT(F, 8, 2, C, heads=2),
    "EdgeCNN": lambda: EdgeCNN(F, 8, 2, C),
}
FEATURE_SEPARABLE = ("GraphSAGE", "GCN", "GAT")


def _set(model: torch.nn.Module, name: str, value) -> None:
    for conv in model.modules():
        if isinstance(conv, MessagePassing):
            setattr(conv, name, value)


def _outputs(model, x, edge_index) -> dict[str, object]:
    """The model's output after each change of the setters (a string: the error raised)."""
    model.eval()
    results: dict[str, object] = {}
    steps = [("plain", None, None), ("decomposed_layers=2", "decomposed_layers", 2),
             ("decomposed_layers=1", "decomposed_layers", 1), ("explain=False", "explain", False),
             ("explain=True", "explain", True), ("explain=None", "explain", None)]
    for label, name, value in steps:
        if name is not None:
            _set(model, name, value)
        try:
            with torch.no_grad():
                results[label] = model(x, edge_index)
        except ValueError as e:
            results[label] = str(e)
    return results


def _worker(rank, world_size):
    data = make_graph(world_size)
    local = shard(data)
    out = {}
    for name, build in MODELS.items():
        torch.manual_seed(0)
        out[name] = _outputs(distribute(build()), local.x, local.adj.with_value(None))
    return local.n_id, out


def _gathered(per_rank, name, label, like):
    out = torch.zeros_like(like)
    for n_id, results in per_rank:
        out[n_id] = results[name][label]
    return out


@pytest.mark.parametrize("world_size", [2])
def test_setters_after_distribute_keep_pyg_results_or_raise(world_size):
    per_rank = launch(_worker, world_size, timeout=600)
    data = make_graph(world_size)
    for name, build in MODELS.items():
        torch.manual_seed(0)
        reference = build().eval()
        with torch.no_grad():
            expected = reference(data.x, data.edge_index)
        for label in ("plain", "decomposed_layers=1", "explain=False", "explain=None"):
            assert torch.allclose(_gathered(per_rank, name, label, expected), expected, atol=1e-5), (name, label)
        for _, results in per_rank:  # Explainer's edge masks cover the whole graph's edges
            assert isinstance(results[name]["explain=True"], str) and "explain" in results[name]["explain=True"]
        decomposed = [results[name]["decomposed_layers=2"] for _, results in per_rank]
        if name in FEATURE_SEPARABLE:  # the SpMM of a linear aggregation: decomposing changes no value
            assert torch.allclose(_gathered(per_rank, name, "decomposed_layers=2", expected), expected, atol=1e-5)
        else:  # PyG itself cannot decompose EdgeConv's (x, x) pair: a clear error on every rank
            assert all(isinstance(d, str) and "decomposed_layers" in d for d in decomposed), decomposed


def test_pyg_decomposition_keeps_gcn_values():
    """The premise of the SpMM path ignoring ``decomposed_layers``, checked on PyG itself."""
    data = make_graph(1)
    torch.manual_seed(0)
    model = GCN(F, 8, 2, C).eval()
    with torch.no_grad():
        plain = model(data.x, data.edge_index)
        _set(model, "decomposed_layers", 2)
        assert torch.allclose(model(data.x, data.edge_index), plain, atol=1e-6)


def test_compat_picks_the_propagate_pyg_runs():
    """``compat.pyg_propagate`` reads PyG's private ``_orig_propagate``: it must still be PyG's
    generic ``propagate`` under decomposition and explanation, the generated one otherwise."""
    from torch_geometric.nn import GATConv, GCNConv

    from pyg_sparsecomm.compat import pyg_edge_updater, pyg_propagate
    conv = GCNConv(4, 4)
    assert pyg_propagate(conv).__func__ is type(conv).propagate
    conv.decomposed_layers = 2
    assert pyg_propagate(conv).__func__ is MessagePassing.propagate
    assert conv.propagate.__func__ is MessagePassing.propagate  # what PyG's own setter installed
    conv.decomposed_layers = 1
    conv.explain = True
    assert pyg_propagate(conv).__func__ is MessagePassing.propagate
    gat = GATConv(4, 4)
    assert pyg_edge_updater(gat).__func__ is type(gat).edge_updater
