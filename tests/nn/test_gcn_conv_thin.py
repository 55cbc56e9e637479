"""``DistributedGCNConv`` is ``GCNConv`` on ``distribute()``'s runtime, and what that runtime does for
it holds for any ``GCNConv`` subclass under ``distribute()`` (issue 25, item 3)."""
import torch
from graphs import NUM_FEATURES, OUT, make_cases, reference_outputs, reference_state, upstream_grad
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import DistributedGCNConv, distribute, shard
from pyg_sparsecomm.testing import launch


class SubclassedGCNConv(GCNConv):
    """A user's ``GCNConv`` subclass, defined in a module other than PyG's: it runs
    ``GCNConv.forward``, whose ``gcn_norm`` is a name of PyG's module, not of this one."""


def _subclass_equals_pyg(rank: int, world_size: int, config: dict) -> float:
    data = make_cases(world_size)["weighted"]
    local = shard(data)
    conv = SubclassedGCNConv(NUM_FEATURES, OUT, **config)
    conv.load_state_dict(reference_state(config))
    distribute(conv, sync_gradients=False)
    x = local.x.clone().requires_grad_()
    y = conv(x, local.adj, local.edge_weight)
    (y * upstream_grad(data.num_nodes)[local.n_id]).sum().backward()
    ref_y, ref_dx, _, _ = reference_outputs(data, config)
    torch.testing.assert_close(y, ref_y[local.n_id])
    torch.testing.assert_close(x.grad, ref_dx[local.n_id])
    return float(y.detach().abs().sum())


def test_distribute_normalises_a_gcnconv_subclass_with_global_degrees():
    """Fails on the runtime that patched only the subclass's own module: PyG's local ``gcn_norm``
    indexed the halo columns out of range."""
    for config in ({}, {"cached": True}):
        assert len(launch(_subclass_equals_pyg, 2, config)) == 2


def _cached_layer_keeps_its_spmm(rank: int, world_size: int) -> tuple[bool, bool, bool]:
    local = shard(make_cases(world_size)["weighted"])
    thin = DistributedGCNConv(NUM_FEATURES, OUT, cached=True)
    generic = distribute(GCNConv(NUM_FEATURES, OUT, cached=True), sync_gradients=False)
    kept = []
    for conv in (thin, generic):
        conv(local.x, local.adj, local.edge_weight)
        first = conv._sparsecomm.cached_spmm.spmm
        conv(local.x, local.adj, local.edge_weight)
        kept.append(first is not None and conv._sparsecomm.cached_spmm.spmm is first)
    thin.reset_parameters()
    return kept[0], kept[1], thin._cached_spmm is None


def test_cached_layers_keep_one_spmm_across_calls():
    for thin, generic, dropped in launch(_cached_layer_keeps_its_spmm, 2):
        assert thin and generic and dropped


def test_the_thin_class_has_no_forward_or_propagate_of_its_own():
    assert "forward" not in vars(DistributedGCNConv)
    conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm="auto", staleness=1)
    assert conv.algorithm == "auto" and conv.chosen_algorithm is None and conv.halo_options.staleness == 1
    assert hasattr(conv, "_sparsecomm")


def test_distribute_keeps_the_layers_own_settings():
    """A ``distribute()``d model holding the layer (for its gradient synchronisation) does not
    replace the algorithm and halo options the layer was built with."""
    model = torch.nn.ModuleList([DistributedGCNConv(NUM_FEATURES, OUT, algorithm="oblivious"),
                                 GCNConv(NUM_FEATURES, OUT)])
    distribute(model, algorithm="1d_overlap", halo_precision="bf16")
    assert model[0].algorithm == "oblivious" and model[0].halo_options.exact
    assert model[1]._sparsecomm.settings.algorithm == "1d_overlap"
