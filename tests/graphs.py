"""Small graphs covering every corner the distributed layer must get right."""
import functools

import torch
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.utils import to_undirected

NUM_FEATURES = 6
OUT = 5


def upstream_grad(num_nodes):
    """A fixed, non-uniform upstream gradient, so input gradients are really tested."""
    return torch.randn(num_nodes, OUT, generator=torch.Generator().manual_seed(7))


def reference_state(config):
    """The GCNConv parameters every equivalence test loads (random bias: a zero one would not test it).
    Built once per configuration and process (a worker loads them for every graph and algorithm; a
    PyG layer's construction costs milliseconds, times every rank on two cores); a copy each call."""
    return {k: v.clone() for k, v in _reference_state(tuple(sorted(config.items()))).items()}


@functools.cache
def _reference_state(config: tuple) -> dict:
    torch.manual_seed(3)
    conv = GCNConv(NUM_FEATURES, OUT, **dict(config))
    torch.nn.init.normal_(conv.bias)
    return conv.state_dict()


def reference_outputs(data, config):
    """Single-process GCNConv: output, input gradient, weight and bias gradients."""
    conv = GCNConv(NUM_FEATURES, OUT, **config)
    conv.load_state_dict(reference_state(config))
    x = data.x.clone().requires_grad_()
    y = conv(x, data.edge_index, getattr(data, "edge_weight", None))
    (y * upstream_grad(data.num_nodes)).sum().backward()
    return y.detach(), x.grad, conv.lin.weight.grad, conv.bias.grad


def _random_edges(num_nodes, num_edges, gen, low=0):
    return torch.randint(low, num_nodes, (2, num_edges), generator=gen)


def make_cases(num_parts: int):
    """Returns ``{name: Data}``; every Data carries ``part`` for ``num_parts`` parts."""
    from pyg_sparsecomm import SparsityAwarePartitioner

    gen = torch.Generator().manual_seed(100 + num_parts)
    n = 60
    x = lambda m: torch.randn(m, NUM_FEATURES, generator=gen)  # noqa: E731
    cases = {}

    ei = to_undirected(_random_edges(n, 150, gen), num_nodes=n)
    ei = ei[:, ei[0] != ei[1]]
    cases["undirected"] = Data(x=x(n), edge_index=ei, num_nodes=n), "metis"

    directed = _random_edges(n, 220, gen)
    directed = directed[:, directed[0] != directed[1]]
    cases["directed"] = Data(x=x(n), edge_index=directed, num_nodes=n), "random"

    iso = _random_edges(n, 150, gen, low=12)  # nodes 0..11 have no edges at all
    iso = iso[:, iso[0] != iso[1]]
    cases["isolated"] = Data(x=x(n), edge_index=iso, num_nodes=n), "contiguous"

    w = torch.rand(directed.size(1), generator=gen) * 1.5 + 0.25
    cases["weighted"] = Data(x=x(n), edge_index=directed, edge_weight=w, num_nodes=n), "random"

    loops = torch.arange(0, n, 3).repeat(2, 1)  # a third of the nodes already have a self-loop
    with_loops = torch.cat([directed, loops, directed[:, :10]], dim=1)  # and some duplicate edges
    cases["self_loops"] = Data(x=x(n), edge_index=with_loops, num_nodes=n), "random"
    wl = torch.rand(with_loops.size(1), generator=gen) + 0.5
    cases["self_loops_weighted"] = Data(x=x(n), edge_index=with_loops, edge_weight=wl,
                                        num_nodes=n), "random"

    # two components of 30 nodes, cut into up to 4 parts by METIS
    a = _random_edges(30, 60, gen)
    comps = torch.cat([a, a + 30], dim=1)
    comps = to_undirected(comps[:, comps[0] != comps[1]], num_nodes=n)
    cases["components"] = Data(x=x(n), edge_index=comps, num_nodes=n), "metis"

    out = {}
    for name, (data, method) in cases.items():
        out[name] = SparsityAwarePartitioner(num_parts, method=method, seed=1)(data)

    if num_parts > 1:  # the last part owns nothing
        data = Data(x=x(n), edge_index=directed, num_nodes=n)
        data.part = torch.arange(n) % (num_parts - 1)
        data.num_parts = num_parts
        out["empty_part"] = data
    return out


CONFIGS = {
    "default": {},
    "cached": {"cached": True},
    "improved": {"improved": True},
    "no_self_loops": {"add_self_loops": False},
    "unnormalized": {"normalize": False},
}
