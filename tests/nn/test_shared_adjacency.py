"""``cached=True`` layers of one model share one normalised adjacency per shard (issue 27, item 4):
the same normalised tensors in their PyG caches, one CSR and one transpose for their SpMMs, and
a layer that normalises differently gets its own.  Outputs and gradients stay PyG's."""
import torch
import torch.distributed as dist
from configs_per_launch import by_world_size, run_each
from graphs import NUM_FEATURES, make_cases
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import DistributedGCNConv, distribute, shard
from pyg_sparsecomm.testing import launch

HIDDEN = 4
CASES = [(2, "self_loops_weighted"), (2, "directed"), (2, "empty_part")]  # one launch


def _layers() -> list[GCNConv]:
    torch.manual_seed(0)
    return [GCNConv(NUM_FEATURES, HIDDEN, cached=True), GCNConv(HIDDEN, HIDDEN, cached=True),
            GCNConv(HIDDEN, 3, cached=True, improved=True)]


def _forward(layers, x, graph, weight):
    h = layers[0](x, graph, weight).relu()
    h = layers[1](h, graph, weight).relu()
    return layers[2](h, graph, weight)


def _case(P: int, name: str, rank: int) -> tuple[bool, bool, bool, bool]:
    data = make_cases(P)[name]
    local = shard(data)
    reference = _layers()
    x_ref = data.x.clone().requires_grad_()
    y_ref = _forward(reference, x_ref, data.edge_index, data.get("edge_weight"))
    y_ref.square().sum().backward()
    layers = _layers()
    thin = DistributedGCNConv(NUM_FEATURES, HIDDEN, cached=True)
    thin.load_state_dict(layers[0].state_dict())
    layers[0] = thin  # the package's class and a distribute()d GCNConv share it too
    for conv in layers[1:]:
        distribute(conv, sync_gradients=False)
    x = local.x.clone().requires_grad_()
    for _ in range(2):  # the second step runs on what the first one cached
        x.grad = None
        y = _forward(layers, x, local.adj, local.edge_weight)
        y.square().sum().backward()
    torch.testing.assert_close(y, y_ref[local.n_id])
    torch.testing.assert_close(x.grad, x_ref.grad[local.n_id])
    for conv, ref in zip(layers, reference, strict=True):  # parameter gradients: summed over the ranks
        for param, ref_param in zip(conv.parameters(), ref.parameters(), strict=True):
            dist.all_reduce(param.grad)
            torch.testing.assert_close(param.grad / 2, ref_param.grad)  # two steps' gradients
    caches = [conv._cached_edge_index for conv in layers]
    adjs = [conv._sparsecomm.cached_spmm.spmm.adj for conv in layers]
    shared = caches[0][0] is caches[1][0] and caches[0][1] is caches[1][1] and adjs[0] is adjs[1]
    own = caches[2][0] is not caches[0][0] and adjs[2] is not adjs[0]  # improved: another normalisation
    # the SpMM's columns are the cached edge index's row 0 (one copy), its transpose is built once
    no_copy = adjs[0].col.data_ptr() == caches[0][0].data_ptr()
    one_transpose = adjs[0].csr_t() is adjs[1].csr_t()
    return shared, own, no_copy, one_transpose


def _worker(rank: int, world_size: int, configs: list[tuple]) -> dict:
    return run_each(lambda P, name: _case(P, name, rank), configs)


def test_cached_layers_share_one_normalised_adjacency():
    """Fails on the runtime where every cached layer normalised, sorted and transposed its own copy."""
    for P, configs in by_world_size(CASES).items():
        for results in launch(_worker, P, configs):
            for config, (shared, own, no_copy, one_transpose) in results.items():
                assert shared, f"{config}: the cached layers hold different normalised graphs"
                assert own, f"{config}: an improved=True layer reused the plain normalisation"
                assert no_copy, f"{config}: the SpMM's CSR copies the cached edge index"
                assert one_transpose, f"{config}: each layer built its own transposed CSR"
