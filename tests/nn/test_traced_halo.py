"""The halo exchange as a registered custom op (``comm/traced_exchange.py``) and the traced SpMM of a
linear aggregation (``nn/runtime/traced_spmm.py``) under ``torch.compile`` (issue 57, item 6), in real
gloo runs at P = 1, 2, 3 (a directed graph: nothing assumes A = A^T):

* compiled with ``fullgraph=True`` (any graph break fails) and ``explain``'s break count 0;
* outputs, input gradients and edge-weight gradients equal eager's and the whole graph's reference;
* the op keeps the agreement header: one rank announcing a change makes every peer's compiled
  exchange run its agreement and exchange again, with the same halo.
"""
import torch
import torch._dynamo
from graphs import make_cases

from pyg_sparsecomm import shard
from pyg_sparsecomm.comm.halo import announce_rows
from pyg_sparsecomm.comm.halo_options import EXACT
from pyg_sparsecomm.nn.runtime.checks import AgreementWatch
from pyg_sparsecomm.nn.runtime.port import WatchedExchanger
from pyg_sparsecomm.nn.runtime.traced_spmm import traced_aggregation
from pyg_sparsecomm.testing import launch

WIDTH = 3


def _rows(num_nodes: int, seed: int) -> torch.Tensor:
    return torch.randn(num_nodes, WIDTH, generator=torch.Generator().manual_seed(seed))


def _weight(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """An edge weight that is a function of the edge's global ends (the same on every rank)."""
    return torch.sin(src.double() * 7 + dst.double() * 3).float() + 2


def _aggregate(rank, world_size):
    return {aggr: _aggregate_one(world_size, aggr) for aggr in ("add", "mean")}


def _aggregate_one(world_size, aggr):
    data = make_cases(world_size)["directed"]
    local = shard(data)
    adj, plan = local.adj, local.adj.plan
    edge_index = adj.edge_index()
    columns = torch.cat([plan.n_id, plan.halo_n_id])
    weight = _weight(columns[edge_index[0]], plan.n_id[edge_index[1]])
    rows, up = _rows(data.num_nodes, 0)[plan.n_id], _rows(data.num_nodes, 1)[plan.n_id]
    exchanger = WatchedExchanger(plan, None).traced()

    def f(x, w):
        return traced_aggregation(exchanger.exchange, plan.num_owned, edge_index, w, aggr, x)
    torch._dynamo.reset()
    breaks = torch._dynamo.explain(f)(rows, weight).graph_break_count
    out = {"breaks": breaks, "n_id": plan.n_id}
    for name, fn in (("eager", f), ("compiled", torch.compile(f, backend="aot_eager", fullgraph=True))):
        x, w = rows.clone().requires_grad_(), weight.clone().requires_grad_()
        y = fn(x, w)
        (y * up).sum().backward()
        out[name] = (y.detach(), x.grad, w.grad)
    return out


def _reference(data, aggr):
    """The whole graph's aggregation and the gradient of sum(out * up) in its rows."""
    src, dst = data.edge_index
    h = _rows(data.num_nodes, 0).requires_grad_()
    msg = h[src] * _weight(src, dst).view(-1, 1)
    out = torch.zeros(data.num_nodes, WIDTH).index_add(0, dst, msg)
    if aggr == "mean":
        out = out / torch.bincount(dst, minlength=data.num_nodes).clamp(min=1).view(-1, 1)
    (out * _rows(data.num_nodes, 1)).sum().backward()
    return out.detach(), h.grad


def test_traced_aggregation_compiles_whole_and_equals_the_reference():
    failures = []
    for world_size in (1, 2, 3):
        data = make_cases(world_size)["directed"]
        results = launch(_aggregate, world_size, timeout=300)
        for aggr in ("add", "mean"):
            out, grad = _reference(data, aggr)
            for rank, res in enumerate(r[aggr] for r in results):
                where = f"P = {world_size} rank {rank} {aggr}"
                if res["breaks"] != 0:
                    failures.append(f"{where}: {res['breaks']} graph breaks")
                for name in ("eager", "compiled"):
                    y, gx, gw = res[name]
                    if not torch.allclose(y, out[res["n_id"]], atol=1e-5):
                        failures.append(f"{where} {name}: output")
                    if not torch.allclose(gx, grad[res["n_id"]], atol=1e-5):
                        failures.append(f"{where} {name}: input gradient")
                    if not torch.allclose(gw, res["eager"][2], atol=1e-5):
                        failures.append(f"{where} {name}: edge-weight gradient")
    assert not failures, "; ".join(failures)


def _agreement(rank, world_size):
    data = make_cases(world_size)["directed"]
    plan = shard(data).adj.plan
    watch, agreed = AgreementWatch(), []
    exchanger = WatchedExchanger(plan, None, watch=watch, watched_options=EXACT).traced()
    compiled = torch.compile(lambda x: exchanger.exchange(x) * 1, backend="aot_eager", fullgraph=True)
    x = _rows(data.num_nodes, 0)[plan.n_id]
    halos = []
    for step in range(3):
        if step == 2 and rank == 0:  # this rank's input changed: it announces, its peers agree
            announce_rows(watch.recorded)
        watch.begin(lambda: agreed.append(step))
        halos.append(compiled(x))
        headered = watch.headered
    return halos, agreed, headered, plan.halo_n_id


def test_compiled_exchange_keeps_the_agreement_header():
    for world_size in (2, 3):
        data = make_cases(world_size)["directed"]
        for rank, (halos, agreed, headered, halo_n_id) in enumerate(launch(_agreement, world_size, timeout=300)):
            where = f"P = {world_size} rank {rank}"
            assert headered, where
            for halo in halos:
                assert torch.equal(halo, _rows(data.num_nodes, 0)[halo_n_id]), where
            assert agreed == ([] if rank == 0 else [2]), f"{where}: agreed at steps {agreed}"
