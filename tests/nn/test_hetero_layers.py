"""``HGTConv``, ``HANConv`` (on ``HeteroData`` shards) and ``RGCNConv``, ``FastRGCNConv``, ``RGATConv``
(on the shards of ``to_homogeneous()``, edge types carried) under ``distribute()`` equal single-process
PyG (outputs, input gradients, parameter gradients) at P = 1..4 in one launch, on the graph of
test_hetero_models: a directed relation with self-loops, a featureless type (an ``Embedding``; a
``HeteroDictLinear`` projects HAN's inputs; RGCN's own node embedding with ``x = n_id`` or ``None``), isolated
nodes and, at P = 4, a part owning no ``institute``.  HGT and HAN exchange every source type once
per layer: the counted bytes are the predicted union of the relations' halos at the width of the
rows they exchange (HGT: keys and values; HAN: the projected rows)."""
import warnings

import pytest
import torch
import torch.distributed as dist
from test_hetero_models import OUT, WORLD_SIZES, F, H, make_graph
from torch_geometric.nn import FastRGCNConv, HANConv, HeteroConv, HGTConv, RGATConv, RGCNConv
from torch_geometric.nn.dense import HeteroDictLinear

from pyg_sparsecomm import LossNormalisationWarning, SparsityAwarePartitioner, comm_counter, distribute, shard
from pyg_sparsecomm import sync_gradients as sync
from pyg_sparsecomm.testing import launch

HETERO = ("HGT", "HAN")
HOMOGENEOUS = ("RGCN", "FastRGCN", "RGAT", "RGCN(x=n_id)", "RGCN(x=None)")
HEADS = 2


class HGT(torch.nn.Module):
    """Two ``HGTConv`` (the first with its gated skip: ``F`` in, ``F`` out); ``institute`` embedded."""

    def __init__(self, data) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(data["institute"].num_nodes, F)
        self.conv1 = HGTConv(F, F, data.metadata(), heads=HEADS)
        self.conv2 = HGTConv(F, OUT, data.metadata(), heads=HEADS)

    def forward(self, x_dict, adj_dict, n_id_dict):
        x_dict = {**x_dict, "institute": self.emb(n_id_dict["institute"])}
        h = {t: v.relu() for t, v in self.conv1(x_dict, adj_dict).items()}
        return self.conv2(h, adj_dict)


class HAN(torch.nn.Module):
    """``HeteroDictLinear`` then two ``HANConv``; ``institute`` embedded."""

    def __init__(self, data) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(data["institute"].num_nodes, F)
        self.lin = HeteroDictLinear(F, H, types=data.node_types)
        self.conv1 = HANConv(H, 2 * H, data.metadata(), heads=HEADS)
        self.conv2 = HANConv(2 * H, OUT, data.metadata(), heads=HEADS)

    def forward(self, x_dict, adj_dict, n_id_dict):
        x_dict = self.lin({**x_dict, "institute": self.emb(n_id_dict["institute"])})
        return self.conv2(self.conv1(x_dict, adj_dict), adj_dict)


class Relational(torch.nn.Module):
    """Two relational layers on ``to_homogeneous()``; the rows of the featureless ``institute`` (NaN
    there) from an ``Embedding`` of their id within the type, or RGCN's own embedding (``x = n_id``)."""

    def __init__(self, name, data) -> None:
        super().__init__()
        R, N = len(data.edge_types), sum(data[t].num_nodes for t in data.node_types)
        self.institute, self.offset = data.node_types.index("institute"), data["paper"].num_nodes + data[
            "author"].num_nodes
        self.emb = torch.nn.Embedding(data["institute"].num_nodes, F)
        self.conv1, self.conv2 = {
            "RGCN": lambda: (RGCNConv(F, H, R, num_bases=2), RGCNConv(H, OUT, R, aggr="add")),
            "FastRGCN": lambda: (FastRGCNConv(F, H, R), FastRGCNConv(H, OUT, R, num_blocks=2)),
            "RGAT": lambda: (RGATConv(F, H, R, heads=HEADS), RGATConv(HEADS * H, OUT, R)),
            "RGCN(x=n_id)": lambda: (RGCNConv(N, H, R), RGCNConv(H, OUT, R)),
            "RGCN(x=None)": lambda: (RGCNConv(N, H, R), RGCNConv(H, OUT, R)),
        }[name]()

    def forward(self, x, adj, edge_type, node_type, n_id):
        if x is not None and x.is_floating_point():
            ids = (n_id - self.offset).clamp(0, self.emb.num_embeddings - 1)
            x = torch.where((node_type == self.institute).unsqueeze(-1), self.emb(ids), x)
        return self.conv2(self.conv1(x, adj, edge_type).relu(), adj, edge_type)


def build(name, data):
    torch.manual_seed(0)
    return {"HGT": HGT, "HAN": HAN}[name](data) if name in HETERO else Relational(name, data)


def upstream(sizes: dict) -> dict:
    gen = torch.Generator().manual_seed(5)
    return {t: torch.randn(n, OUT, generator=gen) for t, n in sizes.items()}


def run_hetero(model, x_dict, adj_dict, n_id, up):
    x_dict = {t: x.clone().requires_grad_() for t, x in x_dict.items()}
    out = model(x_dict, adj_dict, n_id)
    sum((out[t] * up[t][n_id[t]]).sum() for t in out).backward()
    return {t: o.detach() for t, o in out.items()}, {t: x.grad for t, x in x_dict.items()}


def run_homogeneous(name, model, homo, adj, n_id, up):
    x = {"RGCN(x=n_id)": n_id, "RGCN(x=None)": None}.get(name, homo.x.clone().requires_grad_())
    out = model(x, adj, homo.edge_type, homo.node_type, n_id)
    (out * up["node"][n_id]).sum().backward()
    return {"node": out.detach()}, {"node": None if x is None else x.grad}


def run(name, model, graph, up, group=None, synchronise=False):
    """``(outputs, input gradients, parameter gradients)`` by node type (``"node"``: homogeneous)."""
    if name in HETERO:
        n_id = {t: graph[t].n_id if "n_id" in graph[t] else torch.arange(graph[t].num_nodes) for t in graph.node_types}
        adj = {et: graph[et].adj for et in graph.edge_types} if synchronise else graph.edge_index_dict
        out, grad_x = run_hetero(model, graph.x_dict, adj, n_id, up)
    else:
        n_id = graph.n_id if synchronise else torch.arange(graph.num_nodes)
        out, grad_x = run_homogeneous(name, model, graph, graph.adj if synchronise else graph.edge_index, n_id, up)
        n_id = {"node": n_id}
    if synchronise:
        sync(model, group)
    return n_id, out, grad_x, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def graphs():
    data = make_graph()
    return data, data.to_homogeneous()


def sizes(data, homo):
    return {**{t: data[t].num_nodes for t in data.node_types}, "node": homo.num_nodes}


def _worker(rank, world_size):
    """Every configuration of this file, test_hetero_models and test_hetero_gcn at P = 1..4, in one job."""
    import test_hetero_gcn
    import test_hetero_models
    data, homo = graphs()
    up = upstream(sizes(data, homo))
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the loss is a plain sum here
    # every rank joins every new_group call, in one order, before members make their own groups
    groups = {P: dist.new_group(list(range(P))) for P in WORLD_SIZES}
    results = {}
    for P, group in groups.items():
        if rank >= P:
            continue
        local = shard(SparsityAwarePartitioner(P, method="random", seed=2)(data), group=group)
        results.update(test_hetero_models.run_models(P, group, local, data))
        results.update(test_hetero_gcn.run_models(P, group))
        local_homo = shard(SparsityAwarePartitioner(P, method="random", seed=2)(homo), group=group)
        for name in HETERO + HOMOGENEOUS:
            model = distribute(build(name, data), group=group, sync_gradients=False)
            comm_counter().reset()
            result = run(name, model, local if name in HETERO else local_homo, up, group, synchronise=True)
            counter = comm_counter()
            results[P, name] = (*result, {k: counter.bytes_received(k) for k in ("halo", "halo_grad")},
                                counter.calls["halo"])
    return results


def launch_all():
    """The heterogeneous tests' one launch (:func:`conftest.hetero_results`)."""
    return launch(_worker, max(WORLD_SIZES), timeout=600)


@pytest.fixture(scope="module")
def distributed_results(hetero_results):
    return hetero_results


def test_the_homogeneous_graph_keeps_every_corner():
    data, homo = graphs()
    institute = homo.node_type == data.node_types.index("institute")
    assert bool(homo.x[institute].isnan().all()) and not bool(homo.x[~institute].isnan().any())
    part = SparsityAwarePartitioner(4, method="random", seed=2)(homo).part
    assert int(institute.sum()) == 3 and len(set(part[institute].tolist())) < 4  # a part owns no institute
    assert int(homo.edge_type.max()) + 1 == len(data.edge_types)


@pytest.mark.parametrize("name", HETERO + HOMOGENEOUS)
def test_layers_equal_single_process_pyg(distributed_results, subtests, name):
    data, homo = graphs()
    _, out, grad_x, grad_p = run(name, build(name, data), data if name in HETERO else homo,
                                 upstream(sizes(data, homo)))
    for P in WORLD_SIZES:
        for rank in range(P):
            with subtests.test(P=P, rank=rank):
                n_id, d_out, d_grad_x, d_grad_p, _, _ = distributed_results[rank][P, name]
                assert d_out.keys() == out.keys() and d_grad_p.keys() >= grad_p.keys()
                for t in out:
                    torch.testing.assert_close(d_out[t], out[t][n_id[t]], atol=1e-5, rtol=1e-4)
                assert d_grad_x.keys() == grad_x.keys()
                for t, g in grad_x.items():
                    if g is not None:  # RGCN(x=n_id), RGCN(x=None): no features
                        torch.testing.assert_close(d_grad_x[t], g[n_id[t]], atol=1e-5, rtol=1e-4)
                for k in grad_p:
                    torch.testing.assert_close(d_grad_p[k], grad_p[k], atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.parametrize("name, width", [("HGT", 2 * F + 2 * OUT), ("HAN", 2 * H + OUT)])
def test_one_exchange_per_source_type_moves_the_union(distributed_results, name, width):
    """Forward halos and backward halo gradients == the union of the relations' halos per source
    type (HeteroCommStats), at the exchanged width summed over the two layers (float32)."""
    data = make_graph()
    for P in (2, 3, 4):
        stats = SparsityAwarePartitioner(P, method="random", seed=2)(data).comm_stats
        counted = [distributed_results[r][P, name][4] for r in range(P)]
        for kind in ("halo", "halo_grad"):
            assert sum(c[kind] for c in counted) == stats.total_rows * width * 4, (P, kind)
        assert all(distributed_results[r][P, name][5] == 2 * len(stats.sources) for r in range(P))


class _OwnHGT(HGTConv):
    """A user's subclass: its forward may differ from the one ``DistributedHGTConv`` distributes."""


def test_what_cannot_run_exactly_is_refused_by_name():
    data, homo = graphs()
    local = shard(SparsityAwarePartitioner(1, method="random")(data), rank=0, world_size=1)
    x_dict = {**local.x_dict, "institute": torch.randn(local["institute"].num_nodes, F)}
    cites = ("paper", "cites", "paper")
    rgcn = distribute(HeteroConv({cites: RGCNConv(F, OUT, 1)}))
    with pytest.raises(NotImplementedError, match=r"RGCNConv takes edge_type over one homogeneous graph, not a "
                                                  r"relation of a heterogeneous one: call it on data.to_homogeneous"):
        rgcn(x_dict, local.adj_dict)
    with pytest.raises(ValueError, match=r"cannot be made homogeneous .* call data.to_homogeneous\(\) on the whole"):
        local.to_homogeneous()
    with pytest.raises(NotImplementedError, match=r"_OwnHGT got a heterogeneous shard's adj_dict, which it cannot"):
        distribute(_OwnHGT(F, OUT, data.metadata()))(x_dict, local.adj_dict)
    hgt = distribute(HGTConv(F, OUT, data.metadata()), algorithm="oblivious")
    with pytest.raises(NotImplementedError, match=r"1D exchange only \(got algorithm='oblivious'"):
        hgt(x_dict, local.adj_dict)
    han = distribute(HANConv(F, OUT, data.metadata()))
    with pytest.raises(ValueError, match=r"HANConv on relation \('paper', 'written_by', 'author'\): the destination "
                                         r"features have 3 rows, but this rank owns 30 'author' nodes"):
        han({**x_dict, "author": torch.randn(3, F)}, local.adj_dict)
    local_homo = shard(SparsityAwarePartitioner(1, method="random")(homo), rank=0, world_size=1)
    fast = distribute(FastRGCNConv(homo.num_nodes, OUT, len(data.edge_types)))
    with pytest.raises(NotImplementedError, match=r"FastRGCNConv without features cannot run on a shard: .*index"):
        fast(None, local_homo.adj, local_homo.edge_type)
