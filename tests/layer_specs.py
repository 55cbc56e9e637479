"""Every layer of ``torch_geometric.nn.conv``: how to build and call it, or why it is refused.

One table serves the equivalence test (tests/nn/test_distribute_layers.py), the refusal test and
the README's layer table (``python tests/layer_specs.py`` prints it).  A spec builds the
layer (seeded, so every rank and the reference get the same parameters) and calls it on
``Inputs``: whole-graph tensors on one process, the shard's tensors (``edge_index`` is then
``local.adj``) when distributed.
"""
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import Linear, ReLU, Sequential
from torch_geometric.nn import MessagePassing
from torch_geometric.nn import conv as c

F, OUT, D, R = 6, 5, 3, 3  # input / output channels, edge_attr width, relations


@dataclass
class Inputs:
    x: Tensor
    edge_index: object          # Tensor (one process) or HaloAdj (a shard)
    edge_weight: Tensor
    edge_attr: Tensor
    edge_type: Tensor
    pos: Tensor
    normal: Tensor
    node_type: Tensor
    x_seq: Tensor               # [N, 3, F] for DNAConv


@dataclass
class Spec:
    build: Callable[[], torch.nn.Module]
    call: Callable[[torch.nn.Module, Inputs], Tensor] = lambda m, i: m(i.x, i.edge_index)


def _mlp(i: int, o: int) -> Sequential:
    return Sequential(Linear(i, 8), ReLU(), Linear(8, o))


def _weighted(m, i):
    return m(i.x, i.edge_index, i.edge_weight)


def _attr(m, i):
    return m(i.x, i.edge_index, edge_attr=i.edge_attr)


def _typed(m, i):
    return m(i.x, i.edge_index, i.edge_type)


def _pna(deg: Tensor) -> c.PNAConv:
    return c.PNAConv(F, OUT, ["mean", "min", "max", "std"], ["identity", "amplification", "attenuation"], deg,
                     edge_dim=D, towers=1)


def specs(deg: Tensor | None = None) -> dict[str, Spec]:
    """``deg``: PNA's in-degree histogram of the whole graph (PNA is built from it)."""
    deg = torch.tensor([1, 2, 3, 4]) if deg is None else deg
    return {
        "SimpleConv": Spec(lambda: c.SimpleConv("mean", combine_root="sum"), _weighted),
        "GCNConv": Spec(lambda: c.GCNConv(F, OUT), _weighted),
        "ChebConv": Spec(lambda: c.ChebConv(F, OUT, K=3), _weighted),
        "SAGEConv": Spec(lambda: c.SAGEConv(F, OUT)),
        "GraphConv": Spec(lambda: c.GraphConv(F, OUT), _weighted),
        "GatedGraphConv": Spec(lambda: c.GatedGraphConv(OUT + 2, num_layers=2), _weighted),
        "ResGatedGraphConv": Spec(lambda: c.ResGatedGraphConv(F, OUT, edge_dim=D), _attr),
        "GATConv": Spec(lambda: c.GATConv(F, OUT, heads=2, edge_dim=D), _attr),
        "GATv2Conv": Spec(lambda: c.GATv2Conv(F, OUT, heads=2, edge_dim=D), _attr),
        "TransformerConv": Spec(lambda: c.TransformerConv(F, OUT, heads=2, edge_dim=D, beta=True), _attr),
        "AGNNConv": Spec(lambda: c.AGNNConv()),
        "TAGConv": Spec(lambda: c.TAGConv(F, OUT, K=2), _weighted),
        "GINConv": Spec(lambda: c.GINConv(_mlp(F, OUT), train_eps=True)),
        "GINEConv": Spec(lambda: c.GINEConv(_mlp(F, OUT), train_eps=True, edge_dim=D), _attr),
        "ARMAConv": Spec(lambda: c.ARMAConv(F, OUT, num_stacks=2, num_layers=2), _weighted),
        "SGConv": Spec(lambda: c.SGConv(F, OUT, K=2), _weighted),
        "SSGConv": Spec(lambda: c.SSGConv(F, OUT, alpha=0.1, K=2), _weighted),
        "APPNP": Spec(lambda: c.APPNP(K=3, alpha=0.1), _weighted),
        "MFConv": Spec(lambda: c.MFConv(F, OUT, max_degree=4)),
        "RGCNConv": Spec(lambda: c.RGCNConv(F, OUT, num_relations=R, num_bases=2), _typed),
        "FastRGCNConv": Spec(lambda: c.FastRGCNConv(F, OUT, num_relations=R), _typed),
        "RGATConv": Spec(lambda: c.RGATConv(F, OUT, num_relations=R, heads=2), _typed),
        "DNAConv": Spec(lambda: c.DNAConv(F, heads=2), lambda m, i: m(i.x_seq, i.edge_index, i.edge_weight)),
        "PointNetConv": Spec(lambda: c.PointNetConv(_mlp(F + 3, OUT), _mlp(OUT, OUT)),
                             lambda m, i: m(i.x, i.pos, i.edge_index)),
        "GMMConv": Spec(lambda: c.GMMConv(F, OUT, dim=D, kernel_size=2), _attr),
        "NNConv": Spec(lambda: c.NNConv(F, OUT, _mlp(D, F * OUT), aggr="mean"), _attr),
        "CGConv": Spec(lambda: c.CGConv(F, dim=D), _attr),
        "EdgeConv": Spec(lambda: c.EdgeConv(_mlp(2 * F, OUT))),
        "PPFConv": Spec(lambda: c.PPFConv(_mlp(F + 4, OUT), _mlp(OUT, OUT)),
                        lambda m, i: m(i.x, i.pos, i.normal, i.edge_index)),
        "FeaStConv": Spec(lambda: c.FeaStConv(F, OUT, heads=2)),
        "PointTransformerConv": Spec(lambda: c.PointTransformerConv(F, OUT), lambda m, i: m(i.x, i.pos, i.edge_index)),
        "LEConv": Spec(lambda: c.LEConv(F, OUT), _weighted),
        "PNAConv": Spec(lambda: _pna(deg), _attr),
        "ClusterGCNConv": Spec(lambda: c.ClusterGCNConv(F, OUT, diag_lambda=0.5)),
        "GENConv": Spec(lambda: c.GENConv(F, OUT, aggr="softmax", learn_t=True, edge_dim=D), _attr),
        "GCN2Conv": Spec(lambda: c.GCN2Conv(F, alpha=0.1, theta=0.5, layer=2),
                         lambda m, i: m(i.x, i.x.flip(1), i.edge_index)),
        "WLConvContinuous": Spec(lambda: c.WLConvContinuous(), _weighted),
        "FiLMConv": Spec(lambda: c.FiLMConv(F, OUT, num_relations=R), _typed),
        "FAConv": Spec(lambda: c.FAConv(F, eps=0.2), lambda m, i: m(i.x, i.x.flip(1), i.edge_index)),
        "EGConv": Spec(lambda: c.EGConv(F, 8, aggregators=["sum", "mean", "symnorm", "max", "std"], num_heads=2,
                                        num_bases=2)),
        "PDNConv": Spec(lambda: c.PDNConv(F, OUT, edge_dim=D, hidden_channels=4), _attr),
        "GeneralConv": Spec(lambda: c.GeneralConv(F, OUT, in_edge_channels=D, attention=True, heads=2), _attr),
        "HEATConv": Spec(lambda: c.HEATConv(F, OUT, num_node_types=2, num_edge_types=R, edge_type_emb_dim=2,
                                            edge_dim=D, edge_attr_emb_dim=2, heads=2),
                         lambda m, i: m(i.x, i.edge_index, i.node_type, i.edge_type, i.edge_attr)),
        "LGConv": Spec(lambda: c.LGConv(), _weighted),
        "PointGNNConv": Spec(lambda: c.PointGNNConv(_mlp(F, 3), _mlp(F + 3, F), _mlp(F, F)),
                             lambda m, i: m(i.x, i.pos, i.edge_index)),
        "AntiSymmetricConv": Spec(lambda: c.AntiSymmetricConv(F, num_iters=2)),
        "MixHopConv": Spec(lambda: c.MixHopConv(F, OUT, powers=[0, 1, 2]), _weighted),
    }


def variants() -> dict[str, Spec]:
    """Configurations of supported layers that take the package's other fast paths: ``GINConv``
    whose ``nn`` starts with a narrowing ``Linear`` (moved before the aggregation), attention
    with one head and a mean aggregation, or several heads averaged (one SpMM per head)."""
    from torch_geometric.nn import MLP
    return {
        "GINConv[narrowing Sequential]": Spec(lambda: c.GINConv(Sequential(Linear(F, 3), ReLU(), Linear(3, OUT)),
                                                                train_eps=True)),
        "GINConv[narrowing MLP]": Spec(lambda: c.GINConv(MLP([F, 3, OUT], norm=None), eps=0.3)),
        "GATConv[heads=1, mean]": Spec(lambda: c.GATConv(F, OUT, heads=1, aggr="mean")),
        "GATv2Conv[heads=3, concat=False]": Spec(lambda: c.GATv2Conv(F, OUT, heads=3, concat=False,
                                                                     share_weights=True)),
    }


class EdgeGateConv(MessagePassing):
    """A user's own layer: a gate from both endpoints and the edge feature, max aggregation."""

    def __init__(self) -> None:
        super().__init__(aggr="max")
        self.lin = Linear(F, OUT)
        self.gate = Linear(2 * OUT + D, 1)

    def forward(self, x, edge_index, edge_attr):
        h = self.lin(x)
        return self.propagate(edge_index, h=h, edge_attr=edge_attr) + h

    def message(self, h_i, h_j, edge_attr):
        return torch.sigmoid(self.gate(torch.cat([h_i, h_j, edge_attr], dim=-1))) * h_j


#: user-defined layers, tested like PyG's (not part of PyG's conv list)
CUSTOM = {"EdgeGateConv (user-defined)": Spec(EdgeGateConv, _attr)}

#: refused layers that can be built here (the others need CUDA-only or pyg-lib packages)
REFUSED_BUILDERS: dict[str, Callable[[], torch.nn.Module]] = {
    "PANConv": lambda: c.PANConv(F, OUT, filter_size=2),
    "MeshCNNConv": lambda: c.MeshCNNConv(F, OUT),
    "WLConv": lambda: c.WLConv(),
    "SignedConv": lambda: c.SignedConv(F, OUT, first_aggr=True),
    "SuperGATConv": lambda: c.SuperGATConv(F, OUT),
    "HypergraphConv": lambda: c.HypergraphConv(F, OUT),
    "GPSConv": lambda: c.GPSConv(F, c.GCNConv(F, F)),
    "DirGNNConv": lambda: c.DirGNNConv(c.GCNConv(F, OUT)),
}

#: PyG's conv list entries not compared on test_distribute_layers' homogeneous graph: not layers to distribute,
#: not buildable here, or layers of heterogeneous graphs (compared in their own tests)
NOT_BUILT_HERE = {
    "MessagePassing": "the base class: user layers built on it run through propagate/edge_updater "
                      "(see the user-defined layer in the tests)",
    "SplineConv": "not tested: needs pyg-lib or torch-spline-conv, which have no wheel for this torch",
    "HeteroConv": "exact on heterogeneous shards with `SAGEConv`, `GraphConv`, `GATConv`, `GATv2Conv`, `GINConv` or "
                  "`TransformerConv` per relation, each source type exchanged once per layer, and `GCNConv`, "
                  "`SGConv`, `TAGConv`, `ChebConv`, `ARMAConv`, `SSGConv` on relations within one node type (see "
                  "Heterogeneous graphs); other layers refused by name",
    "HGTConv": "exact on heterogeneous shards (`local.adj_dict`): each source type's keys and values exchanged once "
               "per layer, after `kqv_lin` (see Heterogeneous graphs; tested in test_hetero_layers)",
    "HANConv": "exact on heterogeneous shards (`local.adj_dict`): each source type's projected rows exchanged once per "
               "layer, the semantic attention's mean over all ranks (see Heterogeneous graphs; tested in "
               "test_hetero_layers)",
}

#: layers PyG itself cannot run on a graph without edges (what a rank owning no node holds): they
#: are tested on partitions without an empty part, and test_distribute_layers checks that PyG fails
EMPTY_GRAPH_FAILS_IN_PYG = {"FeaStConv"}


#: README rows not derived from a class's rule
TABLE_NOTES = {**NOT_BUILT_HERE,
               "FastRGCNConv": "exact with node features; without them (`x=None` or ids) refused: its message reads "
                               "the embedding at the local source index",
               "AntiSymmetricConv": "exact; its `phi` layer (a `GCNConv` by default) aggregates as one distributed "
                                    "SpMM (`algorithm=` applies)"}


def layer_table() -> str:
    """The README's table, rendered from the rule registry (:func:`pyg_sparsecomm.nn.layer_table`)."""
    from pyg_sparsecomm.nn import layer_table as render
    return render(notes=TABLE_NOTES)


if __name__ == "__main__":
    print(layer_table())
