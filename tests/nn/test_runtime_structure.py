"""The structure issue 47 gave nn/: the rule registry a leaf, one halo port, no algorithm named,
the rules compiled once per layer, and the interception points a distributed layer gets."""
import ast
from pathlib import Path

import torch
from torch_geometric.nn import GATConv, SAGEConv

import pyg_sparsecomm.nn as nn_package
from pyg_sparsecomm import distribute
from pyg_sparsecomm.algorithms import ALGORITHMS
from pyg_sparsecomm.nn.runtime.call import EagerCall, InstanceMethod, enter, leave
from pyg_sparsecomm.nn.runtime.call_halos import RecordFirstOutput

NN = Path(nn_package.__file__).parent


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports anywhere (function-level and ``TYPE_CHECKING`` ones too), relative
    imports spelled with their dots."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_rule_registry_imports_nothing_of_the_package():
    imported = _imports(NN / "rules" / "registry.py")
    assert not [name for name in imported if name.startswith(".") or name.startswith("pyg_sparsecomm")], imported


#: what moves rows: the exchanger and its exchanges, the SpMM algorithms (their pricing, the choice of
#: "auto" and the settings' checks are not)
_ROW_MOVERS = ("comm.exchanger", "comm.halo", "comm.stale", "algorithms", "algorithms.base", "algorithms.registry")


def test_only_the_halo_port_reaches_the_exchanger_and_the_algorithms():
    reaching = sorted(str(path.relative_to(NN)) for path in NN.rglob("*.py")
                      if any(name.lstrip(".") in _ROW_MOVERS or name.lstrip(".").startswith("algorithms.sparse")
                             for name in _imports(path)))
    assert reaching == ["runtime/port.py", "runtime/watched_exchanger.py"], reaching  # the port and its exchanger


def test_no_module_of_nn_names_an_spmm_algorithm():
    classes = {cls.__name__ for name, cls in ALGORITHMS.items() if name != "rdma"}
    named = {(str(path.relative_to(NN)), node.id) for path in NN.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Name) and node.id in classes}
    assert not named, named


def _hooks(module: torch.nn.Module) -> dict[str, list]:
    return {"pre": list(module._forward_pre_hooks.values()), "post": list(module._forward_hooks.values()),
            "propagate_pre": list(module._propagate_forward_pre_hooks.values())}


def test_a_layer_gets_five_interception_points_and_its_plan_once():
    conv = distribute(SAGEConv(8, 4))
    assert _hooks(conv) == {"pre": [enter], "post": [leave], "propagate_pre": []}
    assert isinstance(conv.__dict__["propagate"], InstanceMethod)
    assert isinstance(conv.__dict__["edge_updater"], InstanceMethod)
    assert isinstance(conv.__dict__["_compiled_call_impl"], EagerCall)
    plan = conv._sparsecomm.plan
    assert (plan.spmm_weight, plan.rule.post_linear, plan.message_sources) == ("", "lin_l", ("x",))
    assert conv(torch.randn(5, 8), torch.tensor([[0, 1], [1, 2]])).shape == (5, 4)  # plain PyG off a shard
    assert conv._sparsecomm.plan is plan  # compiled at distribute(), not per call


def test_a_fused_source_layer_also_records_its_source_module():
    conv = distribute(GATConv(8, 4, heads=2))
    assert conv._sparsecomm.plan.fused_source == "lin"
    assert [type(h) for h in conv.lin._forward_hooks.values()] == [RecordFirstOutput]
