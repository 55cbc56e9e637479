"""distribute() gives each layer that normalises in its forward (``gcn_norm``, ChebConv's
``get_laplacian``) the normalisation with global degrees per instance, through its rule: PyG's
modules keep their own functions, a plain PyG layer run while a distributed one is on its shard is
plain PyG, and two distributed instances of one class with different ``improved`` /
``add_self_loops`` / ``cached`` / ``normalize`` settings each equal single-process PyG (outputs,
input and parameter gradients, a first and a second call) in real gloo runs at P = 1, 2, 3 (P = 3:
an empty part), with ``normalize`` and PyG's caches as PyG leaves them after every call, also
after a forward that raised; a user's layer normalising like ``GCNConv`` does with a rule saying so.
"""
import sys
import warnings

import pytest
import torch
from layer_specs import OUT, D, F, Inputs
from test_distribute_layers import inputs, make_graph, upstream
from torch_geometric.nn import LabelPropagation, MessagePassing
from torch_geometric.nn import conv as c
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from pyg_sparsecomm import DistributedGCNConv, LossNormalisationWarning, distribute, shard, sync_gradients
from pyg_sparsecomm.nn import GcnNormalisation, LayerRule, register_layer_rule
from pyg_sparsecomm.testing import launch

#: the functions PyG's layers normalise with, by the name their modules call them
NORMALISATIONS = ("gcn_norm", "get_laplacian")


def _pyg_globals() -> dict[tuple[str, str], object]:
    """``{(module, name): object}`` of every normalisation a module of ``torch_geometric`` holds."""
    return {(module_name, name): getattr(module, name) for module_name, module in sorted(sys.modules.items())
            if module_name.startswith("torch_geometric") and module is not None
            for name in NORMALISATIONS if callable(getattr(module, name, None))}


def _weighted(m, i):
    return m(i.x, i.edge_index, i.edge_weight)


class Pair(torch.nn.Module):
    """Two instances of one class, called on the same inputs one after the other (outputs
    concatenated): each must keep its own settings and state."""

    def __init__(self, a, b, call_a=_weighted, call_b=None) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.call_a, self.call_b = call_a, call_b or call_a

    def forward(self, i: Inputs):
        return torch.cat([self.call_a(self.a, i), self.call_b(self.b, i)], dim=-1)


def _with_x0(m, i):
    return m(i.x, i.x.flip(1), i.edge_index)


def _with_x0_weighted(m, i):
    return m(i.x, i.x.flip(1), i.edge_index, i.edge_weight)


def _label_propagation(m, i):
    return m(i.x.softmax(-1), i.edge_index)


class UsersNormalisedConv(MessagePassing):
    """A user's layer normalising as ``GCNConv`` does (``normalize`` flag, ``gcn_norm`` in its
    forward), with a rule saying so."""

    def __init__(self, add_self_loops: bool = True) -> None:
        super().__init__(aggr="add")
        self.normalize, self.add_self_loops = True, add_self_loops
        self.lin = torch.nn.Linear(F, OUT)

    def forward(self, x, edge_index, edge_weight=None):
        if self.normalize:
            edge_index, edge_weight = gcn_norm(edge_index, edge_weight, x.size(0), False, self.add_self_loops,
                                               self.flow, x.dtype)
        return self.propagate(edge_index, x=self.lin(x), edge_weight=edge_weight)

    def message(self, x_j, edge_weight):
        return edge_weight.view(-1, 1) * x_j


register_layer_rule(UsersNormalisedConv, LayerRule(normalisation=GcnNormalisation("arguments")))

CASES = {  # name -> builder of a Pair
    "GCNConv": lambda: Pair(c.GCNConv(F, OUT, improved=True, cached=True), c.GCNConv(F, OUT, add_self_loops=False)),
    "GCNConv[normalize=False]": lambda: Pair(c.GCNConv(F, OUT, normalize=False), c.GCNConv(F, OUT, improved=True)),
    "DistributedGCNConv": lambda: Pair(DistributedGCNConv(F, OUT, cached=True, add_self_loops=False),
                                       DistributedGCNConv(F, OUT, improved=True)),
    "SGConv": lambda: Pair(c.SGConv(F, OUT, K=2, cached=True), c.SGConv(F, OUT, K=1, add_self_loops=False)),
    "SSGConv": lambda: Pair(c.SSGConv(F, OUT, alpha=0.1, K=2, cached=True),
                            c.SSGConv(F, OUT, alpha=0.3, K=1, add_self_loops=False)),
    "APPNP": lambda: Pair(c.APPNP(K=2, alpha=0.1, cached=True), c.APPNP(K=2, alpha=0.2, add_self_loops=False)),
    "GCN2Conv": lambda: Pair(c.GCN2Conv(F, alpha=0.1, cached=True), c.GCN2Conv(F, alpha=0.2, add_self_loops=False),
                             _with_x0_weighted),
    "DNAConv": lambda: Pair(c.DNAConv(F, heads=2, cached=True), c.DNAConv(F, heads=2, add_self_loops=False),
                            lambda m, i: m(i.x_seq, i.edge_index, i.edge_weight)),
    "FAConv": lambda: Pair(c.FAConv(F, eps=0.2, cached=True), c.FAConv(F, eps=0.1, add_self_loops=False), _with_x0),
    "TAGConv": lambda: Pair(c.TAGConv(F, OUT, K=2), c.TAGConv(F, OUT, K=1, normalize=False)),
    "LGConv": lambda: Pair(c.LGConv(), c.LGConv(normalize=False)),
    "MixHopConv": lambda: Pair(c.MixHopConv(F, OUT, powers=[0, 1, 2]),
                               c.MixHopConv(F, OUT, powers=[1, 2], add_self_loops=False)),
    "ARMAConv": lambda: Pair(c.ARMAConv(F, OUT, num_stacks=2, num_layers=2),
                             c.ARMAConv(F, OUT, num_layers=2, shared_weights=True)),
    "EGConv": lambda: Pair(c.EGConv(F, 8, aggregators=["symnorm", "sum"], num_heads=2, num_bases=2, cached=True),
                           c.EGConv(F, 8, aggregators=["symnorm", "max"], num_heads=2, num_bases=2,
                                    add_self_loops=False),
                           lambda m, i: m(i.x, i.edge_index)),
    "PDNConv": lambda: Pair(c.PDNConv(F, OUT, edge_dim=D, hidden_channels=4),
                            c.PDNConv(F, OUT, edge_dim=D, hidden_channels=4, add_self_loops=False),
                            lambda m, i: m(i.x, i.edge_index, i.edge_attr)),
    "ChebConv": lambda: Pair(c.ChebConv(F, OUT, K=3, normalization="rw"), c.ChebConv(F, OUT, K=2, normalization=None),
                             _weighted, lambda m, i: m(i.x, i.edge_index, i.edge_weight, lambda_max=3.0)),
    "LabelPropagation": lambda: Pair(LabelPropagation(num_layers=2, alpha=0.9),
                                     LabelPropagation(num_layers=1, alpha=0.5), _label_propagation,
                                     lambda m, i: m(i.x.softmax(-1), i.edge_index, edge_weight=i.edge_weight)),
    "UsersNormalisedConv (user-defined rule)": lambda: Pair(UsersNormalisedConv(), UsersNormalisedConv(False)),
}

CALLS = 2  # the second call of a cached=True layer reuses its cache
#: no input gradient: SGConv/SSGConv(cached=True) keep their propagated input, whose graph the first
#: backward frees (PyG's cache is for input features); LabelPropagation runs under no_grad
CONSTANT_INPUT = {"SGConv", "SSGConv", "LabelPropagation"}


def _layers(pair: Pair) -> list[torch.nn.Module]:
    return [pair.a, pair.b]


def _pyg_state(pair: Pair) -> list[tuple]:
    """What PyG leaves on each layer after a call: its ``normalize`` flag and whether its
    normalisation cache is filled."""
    return [(getattr(m, "normalize", None), getattr(m, "_cached_edge_index", None) is not None)
            for m in _layers(pair)]


def run_case(name: str, data, graph, rows=None) -> list[tuple]:
    """Per call: output, input gradient, parameter gradients and :func:`_pyg_state`."""
    torch.manual_seed(0)
    pair = CASES[name]()
    if rows is not None:
        distribute(pair)
    results = []
    for _ in range(CALLS):
        x = data.x.clone().requires_grad_(name not in CONSTANT_INPUT)
        out = pair(inputs(data, x, graph))
        up = upstream(out)
        if out.requires_grad:
            (out * (up if rows is None else up[rows])).sum().backward()
        if rows is not None:
            sync_gradients(pair)
        grads = {k: p.grad.clone() for k, p in pair.named_parameters() if p.grad is not None}
        pair.zero_grad()
        results.append((out.detach(), x.grad, grads, _pyg_state(pair)))
    return results


class CallsPlainGCN(c.SimpleConv):
    """A user's layer whose forward also runs a plain (not distributed) ``GCNConv`` over another,
    whole graph it holds outside its submodules."""

    def __init__(self, plain: c.GCNConv, x: torch.Tensor, edge_index: torch.Tensor) -> None:
        super().__init__()
        self.plain = (plain, x, edge_index)  # a tuple: distribute() does not see it
        self.seen: list[torch.Tensor] = []

    def forward(self, x, edge_index):
        plain, px, pei = self.plain
        self.seen.append(plain(px, pei).detach())
        return super().forward(x, edge_index)


def _plain_gcn():
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(2)
    return c.GCNConv(F, OUT), torch.randn(7, F, generator=gen), torch.randint(0, 7, (2, 15), generator=gen)


def _raising_call_restores(local) -> list:
    """A forward that raises after the pre-hook (``x`` one column too wide for the ``Linear``):
    ``normalize`` and PyG's cache are back as they were."""
    layers = [distribute(c.TAGConv(F, OUT, K=1)), distribute(c.GCNConv(F, OUT)), distribute(c.PDNConv(F, OUT, D, 4))]
    x = torch.cat([local.x, local.x[:, :1]], dim=1)
    for layer in layers:
        try:
            layer(x, local.adj.with_value(None))
        except RuntimeError:
            pass
    return [(layer.normalize, getattr(layer, "_cached_edge_index", None)) for layer in layers]


def _worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum on purpose
    before = _pyg_globals()
    data = make_graph(world_size)
    local = shard(data)
    graph = local.adj.with_value(None)  # weights passed explicitly, as in test_distribute_layers
    results = {}
    for name in CASES:
        try:
            results[name] = run_case(name, local, graph, local.n_id)
        except Exception as e:  # noqa: BLE001 - reported by name in the parent
            results[name] = f"{type(e).__name__}: {e}"
    plain, px, pei = _plain_gcn()
    user = distribute(CallsPlainGCN(plain, px, pei))
    try:
        user(local.x, graph)
        inner = user.seen[0]
    except Exception as e:  # noqa: BLE001
        inner = f"{type(e).__name__}: {e}"
    changed = sorted(f"{m}.{n}" for (m, n), f in _pyg_globals().items() if before.get((m, n), f) is not f)
    return local.n_id, results, inner, changed, _raising_call_restores(local)


def test_pyg_modules_keep_their_normalisations_after_distribute():
    """distribute() of every normalising layer leaves every ``gcn_norm``/``get_laplacian`` a PyG module
    holds as it was: PyG's own function objects."""
    from torch_geometric.nn.conv import gcn_conv
    from torch_geometric.utils import get_laplacian
    original = gcn_conv.gcn_norm
    before = _pyg_globals()
    assert {("torch_geometric.nn.conv.gcn_conv", "gcn_norm"), ("torch_geometric.nn.conv.cheb_conv", "get_laplacian"),
            ("torch_geometric.nn.models.label_prop", "gcn_norm")} <= set(before)
    for name in CASES:
        distribute(CASES[name]())
    after = _pyg_globals()  # also the modules PyG generated for the classes built since (``*_propagate``)
    assert set(before) <= set(after)
    assert [key for key, f in before.items() if after[key] is not f] == []
    assert all(f is original for (_, n), f in after.items() if n == "gcn_norm")
    assert all(f is get_laplacian for (_, n), f in after.items() if n == "get_laplacian")


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_two_instances_per_class_match_pyg(world_size):
    per_rank = launch(_worker, world_size, timeout=600)
    data = make_graph(world_size)
    failures = []
    for name in CASES:
        expected = run_case(name, data, data.edge_index)
        errors = [results[name] for _, results, *_ in per_rank if isinstance(results[name], str)]
        if errors:
            failures.append(f"{name}: raised {errors[0]}")
            continue
        for call, (ref_out, ref_gx, ref_grads, ref_state) in enumerate(expected):
            out = torch.zeros_like(ref_out)
            gx = torch.zeros_like(ref_gx) if ref_gx is not None else None
            for n_id, results, *_ in per_rank:
                o, g, grads, state = results[name][call]
                out[n_id] = o
                if gx is not None:
                    gx[n_id] = g
                if state != ref_state:
                    failures.append(f"{name} call {call}: (normalize, cache filled) {state}, PyG {ref_state}")
                for k, ref in ref_grads.items():
                    if not torch.allclose(grads[k], ref, atol=1e-4 * (1 + ref.abs().max()), rtol=1e-4):
                        failures.append(f"{name} call {call}: parameter {k} gradient")
            if not torch.allclose(out, ref_out, atol=1e-4 * (1 + ref_out.abs().max()), rtol=1e-4):
                failures.append(f"{name} call {call}: output (max diff {float((out - ref_out).abs().max()):.3g})")
            if gx is not None and not torch.allclose(gx, ref_gx, atol=1e-4 * (1 + ref_gx.abs().max()), rtol=1e-4):
                failures.append(f"{name} call {call}: input gradient")
    plain, px, pei = _plain_gcn()
    for _, _, inner, changed, restored in per_rank:
        assert not isinstance(inner, str), f"a plain GCNConv inside a distributed layer's forward raised {inner}"
        torch.testing.assert_close(inner, plain(px, pei).detach())
        assert changed == [], f"PyG module globals replaced: {changed}"
        assert restored == [(True, None), (True, None), (True, None)]
    assert not failures, f"P={world_size}:\n" + "\n".join(failures)
