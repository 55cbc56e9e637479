"""Every entry of torch_geometric.nn.conv is classified: supported (and compared with PyG in
test_distribute_layers), refused by distribute() with an error naming it, or not buildable here;
the README's table is generated from that classification."""
from pathlib import Path

import pytest
import torch
from layer_specs import NOT_BUILT_HERE, REFUSED_BUILDERS, layer_table, specs
from torch_geometric.nn import GCNConv, MessagePassing, Sequential
from torch_geometric.nn import conv as c
from torch_geometric.nn.norm import BatchNorm, MeanSubtractionNorm, PairNorm

from pyg_sparsecomm import distribute
from pyg_sparsecomm.nn import layer_rule, refusal

README = Path(__file__).resolve().parents[2] / "README.md"
#: the classes of torch_geometric.nn.conv the rule registry refuses, with the reason
REFUSED = {name: layer_rule(getattr(c, name)).refused for name in c.__all__ if layer_rule(getattr(c, name)).refused}


def test_every_pyg_conv_is_classified_once():
    supported, refused, other = set(specs()), set(REFUSED), set(NOT_BUILT_HERE)
    assert not (supported & refused) and not (supported & other) and not (refused & other)
    assert set(c.__all__) == supported | refused | other


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_layers_raise_naming_the_layer(name):
    if name in REFUSED_BUILDERS:
        layer = REFUSED_BUILDERS[name]()
        model = Sequential("x, edge_index", [(layer, "x, edge_index -> x")])
        with pytest.raises(NotImplementedError, match=f"distribute\\(\\): {name} .*cannot be trained exactly"):
            distribute(model)
    else:  # needs CUDA-only or pyg-lib packages to be built: the class alone is refused
        cls = getattr(c, name)
        assert refusal(cls.__new__(cls)) == REFUSED[name]


def test_flow_target_to_source_and_whole_graph_norms_are_refused():
    with pytest.raises(NotImplementedError, match="GCNConv .*flow='target_to_source'"):
        distribute(GCNConv(4, 4, flow="target_to_source"))
    for norm in (PairNorm(), MeanSubtractionNorm()):
        with pytest.raises(NotImplementedError, match=type(norm).__name__):
            distribute(torch.nn.ModuleList([GCNConv(4, 4), norm]))
    distribute(torch.nn.ModuleList([GCNConv(4, 4), BatchNorm(4)]))  # reduced over ranks: accepted


class _RootInUpdate(MessagePassing):
    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)

    def message(self, x_j):
        return x_j

    def update(self, aggr_out, x):
        return aggr_out + x


def test_a_layer_reading_a_source_tensor_whole_is_refused():
    with pytest.raises(NotImplementedError, match="_RootInUpdate .* reads 'x' both whole and at sources"):
        distribute(_RootInUpdate())


def test_readme_shows_the_generated_table():
    assert layer_table() in README.read_text(), \
        "README's layer table is stale: paste the output of `python tests/layer_specs.py`"
