"""Models and modules that compute over all nodes are refused by name at distribute().

Each would run on a rank's rows only and differ from PyG silently (SGFormer's global attention: by
1.7e-3 at initialisation at P = 2, measured before it was refused).
"""
import pytest
import torch
from torch_geometric.nn import GCNConv, MeanAggregation, MultiAggregation, SAGEConv
from torch_geometric.nn.attention import PerformerAttention
from torch_geometric.nn.models import GCN, PNA, GraphSAGE, GraphUNet, Polynormer, SGFormer
from torch_geometric.nn.pool import SAGPooling

from pyg_sparsecomm import distribute
from pyg_sparsecomm.testing import launch


class NodeAttention(torch.nn.Module):
    """A GCN followed by self-attention over the nodes (a graph transformer's global block)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = GCNConv(4, 8)
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)


class GlobalPool(torch.nn.Module):
    """A GNN with a global mean pooling module at model level (graph classification)."""

    def __init__(self, pool: torch.nn.Module) -> None:
        super().__init__()
        self.gnn = GCN(4, 8, 2, 8)
        self.pool = pool


#: model -> the class name the refusal must name
REFUSED = {
    "SGFormer": (lambda: SGFormer(4, 8, 3), "SGFormer"),
    "Polynormer": (lambda: Polynormer(4, 8, 3, local_layers=1, global_layers=1), "Polynormer"),
    "PerformerAttention": (lambda: PerformerAttention(8, heads=2), "PerformerAttention"),
    "MultiheadAttention over nodes": (NodeAttention, "MultiheadAttention"),
    "MeanAggregation as global pooling": (lambda: GlobalPool(MeanAggregation()), "MeanAggregation"),
    "MultiAggregation in a ModuleList": (lambda: GlobalPool(torch.nn.ModuleList([MultiAggregation(["mean", "max"])])),
                                         "MultiAggregation"),
    "TopKPooling": (lambda: GraphUNet(4, 8, 3, depth=2), "TopKPooling"),
    "SAGPooling": (lambda: SAGPooling(8), "SAGPooling"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_whole_graph_model_is_refused_by_name(name):
    build, class_name = REFUSED[name]
    with pytest.raises(NotImplementedError, match=class_name) as info:
        distribute(build())
    assert "all nodes" in str(info.value) or "whole graph" in str(info.value)


ACCEPTED = [lambda: GraphSAGE(4, 8, 2, 3, aggr=["mean", "max"]), lambda: SAGEConv(4, 8, aggr="lstm"),
            lambda: PNA(4, 8, 2, 3, aggregators=["mean", "max"], scalers=["identity"], deg=torch.tensor([1, 2, 3])),
            lambda: GCN(4, 8, 2, 3, jk="cat")]


@pytest.mark.parametrize("build", ACCEPTED)
def test_aggregations_of_message_passing_layers_are_not_refused(build):
    """A layer's own aggregation module (SAGEConv's, PNAConv's MultiAggregation) is not global pooling."""
    distribute(build())


def _sgformer_worker(rank, world_size):
    torch.manual_seed(0)
    try:
        distribute(SGFormer(4, 8, 3))
    except NotImplementedError as e:
        return str(e)
    return None


def test_sgformer_is_refused_on_every_rank():
    """Before: distribute(SGFormer) ran, its attention saw each rank's rows only (off by 1.7e-3)."""
    for message in launch(_sgformer_worker, 2):
        assert message is not None and "SGFormer" in message and "all nodes" in message
