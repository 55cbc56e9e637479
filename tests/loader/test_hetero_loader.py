"""``DistributedNeighborLoader`` on ``HeteroData`` shards == the single-process reference of the same
batches (``hetero_global_batches``), in one gloo launch per P = 1..4, on an IGBH-like graph with a
directed relation (``cites``, self-loops), a node type without features (an ``Embedding``), isolated
nodes and, at P = 4, parts owning no ``institute``: every batch's nodes and edges per type, a
mini-batch RGAT training curve (``HeteroConv`` of ``GATConv`` per edge type, 2 layers with fanouts
per edge type -- ``0`` and ``-1`` among them -- and 3 layers with one list for all, trimmed per layer by
``trim_to_layer`` of the dicts, PyG's in the reference), and every trimmed layer's halo bytes: one
exchange per source type, the union of its relations' halos (below their sum)."""
import functools

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, HeteroConv

from pyg_sparsecomm import SparsityAwarePartitioner, comm_counter, distribute, distributed_loss, shard
from pyg_sparsecomm.graph.datasets import igbh_like
from pyg_sparsecomm.loader import (
    DistributedNeighborLoader,
    HeteroNeighborSampling,
    hetero_global_batches,
    trim_to_layer,
)
from pyg_sparsecomm.testing import launch

FEATURES, HIDDEN, HEADS, CLASSES, BATCH, SEED, EPOCHS = 6, 4, 2, 8, 8, 5, 2
CONFIGS = {  # name: (layers, num_neighbors)
    "2 layers, per edge type": (2, {("paper", "cites", "paper"): [3, 2], ("paper", "written_by", "author"): [2, 0],
                                    ("author", "rev_written_by", "paper"): [-1, 2]}),
    "3 layers, one list, trimmed": (3, [3, 2, 2]),
}


def make_graph():
    return igbh_like(num_papers=40, num_authors=30, num_institutes=3, num_fos=6, num_features=FEATURES,
                     featureless=("institute",), isolated=0.2, seed=1)


def fanouts(num_neighbors, edge_type):
    if isinstance(num_neighbors, dict):
        return tuple(num_neighbors.get(edge_type, [2] * len(next(iter(num_neighbors.values())))))
    return tuple(num_neighbors)


def loader_fanouts(num_neighbors, edge_types):
    """A dict naming every relation (those the config leaves out: 2 per hop), or the list."""
    if isinstance(num_neighbors, dict):
        return {et: list(fanouts(num_neighbors, et)) for et in edge_types}
    return num_neighbors


class RGAT(torch.nn.Module):
    """MLPerf's RGAT shape: ``HeteroConv`` of one ``GATConv`` per edge type, then a linear head."""

    def __init__(self, edge_types, num_institutes, layers):
        super().__init__()
        self.embedding = torch.nn.Embedding(num_institutes, FEATURES)
        widths = [FEATURES] + [HIDDEN * HEADS] * layers
        self.convs = torch.nn.ModuleList(
            HeteroConv({et: GATConv((i, i), HIDDEN, heads=HEADS, add_self_loops=False) for et in edge_types},
                       aggr="sum") for i in widths[:-1])
        self.head = torch.nn.Linear(HIDDEN * HEADS, CLASSES)

    def forward(self, x_dict, edge_index_dict, n_id_dict, num_sampled_nodes_dict=None, num_sampled_edges_dict=None):
        x_dict = {**x_dict, "institute": self.embedding(n_id_dict["institute"])}
        for i, conv in enumerate(self.convs):
            if num_sampled_nodes_dict is not None:  # PyG's trim_to_layer of dicts (the package's on a batch)
                x_dict, edge_index_dict, _ = trim_to_layer(i, num_sampled_nodes_dict, num_sampled_edges_dict, x_dict,
                                                           edge_index_dict)
            x_dict = {t: h.relu() for t, h in conv(x_dict, edge_index_dict).items()}
        return self.head(x_dict["paper"])


def optimiser(model):
    """SGD with momentum: Adam's step ~ lr * sign(g) would turn a gradient of 1e-12 instead of 0 (a sum in
    another order) into a full step, so Adam curves drift apart whatever the engine."""
    return torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)


def build(data, layers):
    """The model, the same initial parameters on every rank (a shard knows the graph's sizes)."""
    torch.manual_seed(0)
    institutes = data["institute"].get("global_num_nodes", data["institute"].num_nodes)
    return RGAT(data.edge_types, institutes, layers)


def _train(local, name):
    layers, num_neighbors = CONFIGS[name]
    loader = DistributedNeighborLoader(local, loader_fanouts(num_neighbors, local.edge_types), batch_size=BATCH,
                                       input_nodes=("paper", local["paper"].train_mask), shuffle=True, seed=SEED)
    model = distribute(build(local, layers))
    opt = optimiser(model)
    losses, batches = [], []
    for _ in range(EPOCHS):
        for batch in loader:
            batches.append(({t: batch[t].n_id for t in batch.node_types},
                            {et: batch[et].e_id for et in batch.edge_types},
                            batch["paper"].batch_size))
            opt.zero_grad()
            hops = (batch.num_sampled_nodes_dict, batch.num_sampled_edges_dict) if "trimmed" in name else ()
            out = model(batch.x_dict, batch.adj_dict, batch.n_id_dict, *hops)
            size = batch["paper"].batch_size
            loss = distributed_loss(F.cross_entropy, out[:size], batch["paper"].y[:size])
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return losses, batches


def _bytes(local):
    """Halo bytes of one trimmed forward per batch (2 layers, no sampling ahead: the counter sees the model only)."""
    layers, num_neighbors = CONFIGS["2 layers, per edge type"]
    loader = DistributedNeighborLoader(local, loader_fanouts(num_neighbors, local.edge_types), batch_size=BATCH,
                                       input_nodes=("paper", local["paper"].train_mask), shuffle=True, seed=SEED,
                                       prefetch=0)
    model = distribute(build(local, layers))
    counted = []
    for batch in loader:
        comm_counter().reset()
        with torch.no_grad():
            model(batch.x_dict, batch.adj_dict, batch.n_id_dict, batch.num_sampled_nodes_dict,
                  batch.num_sampled_edges_dict)
        counted.append(comm_counter().bytes_sent("halo"))
    return counted


def _worker(rank, world_size):
    local = shard(SparsityAwarePartitioner(world_size, method="random", seed=1)(make_graph()))
    return {"train": {name: _train(local, name) for name in CONFIGS}, "bytes": _bytes(local)}


def reference(data, name, epoch):
    layers, num_neighbors = CONFIGS[name]
    sampling = HeteroNeighborSampling(batch_size=BATCH, shuffle=True, seed=SEED, input_type="paper",
                                      relations=tuple((et, fanouts(num_neighbors, et)) for et in data.edge_types))
    return hetero_global_batches(data, sampling, data["paper"].train_mask, epoch)


@functools.lru_cache
def reference_curve(name):
    """Single-process PyG (the same model, undistributed) on the reference batches."""
    data = make_graph()
    model = build(data, CONFIGS[name][0])
    opt = optimiser(model)
    losses = []
    for epoch in range(EPOCHS):
        for batch in reference(data, name, epoch):
            x_dict = {t: data[t].x[batch.n_id[t]] for t in data.node_types if "x" in data[t]}
            edge_index_dict = {et: _local_edges(data, et, batch) for et in data.edge_types}
            opt.zero_grad()
            hops = (batch.num_sampled_nodes, batch.num_sampled_edges) if "trimmed" in name else ()
            out = model(x_dict, edge_index_dict, batch.n_id, *hops)
            seeds = batch.n_id["paper"][:batch.num_seeds]
            loss = F.cross_entropy(out[:batch.num_seeds], data["paper"].y[seeds])
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return losses


def _local_edges(data, edge_type, batch):
    src, _, dst = edge_type
    position = {t: torch.full((data[t].num_nodes,), -1) for t in (src, dst)}
    for t in (src, dst):
        position[t][batch.n_id[t]] = torch.arange(batch.n_id[t].numel())
    edge_index = data[edge_type].edge_index[:, batch.e_id[edge_type]]
    return torch.stack([position[src][edge_index[0]], position[dst][edge_index[1]]])


_RUNS: dict = {}


def run(world_size):
    if world_size not in _RUNS:
        _RUNS[world_size] = launch(_worker, world_size, timeout=600)
    return _RUNS[world_size]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_minibatch_rgat_training_curve_equals_the_single_process_reference(world_size):
    per_rank = run(world_size)
    data = make_graph()
    for name in CONFIGS:
        batches = [b for epoch in range(EPOCHS) for b in reference(data, name, epoch)]
        for i, batch in enumerate(batches):  # the same batches, split over the ranks
            parts = [r["train"][name][1][i] for r in per_rank]
            for t in data.node_types:
                assert sorted(torch.cat([p[0][t] for p in parts]).tolist()) == sorted(batch.n_id[t].tolist())
            for et in data.edge_types:
                assert sorted(torch.cat([p[1][et] for p in parts]).tolist()) == sorted(batch.e_id[et].tolist())
            assert sum(p[2] for p in parts) == batch.num_seeds
        expected = reference_curve(name)
        assert len(expected) == len(batches) > 4
        for r in per_rank:
            assert r["train"][name][0] == pytest.approx(expected, rel=1e-4, abs=1e-5), (name, world_size)


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_source_type_moves_the_union_of_its_relations_halos_once(world_size):
    """Layer ``l`` (trimmed: the edges of hops ``1 .. L - l``) moves, per source type, every (source
    node, destination part) pair of those cut edges of all relations reading it once, at its input width."""
    per_rank = [r["bytes"] for r in run(world_size)]
    data = SparsityAwarePartitioner(world_size, method="random", seed=1)(make_graph())
    union_total = per_relation_total = 0
    for i, batch in enumerate(reference(data, "2 layers, per edge type", 0)):
        expected = 0
        for layer, width in enumerate((FEATURES, HIDDEN * HEADS)):
            union = {t: set() for t in data.node_types}
            for (src, rel, dst), e_id in batch.e_id.items():
                kept = e_id[:sum(batch.num_sampled_edges[(src, rel, dst)][:2 - layer])]
                s, d = data[(src, rel, dst)].edge_index[:, kept]
                cut = data[src].part[s] != data[dst].part[d]
                pairs = set(zip(s[cut].tolist(), data[dst].part[d[cut]].tolist(), strict=True))
                union[src] |= pairs
                per_relation_total += len(pairs)
            rows = sum(len(p) for p in union.values())
            expected += rows * width * 4
            union_total += rows
        assert sum(r[i] for r in per_rank) == expected, i
    assert 0 < union_total < per_relation_total


def test_bad_arguments_name_the_fix():
    local = shard(SparsityAwarePartitioner(1, method="random")(make_graph()), rank=0, world_size=1)
    cases = [
        (dict(num_neighbors=[2], input_nodes=local["paper"].train_mask), r"\(node type, ids or mask\)"),
        (dict(num_neighbors=[2], input_nodes=("venue", None)), r"node type 'venue', which the graph does not have"),
        (dict(num_neighbors={("paper", "cites", "paper"): [2]}, input_nodes="paper"),
         r"no fanouts for edge type \('paper', 'written_by', 'author'\)"),
        (dict(num_neighbors={**{et: [2] for et in local.edge_types}, ("paper", "x", "fos"): [1]}, input_nodes="paper"),
         r"edge type\(s\) \[\('paper', 'x', 'fos'\)\] the graph does not have"),
        (dict(num_neighbors={**{et: [2] for et in local.edge_types}, ("paper", "cites", "paper"): [2, 1]},
              input_nodes="paper"), "the same number of hops"),
        (dict(num_neighbors=[0, 2], input_nodes="paper"), "hop 1 samples no relation"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            DistributedNeighborLoader(local, batch_size=4, **kwargs)
