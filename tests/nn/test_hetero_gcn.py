"""``GCNConv``, ``SGConv``, ``TAGConv``, ``ChebConv``, ``ARMAConv`` and ``SSGConv`` on relations
between nodes of one type of ``HeteroData`` shards (``to_hetero`` of a GCN, sum and mean;
``HeteroConv`` mixing them with ``SAGEConv`` and ``GATConv`` on the relations between two types)
under ``distribute()`` equal single-process PyG (outputs, input gradients, parameter gradients) at P
= 1..4, in the heterogeneous tests' one launch (:func:`conftest.hetero_results`). The graph is
test_hetero_models' (a featureless ``institute`` embedded, isolated nodes, at P = 4 a part owning no
``institute``) with relations within ``author`` (two: ``to_hetero``'s ``aggr`` combines them) and
within ``institute``, directed with self-loops, weighted (``edge_weight`` stored on the shards,
applied only where passed); ``cached=True`` layers are called twice, and every model is first tried
on the whole graph in one process (filling those layers' PyG caches) before ``distribute()``. A ``gcn_norm`` layer on a
relation between two types raises PyG's ``ValueError``."""
import copy

import pytest
import test_hetero_models
import torch
from test_hetero_models import OUT, WORLD_SIZES, F, H, make_graph
from torch_geometric.nn import (
    ARMAConv,
    ChebConv,
    GATConv,
    GCN2Conv,
    GCNConv,
    HeteroConv,
    SAGEConv,
    SGConv,
    SSGConv,
    TAGConv,
    to_hetero,
)

from pyg_sparsecomm import SparsityAwarePartitioner, distribute, shard
from pyg_sparsecomm.loader import DistributedNeighborLoader

CITES, COAUTHORS, MENTORS, PARTNERS = (("paper", "cites", "paper"), ("author", "coauthors", "author"),
                                       ("author", "mentors", "author"), ("institute", "partners", "institute"))
SAME_TYPE = [CITES, COAUTHORS, MENTORS, PARTNERS]
WEIGHTED = (CITES, COAUTHORS, PARTNERS)
MODELS = ("to_hetero(GCN, sum)", "to_hetero(GCN weighted cached, mean)",
          "HeteroConv(GCN, SG, TAG, Cheb, ARMA, SSG, SAGE, GAT)")


def make_same_type_graph():
    """test_hetero_models' graph with ``coauthors`` and ``mentors`` (authors 0..23 receive edges,
    the rest none) and ``partners`` (3 institutes, a self-loop), and weights on three relations."""
    data = make_graph()
    gen = torch.Generator().manual_seed(7)
    for edge_type, num_edges in ((COAUTHORS, 50), (MENTORS, 40)):
        src = torch.randint(0, data["author"].num_nodes, (num_edges,), generator=gen)
        dst = torch.randint(0, 24, (num_edges,), generator=gen)
        data[edge_type].edge_index = torch.stack([torch.cat([src, torch.tensor([3])]),
                                                  torch.cat([dst, torch.tensor([3])])])  # a self-loop
    data[PARTNERS].edge_index = torch.tensor([[0, 1, 1, 2], [1, 1, 0, 0]])
    for edge_type in WEIGHTED:
        data[edge_type].edge_weight = torch.rand(data[edge_type].num_edges, generator=gen) + 0.5
    return data


class GCN(torch.nn.Module):
    def __init__(self, add_self_loops=True) -> None:
        super().__init__()
        self.conv1 = GCNConv(F, H, add_self_loops=add_self_loops)
        self.conv2 = GCNConv(H, OUT, add_self_loops=add_self_loops)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class WeightedGCN(torch.nn.Module):
    """Cached layers (``conv2`` called twice: the second call uses its cache), ``improved=True``,
    ``normalize=False``; weighted by ``edge_weight``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = GCNConv(F, H, cached=True)
        self.conv2 = GCNConv(H, H, improved=True, cached=True)
        self.conv3 = GCNConv(H, OUT, normalize=False)

    def forward(self, x, edge_index, edge_weight):
        h = self.conv2(self.conv1(x, edge_index, edge_weight).relu(), edge_index, edge_weight).relu()
        h = self.conv2(h, edge_index, edge_weight).relu()
        return self.conv3(h, edge_index, edge_weight)


def mixed_layer(edge_types, i, o, aggr, first):
    """``HeteroConv``: the ``gcn_norm`` family within a type, ``SAGEConv``/``GATConv`` between types."""
    within = {CITES: GCNConv(i, o) if first else TAGConv(i, o, K=2),
              COAUTHORS: SGConv(i, o, K=2) if first else GCNConv(i, o),
              MENTORS: TAGConv(i, o, K=2) if first else ChebConv(i, o, K=2),
              PARTNERS: ARMAConv(i, o, num_layers=2) if first else SSGConv(i, o, alpha=0.1, K=2)}
    return HeteroConv({et: within.get(et) or (SAGEConv((i, i), o) if et[1].startswith("rev_")
                                              else GATConv((i, i), o, add_self_loops=False))
                       for et in edge_types}, aggr=aggr)


class Mixed(torch.nn.Module):
    def __init__(self, edge_types) -> None:
        super().__init__()
        self.conv1 = mixed_layer(edge_types, F, H, "sum", True)
        self.conv2 = mixed_layer(edge_types, H, OUT, "mean", False)

    def forward(self, x_dict, adj_dict, edge_weight_dict):
        h = {t: v.relu() for t, v in self.conv1(x_dict, adj_dict, edge_weight_dict=edge_weight_dict).items()}
        return self.conv2(h, adj_dict, edge_weight_dict=edge_weight_dict)


class Embedded(torch.nn.Module):
    """``institute`` rows from an ``Embedding``; ``edge_weight_dict`` (set per graph by :func:`weighted`)
    passed on where ``weights``."""

    def __init__(self, net, num_institutes, weights) -> None:
        super().__init__()
        self.emb, self.net, self.weights = torch.nn.Embedding(num_institutes, F), net, weights
        self.edge_weight_dict: dict = {}

    def forward(self, x_dict, adj_dict, n_id_dict):
        x_dict = {**x_dict, "institute": self.emb(n_id_dict["institute"])}
        if self.weights:
            return self.net(x_dict, adj_dict, self.edge_weight_dict)
        return self.net(x_dict, adj_dict)


def build(name, data):
    torch.manual_seed(0)
    metadata = (["paper", "author", "institute"], SAME_TYPE)
    net, weights = {
        "to_hetero(GCN, sum)": lambda: (to_hetero(GCN(), metadata, aggr="sum"), False),
        "to_hetero(GCN weighted cached, mean)": lambda: (to_hetero(WeightedGCN(), metadata, aggr="mean"), True),
        "HeteroConv(GCN, SG, TAG, Cheb, ARMA, SSG, SAGE, GAT)": lambda: (Mixed(data.edge_types), True)}[name]()
    return Embedded(net, data["institute"].num_nodes, weights)


def weighted(model, graph):
    """``model`` weighting ``WEIGHTED`` by ``graph``'s ``edge_weight`` (the whole graph's or a shard's)."""
    model.edge_weight_dict = {et: graph[et].edge_weight for et in WEIGHTED}
    return model


def tried_first(model, data):
    """``model`` called once on the whole graph, as a user trying it in one process before
    ``distribute()`` would: its ``cached=True`` layers' PyG caches hold the whole graph's
    normalisation, which ``distribute()`` must not reuse on a shard."""
    with torch.no_grad():
        weighted(model, data)(data.x_dict, data.edge_index_dict,
                              {t: torch.arange(data[t].num_nodes) for t in data.node_types})
    return model


def run_models(P, group):
    """This rank's ``{(P, name): results}`` of every model of ``MODELS`` (see the module doc)."""
    data = make_same_type_graph()
    local = shard(SparsityAwarePartitioner(P, method="random", seed=2)(data), group=group)
    return test_hetero_models.run_models(P, group, local, data, MODELS,
                                         lambda name, data: weighted(tried_first(build(name, data), data), local))


@pytest.fixture(scope="module")
def distributed_results(hetero_results):
    return hetero_results


def test_the_same_type_relations_have_every_corner():
    data = make_same_type_graph()
    for edge_type in SAME_TYPE:
        src, dst = data[edge_type].edge_index
        assert bool((src == dst).any()), f"no self-loop in {edge_type}"
        pairs = set(zip(src.tolist(), dst.tolist(), strict=True))
        assert any((d, s) not in pairs for s, d in pairs), f"{edge_type} is symmetric"
        received = torch.zeros(data[edge_type[0]].num_nodes, dtype=torch.bool).index_fill_(0, dst, True)
        assert not bool(received.all()), f"every node receives in {edge_type}"
    part = SparsityAwarePartitioner(4, method="random", seed=2)(data)["institute"].part
    assert part.bincount(minlength=4).min() == 0  # at P = 4 a part owns no institute (and no partners edge)


@pytest.mark.parametrize("name", MODELS)
def test_same_type_gcn_layers_equal_single_process_pyg(distributed_results, subtests, name):
    data = make_same_type_graph()
    n_id = {t: torch.arange(data[t].num_nodes) for t in data.node_types}
    out, grad_x, grad_p = test_hetero_models.run(weighted(build(name, data), data), data.x_dict,
                                                 data.edge_index_dict, n_id, test_hetero_models.upstream(data))
    assert out.keys() >= {"paper", "author", "institute"}
    for P in WORLD_SIZES:
        for rank in range(P):
            with subtests.test(P=P, rank=rank):
                d_n_id, d_out, d_grad_x, d_grad_p, _, _ = distributed_results[rank][P, name]
                assert d_out.keys() == out.keys() and d_grad_p.keys() == grad_p.keys()
                for t in out:
                    torch.testing.assert_close(d_out[t], out[t][d_n_id[t]], atol=1e-5, rtol=1e-4)
                assert d_grad_x.keys() == grad_x.keys()
                for t, g in grad_x.items():  # None: a type the model does not read (to_hetero: fos)
                    assert (d_grad_x[t] is None) == (g is None), t
                    if g is not None:
                        torch.testing.assert_close(d_grad_x[t], g[d_n_id[t]], atol=1e-5, rtol=1e-4)
                for k in grad_p:
                    torch.testing.assert_close(d_grad_p[k], grad_p[k], atol=1e-5, rtol=1e-4, msg=k)


def test_a_same_type_relation_exchanges_transformed_rows_and_one_degree_column(distributed_results):
    """``to_hetero(GCN)``: per layer and relation, the source type's halo (the union over the
    relations reading it) at the layer's output width plus one column of degrees forward, the
    output width backward (float32)."""
    data = make_same_type_graph()
    for P in (2, 3, 4):
        sources = SparsityAwarePartitioner(P, method="random", seed=2)(data).comm_stats.sources
        rows = sum(sources[src].total_rows for src, _, _ in SAME_TYPE)
        counted = [distributed_results[r][P, "to_hetero(GCN, sum)"][4] for r in range(P)]
        assert sum(c["halo"] for c in counted) == rows * (H + 1 + OUT + 1) * 4, P
        assert sum(c["halo_grad"] for c in counted) == rows * (H + OUT) * 4, P


@pytest.mark.filterwarnings("ignore:There exist node types")  # PyG's: a type no relation reaches, on purpose
def test_gcn_norm_layers_between_two_types_raise_as_pyg():
    data = make_same_type_graph()
    local = shard(SparsityAwarePartitioner(1, method="random")(data), rank=0, world_size=1)
    x_dict = {**local.x_dict, "institute": torch.randn(local["institute"].num_nodes, F)}
    written_by = ("paper", "written_by", "author")
    with pytest.raises(ValueError, match="'add_self_loops' attribute set to 'True'"):  # PyG's own, when built
        to_hetero(GCN(), data.metadata())
    single = HeteroConv({written_by: GCNConv(F, OUT, add_self_loops=False)})
    with pytest.raises(ValueError, match="does not support bipartite message passing"):  # PyG's own, when called
        single(data.x_dict, data.edge_index_dict)
    # PyG's SGConv, TAGConv fail on x.size() of the tuple
    for conv in (GCNConv(F, OUT, add_self_loops=False), SGConv(F, OUT, add_self_loops=False), ChebConv(F, OUT, K=2)):
        name = type(conv).__name__
        with pytest.raises(ValueError, match=rf"{name} on relation \('paper', 'written_by', 'author'\): '{name}' "
                                             r"received a tuple .* does not support bipartite message passing"):
            distribute(HeteroConv({written_by: conv}))(x_dict, local.adj_dict)
    full = to_hetero(GCN(add_self_loops=False), data.metadata(), aggr="sum")
    with pytest.raises(ValueError, match="does not support bipartite message passing"):
        copy.deepcopy(full)({**data.x_dict, "institute": x_dict["institute"]}, data.edge_index_dict)
    with pytest.raises(ValueError, match=r"GCNConv on relation .*: 'GCNConv' received a tuple"):
        distribute(full)(x_dict, local.adj_dict)
    gcn = distribute(HeteroConv({CITES: GCNConv(F, OUT)}))
    with pytest.raises(ValueError, match=r"GCNConv: x has 3 rows but this rank owns 40 rows"):
        gcn({"paper": torch.randn(3, F)}, local.adj_dict)
    with pytest.raises(ValueError, match=r"GCNConv: edge_weight has shape \[2\]: 2 rows but this rank's adjacency "
                                         rf"has {local[CITES].num_edges} edges"):
        gcn(x_dict, local.adj_dict, edge_weight_dict={CITES: torch.ones(2)})
    oblivious = distribute(HeteroConv({CITES: GCNConv(F, OUT)}), algorithm="oblivious")
    with pytest.raises(NotImplementedError, match=r"1D exchange only \(got algorithm='oblivious'"):
        oblivious(x_dict, local.adj_dict)
    batch = next(iter(DistributedNeighborLoader(local, num_neighbors=[3], input_nodes="paper", batch_size=8)))
    with pytest.raises(NotImplementedError, match=r"GCNConv on a relation of a heterogeneous mini-batch is not "
                                                  r"supported yet"):
        distribute(HeteroConv({CITES: GCNConv(F, OUT)}))(batch.x_dict, batch.adj_dict)
    gcn2 = distribute(HeteroConv({CITES: GCN2Conv(F, alpha=0.1)}))
    with pytest.raises(NotImplementedError, match=r"GCN2Conv on a relation of a heterogeneous graph is not supported "
                                                  r"yet .*; on relations between nodes of one type also GCNConv, "
                                                  r"SGConv, TAGConv, ChebConv, ARMAConv, SSGConv, LGConv\)"):
        gcn2(x_dict, local.adj_dict)
