"""The LayerRule registry: matched by type through the MRO (not by class name), dropped where a
subclass overrides what the rule relies on, extensible with register_layer_rule (a user's layer
with an "spmm" rule runs the distributed SpMM and equals PyG at P = 2), and the README table's
claims agree with the built layers."""
import types
import warnings

import pytest
import torch
from layer_specs import F, specs
from test_distribute_layers import make_graph
from torch_geometric.nn import GCNConv, MessagePassing, SAGEConv
from torch_geometric.nn import conv as c

from pyg_sparsecomm import LossNormalisationWarning, distribute, shard, sync_gradients
from pyg_sparsecomm.nn import LayerRule, layer_rule, refusal, register_layer_rule, summary
from pyg_sparsecomm.nn.rules.registry import register_named as _register_named
from pyg_sparsecomm.nn.runtime.aggregation import edge_weighted_arg, linear_weight_arg, narrowing_linear
from pyg_sparsecomm.testing import launch


class GPSConv(MessagePassing):
    """A user's own layer that happens to share the name of PyG's refused GPSConv."""

    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)

    def message(self, x_j):
        return x_j


def test_a_user_class_named_like_a_refused_pyg_class_is_not_refused():
    assert refusal(GPSConv()) is None
    distribute(torch.nn.ModuleList([GPSConv()]))
    with pytest.raises(NotImplementedError, match="GPSConv .*global attention"):
        distribute(c.GPSConv(F, GCNConv(F, F)))


def test_subclasses_inherit_rules_unless_they_override_what_the_rule_relies_on():
    class Plain(GCNConv):
        pass

    class OwnMessage(GCNConv):
        def message(self, x_j, edge_weight):
            return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    class OwnForward(SAGEConv):
        def forward(self, x, edge_index, size=None):
            return super().forward(x, edge_index, size)

    assert layer_rule(Plain).aggregation == "spmm" and layer_rule(Plain).weight == "edge_weight"
    assert layer_rule(OwnMessage).aggregation == "exchange" and layer_rule(OwnMessage).weight is None
    assert layer_rule(OwnForward).aggregation == "spmm" and layer_rule(OwnForward).post_linear is None
    assert narrowing_linear(OwnForward(16, 4)) is None and narrowing_linear(SAGEConv(16, 4)) == "lin_l"

    class RefusedChild(c.SuperGATConv):
        def message(self, *args, **kwargs):
            return super().message(*args, **kwargs)

    assert refusal(RefusedChild.__new__(RefusedChild)) == layer_rule(c.SuperGATConv).refused


def test_names_missing_in_a_pyg_version_are_skipped():
    _register_named(types.SimpleNamespace(), {"ConvOfAFuturePyG": LayerRule(refused="is not there")})


def test_rules_are_checked_when_built():
    with pytest.raises(ValueError, match="aggregation must be one of"):
        LayerRule(aggregation="scatter")
    with pytest.raises(ValueError, match="needs weight="):
        LayerRule(aggregation="spmm")
    with pytest.raises(ValueError, match="post_linear and input_linear"):
        LayerRule(post_linear="lin")
    with pytest.raises(TypeError, match="torch.nn.Module class"):
        register_layer_rule(int, LayerRule())


def test_the_tables_claims_agree_with_the_built_layers():
    """What the registry says of each class (the README's table) holds for the layers the
    equivalence tests build: an "spmm" rule is a linear aggregation there, and so on."""
    for name, spec in specs().items():
        torch.manual_seed(0)
        convs = [m for m in spec.build().modules() if isinstance(m, MessagePassing)]
        rule = layer_rule(getattr(c, name))
        if rule.aggregation == "spmm":
            assert any(linear_weight_arg(m) is not None for m in convs), name
        elif rule.aggregation == "attention":
            assert any(edge_weighted_arg(m) is not None for m in convs), name


class WeightedSum(MessagePassing):
    r""":math:`x'_i = \sum_j w_{ji} x_j W^\top`: linear, so an "spmm" rule may run it."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(aggr="add")
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index, edge_weight=None):
        return self.propagate(edge_index, x=self.lin(x), edge_weight=edge_weight)

    def message(self, x_j, edge_weight):
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j


class RuledWeightedSum(WeightedSum):
    pass


def _run(model, x, edge_index, edge_weight, rows=None):
    x = x.clone().requires_grad_()
    out = model(x, edge_index, edge_weight)
    gen = torch.Generator().manual_seed(5)
    up = torch.randn(make_graph(1).num_nodes, out.size(1), generator=gen)
    (out * (up if rows is None else up[rows])).sum().backward()
    if rows is not None:
        sync_gradients(model)
    return out.detach(), x.grad, {k: p.grad for k, p in model.named_parameters()}


def _user_rule_worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    register_layer_rule(RuledWeightedSum, LayerRule(aggregation="spmm", weight="edge_weight"))
    local = shard(make_graph(world_size))
    results = {}
    for cls in (WeightedSum, RuledWeightedSum):
        torch.manual_seed(0)
        model = distribute(cls(F, 3))
        results[cls.__name__] = _run(model, local.x, local.adj, local.edge_weight, local.n_id)
        results[cls.__name__ + " summary"] = summary(model)
    return local.n_id, results


@pytest.mark.parametrize("world_size", [2])
def test_a_user_registered_rule_runs_the_distributed_spmm_and_equals_pyg(world_size):
    per_rank = launch(_user_rule_worker, world_size, timeout=300)
    data = make_graph(world_size)
    assert "distributed SpMM" in per_rank[0][1]["RuledWeightedSum summary"]
    assert "source tensors exchanged" in per_rank[0][1]["WeightedSum summary"]
    for name in ("WeightedSum", "RuledWeightedSum"):
        torch.manual_seed(0)
        ref_out, ref_gx, ref_grads = _run(WeightedSum(F, 3), data.x, data.edge_index, data.edge_weight)
        out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
        for n_id, results in per_rank:
            o, g, grads = results[name]
            out[n_id], gx[n_id] = o, g
            for k, r in ref_grads.items():
                assert torch.allclose(grads[k], r, atol=1e-5), (name, k)
        assert torch.allclose(out, ref_out, atol=1e-5) and torch.allclose(gx, ref_gx, atol=1e-5), name
