"""distribute(layer) == single-process PyG for every supported layer of torch_geometric.nn.conv.

Real gloo runs at P = 1..4 on a directed graph with isolated nodes, self-loops, duplicate
edges, edge weights/attributes/types and (P >= 3) an empty part: outputs, input gradients
and every parameter gradient (after sync_gradients) equal the whole-graph layer's.
"""
import warnings

import pytest
import torch
from layer_specs import EMPTY_GRAPH_FAILS_IN_PYG, D, F, Inputs, R, specs, variants
from torch_geometric.data import Data
from torch_geometric.utils import degree

from pyg_sparsecomm import LossNormalisationWarning, distribute, shard, sync_gradients
from pyg_sparsecomm.testing import launch

N = 40


def make_graph(num_parts: int) -> Data:
    gen = torch.Generator().manual_seed(11)
    ei = torch.randint(6, N, (2, 130), generator=gen)       # nodes 0..5 are isolated
    loops = torch.arange(6, N, 4).repeat(2, 1)
    ei = torch.cat([ei, loops, ei[:, :12]], dim=1)           # self-loops and duplicate edges
    E = ei.size(1)
    normal = torch.randn(N, 3, generator=gen)
    data = Data(x=torch.randn(N, F, generator=gen), edge_index=ei, num_nodes=N,
                edge_weight=torch.rand(E, generator=gen) + 0.5, edge_attr=torch.randn(E, D, generator=gen),
                edge_type=torch.randint(0, R, (E,), generator=gen), pos=torch.randn(N, 3, generator=gen),
                normal=normal / normal.norm(dim=1, keepdim=True), node_type=torch.randint(0, 2, (N,), generator=gen))
    busy = max(num_parts - 1, 1) if num_parts >= 3 else num_parts   # P >= 3: the last part owns nothing
    data.part = torch.randint(0, busy, (N,), generator=gen)
    data.num_parts = num_parts
    return data


def pna_degree(data: Data) -> torch.Tensor:
    d = degree(data.edge_index[1], data.num_nodes, dtype=torch.long)
    return torch.bincount(d)


def inputs(data: Data, x: torch.Tensor, edge_index) -> Inputs:
    return Inputs(x=x, edge_index=edge_index, edge_weight=data.edge_weight, edge_attr=data.edge_attr,
                  edge_type=data.edge_type, pos=data.pos, normal=data.normal, node_type=data.node_type,
                  x_seq=torch.stack([x, 0.5 * x, x.flip(1)], dim=1))


def upstream(out: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    return torch.randn((N,) + tuple(out.shape[1:]), generator=gen)


def run_layer(name, spec, data, edge_index, rows=None):
    torch.manual_seed(0)
    layer = spec.build()
    if rows is not None:
        distribute(layer)
    x = data.x.clone().requires_grad_()
    out = spec.call(layer, inputs(data, x, edge_index))
    up = upstream(out)
    (out * (up if rows is None else up[rows])).sum().backward()
    if rows is not None:
        sync_gradients(layer)
    grads = {k: p.grad.clone() for k, p in layer.named_parameters() if p.grad is not None}
    return out.detach(), x.grad, grads


def _worker(rank, world_size, names):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    data = make_graph(world_size)
    local = shard(data)
    table = all_specs(data)
    results = {}
    for name in names:
        try:
            # the specs call layers as PyG's edge_index path does (weights only where passed explicitly):
            # the structure of local.adj, whose values would otherwise be used as adj_t's (test_adj_values)
            results[name] = run_layer(name, table[name], local, local.adj.with_value(None), local.n_id)
        except Exception as e:  # noqa: BLE001 - reported by name in the parent
            results[name] = f"{type(e).__name__}: {e}"
    return local.n_id, results


def all_specs(data: Data):
    """Every supported layer of PyG and the variants that take other fast paths."""
    return {**specs(pna_degree(data)), **variants()}


def layers(world_size: int):
    """The layers to compare at ``world_size`` (see ``EMPTY_GRAPH_FAILS_IN_PYG``)."""
    data = make_graph(world_size)
    empty_part = bool((torch.bincount(data.part, minlength=world_size) == 0).any())
    return sorted(n for n in all_specs(data) if not (empty_part and n in EMPTY_GRAPH_FAILS_IN_PYG))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_supported_layer_matches_pyg(world_size):
    names = layers(world_size)
    per_rank = launch(_worker, world_size, names, timeout=600)
    data = make_graph(world_size)
    table = all_specs(data)
    failures = []
    for name in names:
        ref_out, ref_gx, ref_grads = run_layer(name, table[name], data, data.edge_index)
        out, gx = torch.zeros_like(ref_out), torch.zeros_like(ref_gx)
        errors = [r[name] for _, r in per_rank if isinstance(r[name], str)]
        if errors:
            failures.append(f"{name}: raised {errors[0]}")
            continue
        for n_id, results in per_rank:
            o, g, grads = results[name]
            out[n_id], gx[n_id] = o, g
            unused = set(grads) - set(ref_grads)   # sync_gradients fills unused parameters with zeros
            assert set(ref_grads) <= set(grads) and all(not grads[k].any() for k in unused), name
            for k, ref in ref_grads.items():
                if not torch.allclose(grads[k], ref, atol=1e-4 * (1 + ref.abs().max()), rtol=1e-4):
                    failures.append(f"{name}: parameter {k} gradient")
        scale = 1 + ref_out.abs().max()
        if not torch.allclose(out, ref_out, atol=1e-4 * scale, rtol=1e-4):
            failures.append(f"{name}: output (max diff {float((out - ref_out).abs().max()):.3g})")
        if not torch.allclose(gx, ref_gx, atol=1e-4 * (1 + ref_gx.abs().max()), rtol=1e-4):
            failures.append(f"{name}: input gradient (max diff {float((gx - ref_gx).abs().max()):.3g})")
    assert not failures, f"P={world_size}:\n" + "\n".join(failures)


@pytest.mark.parametrize("name", sorted(EMPTY_GRAPH_FAILS_IN_PYG))
def test_layers_exempt_from_empty_parts_fail_in_pyg_too(name):
    """The exemption is PyG's own limitation: the single-process layer fails on a graph without edges."""
    data = make_graph(1)
    data.edge_index = data.edge_index[:, :0]
    for key in ("edge_weight", "edge_attr", "edge_type"):
        data[key] = data[key][:0]
    data.x, data.num_nodes = data.x[:0], 0
    with pytest.raises(RuntimeError):
        torch.manual_seed(0)
        spec = specs()[name]
        spec.call(spec.build(), inputs(data, data.x, data.edge_index))
