"""Training a heterogeneous model on ``HeteroData`` shards: the loss curve of
``distribute(to_hetero(...))`` (of ``SAGEConv``, and of ``GCNConv`` on ``cites``), of ``HGTConv`` and
of ``HANConv`` with ``distribute()``'s own gradient synchronisation and ``distributed_loss`` equals
single-process PyG's; what the heterogeneous path does not cover is refused by name."""
import pytest
import torch
import torch.nn.functional as F
from test_hetero_gcn import GCN
from test_hetero_layers import HETERO as HETERO_LAYERS
from test_hetero_layers import build as build_layers
from test_hetero_models import SAGE, WithEmbedding, make_graph
from torch_geometric.nn import GCN2Conv, HeteroConv, SAGEConv, to_hetero

from pyg_sparsecomm import SparsityAwarePartitioner, distribute, distributed_loss, shard
from pyg_sparsecomm.testing import launch

EPOCHS = 4


MODELS = ("to_hetero(SAGE, mean)", "HGT", "HAN", "to_hetero(GCN) on cites")


def build(data, name="to_hetero(SAGE, mean)"):
    if name in HETERO_LAYERS:
        return build_layers(name, data)
    torch.manual_seed(0)
    if name == "to_hetero(GCN) on cites":  # GCNConv on the relation within paper (test_hetero_gcn)
        return WithEmbedding(to_hetero(GCN(), (["paper"], [("paper", "cites", "paper")])), data["institute"].num_nodes)
    return WithEmbedding(to_hetero(SAGE(), data.metadata(), aggr="mean"), data["institute"].num_nodes)


def train(model, x_dict, adj_dict, n_id, y, mask, loss_of):
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(EPOCHS):
        opt.zero_grad()
        out = model(x_dict, adj_dict, n_id)["paper"]
        loss = loss_of(out[mask], y[mask] % out.size(1))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _worker(rank, world_size):
    data = SparsityAwarePartitioner(world_size, method="metis", seed=1)(make_graph())
    local = shard(data)
    n_id = {t: local[t].n_id for t in local.node_types}
    losses = {}
    for name in MODELS:
        model = distribute(build(data, name))  # distribute()'s own gradient synchronisation
        losses[name] = train(model, local.x_dict, local.adj_dict, n_id, local["paper"].y, local["paper"].train_mask,
                             lambda out, y: distributed_loss(F.cross_entropy, out, y))
    return losses


@pytest.fixture(scope="module")
def distributed_losses():
    return launch(_worker, 3)


@pytest.mark.parametrize("name", MODELS)
def test_training_curve_equals_single_process_pyg(distributed_losses, name):
    data = make_graph()
    n_id = {t: torch.arange(data[t].num_nodes) for t in data.node_types}
    reference = train(build(data, name), data.x_dict, data.edge_index_dict, n_id, data["paper"].y,
                      data["paper"].train_mask, F.cross_entropy)
    for losses in distributed_losses:
        assert losses[name] == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_what_the_heterogeneous_path_does_not_cover_is_refused_by_name():
    data = make_graph()
    local = shard(SparsityAwarePartitioner(1, method="random")(data), rank=0, world_size=1)
    x_dict = {**local.x_dict, "institute": torch.randn(local["institute"].num_nodes, 8)}
    cites = ("paper", "cites", "paper")
    gcn2 = distribute(HeteroConv({cites: GCN2Conv(8, alpha=0.1)}))
    supported = (r"SAGEConv, GraphConv, GATConv, GATv2Conv, GINConv, TransformerConv; on relations between nodes of "
                 r"one type also GCNConv, SGConv, TAGConv, ChebConv, ARMAConv, SSGConv, LGConv")
    with pytest.raises(NotImplementedError, match=r"GCN2Conv on a relation of a heterogeneous graph is not supported "
                                                  rf"yet \(supported: {supported}\)"):
        gcn2(x_dict, local.adj_dict)
    for kwargs, match in ((dict(halo_precision="bf16"), "halo compression and staleness are not supported"),
                          (dict(algorithm="oblivious"), r"1D exchange only \(got algorithm='oblivious'")):
        sage = distribute(HeteroConv({cites: SAGEConv(8, 4)}), **kwargs)
        with pytest.raises(NotImplementedError, match=match):
            sage(x_dict, local.adj_dict)
    sage = distribute(HeteroConv({cites: SAGEConv(8, 4)}))
    with pytest.raises(ValueError, match=r"relation \('paper', 'cites', 'paper'\): the source features have 3 rows, "
                                         r"but this rank owns 40 'paper' nodes"):
        sage({"paper": torch.randn(3, 8)}, local.adj_dict)


def _one_rank_bad_rows(rank, world_size):
    data = SparsityAwarePartitioner(world_size, method="random", seed=1)(make_graph())
    local = shard(data)
    model = distribute(build(data))
    n_id = {t: local[t].n_id for t in local.node_types}
    x_dict = dict(local.x_dict)
    model(x_dict, local.adj_dict, n_id)  # the first call passes on every rank
    if rank == 1:
        x_dict["author"] = x_dict["author"][:-1]
    try:
        model(x_dict, local.adj_dict, n_id)
    except ValueError as e:
        return str(e)
    return None


def test_bad_rows_on_one_rank_raise_on_every_rank_instead_of_hanging():
    for message in launch(_one_rank_bad_rows, 2, timeout=120):
        assert message is not None and "rank 1:" in message and "this rank owns" in message, message
