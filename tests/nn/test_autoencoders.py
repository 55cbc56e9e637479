"""PyG's ``GAE``, ``VGAE``, ``ARGA`` and ``ARGVA`` under ``distribute()`` (issue 54, item 2) equal single-process PyG
at P = 1..4 on a ``RandomLinkSplit(split_labels=True)`` split sharded by ``partition_and_shard``: the losses of a
few Adam steps (``recon_loss`` with PyG's own negatives over the whole graph, ``kl_loss`` over all nodes, the
discriminator's terms), the parameter gradients and ``test``'s AUC and AP, on a directed graph with isolated nodes
where one part holds no positive pair.  The noise of ``reparametrize`` and of the prior's samples is keyed by global
node ids (the reference draws the same through ``torch.randn_like``).  Misuse gets an error or warning naming the
fix."""
import random
import warnings

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from keyed_noise import keyed_noise
from sklearn_stand_in import install, installed
from torch_geometric.data import Data
from torch_geometric.nn import ARGA, ARGVA, GAE, VGAE, GCNConv

from pyg_sparsecomm import distribute, gather_nodes, partition_and_shard
from pyg_sparsecomm.testing import launch

N, F_IN, OUT, STEPS = 64, 8, 6, 3
SOURCES = 40  # nodes 0..39 hold the edges' sources; 40..63 are targets or isolated
KINDS = ("gae", "vgae", "arga", "argva")


def make_graph():
    gen = torch.Generator().manual_seed(9)
    edge_index = torch.stack([torch.randint(0, SOURCES, (260,), generator=gen),
                              torch.randint(0, N - 4, (260,), generator=gen)])  # the last 4 nodes isolated
    return Data(x=torch.randn(N, F_IN, generator=gen), edge_index=edge_index, num_nodes=N)


def split(seed: int):
    torch.manual_seed(seed)
    random.seed(seed)
    return T.RandomLinkSplit(num_val=0.1, num_test=0.2, is_undirected=False, split_labels=True,
                             add_negative_train_samples=False)(make_graph())


def sources_apart(edge_index, num_nodes, num_parts, seed=0, **options):
    """A partition whose last part (of P >= 2) owns no source, so holds no positive pair."""
    sources = torch.randint(0, max(num_parts - 1, 1), (SOURCES,), generator=torch.Generator().manual_seed(seed))
    return torch.cat([sources, torch.full((num_nodes - SOURCES,), num_parts - 1)])


class Encoder(torch.nn.Module):
    def __init__(self, variational: bool):
        super().__init__()
        self.conv = GCNConv(F_IN, 2 * OUT)
        self.mu = GCNConv(2 * OUT, OUT)
        self.logstd = GCNConv(2 * OUT, OUT) if variational else None

    def forward(self, x, edge_index):
        x = self.conv(x, edge_index).relu()
        return self.mu(x, edge_index) if self.logstd is None else (self.mu(x, edge_index), self.logstd(x, edge_index))


def build(kind: str):
    torch.manual_seed(0)
    encoder = Encoder(kind in ("vgae", "argva"))
    discriminator = torch.nn.Sequential(torch.nn.Linear(OUT, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    return {"gae": lambda: GAE(encoder), "vgae": lambda: VGAE(encoder), "arga": lambda: ARGA(encoder, discriminator),
            "argva": lambda: ARGVA(encoder, discriminator)}[kind]()


def train(kind, model, train_data, test_data, num_nodes):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, grads = [], None
    for step in range(STEPS):
        model.train()
        optimizer.zero_grad()
        z = model.encode(train_data.x, train_data.edge_index)
        loss = model.recon_loss(z, train_data.pos_edge_label_index)
        if kind in ("vgae", "argva"):
            loss = loss + (1 / num_nodes) * model.kl_loss()
        if kind in ("arga", "argva"):
            loss = loss + model.reg_loss(z) + model.discriminator_loss(z)
        loss.backward()
        if step == 0:
            grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
        losses.append(float(loss))
    model.eval()
    with torch.no_grad():
        z = model.encode(test_data.x, test_data.edge_index)
        auc, ap = model.test(z, test_data.pos_edge_label_index, test_data.neg_edge_label_index)
    return {"losses": torch.tensor(losses, dtype=torch.float64), "grads": grads, "auc": float(auc), "ap": float(ap),
            "z": z}


def reference(kind: str):
    train_data, _, test_data = split(0)
    model = build(kind)
    with installed(), keyed_noise():
        out = train(kind, model, train_data, test_data, train_data.num_nodes)
    with torch.no_grad():
        out["all"] = model.decoder.forward_all(out["z"])
    return out


def _worker(rank, world_size):
    install()
    from pyg_sparsecomm.partition import register
    register("sources_apart")(sources_apart)
    train_data, val_data, test_data = partition_and_shard(split(0 if rank == 0 else 1000 + rank),
                                                          method="sources_apart")
    out = {"n_id": train_data.n_id, "positives": train_data.pos_edge_label_index.global_ids.size(1)}
    state = random.getstate()  # rank 0's after the split, as the reference's before each model's negatives
    for kind in KINDS:
        random.setstate(state)
        model = distribute(build(kind))
        out[kind] = train(kind, model, train_data, test_data, train_data.global_num_nodes)
        out[kind]["all"] = model.decoder.forward_all(gather_nodes(out[kind]["z"], test_data, dst=None))
    out["errors"] = _errors(model, train_data, world_size)
    return out


def _errors(model, train_data, world_size):
    """Messages of misuse: the dense decoder of a shard's rows, a KL term scaled by the shard's node count, PyG's
    GAE (not distributed) given a shard's pairs."""
    messages = {}
    z = model.encode(train_data.x, train_data.edge_index)
    try:
        model.decoder.forward_all(z)
        messages["forward_all"] = "no error"
    except ValueError as error:
        messages["forward_all"] = str(error)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (1 / train_data.num_nodes) * model.kl_loss()
    messages["kl"] = " ".join(str(w.message) for w in caught)
    plain = GAE(distribute(Encoder(False)))
    try:
        plain.recon_loss(plain.encode(train_data.x, train_data.edge_index), train_data.pos_edge_label_index)
        messages["plain"] = "no error"
    except TypeError as error:
        messages["plain"] = str(error)
    return messages


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_autoencoders_equal_single_process_pyg(world_size):
    refs = {kind: reference(kind) for kind in KINDS}
    for rank, out in enumerate(launch(_worker, world_size, timeout=400)):
        for kind in KINDS:
            ref, got, msg = refs[kind], out[kind], f"rank {rank} of {world_size}, {kind}"
            torch.testing.assert_close(got["losses"], ref["losses"], rtol=0, atol=1e-6, msg=f"{msg}: losses")
            assert set(got["grads"]) == set(ref["grads"]), msg
            for key, grad in ref["grads"].items():
                torch.testing.assert_close(got["grads"][key], grad, rtol=1e-5, atol=1e-6, msg=f"{msg}: grad {key}")
            assert got["auc"] == pytest.approx(ref["auc"], abs=1e-9) and got["ap"] == pytest.approx(ref["ap"], abs=1e-9)
            torch.testing.assert_close(got["z"], ref["z"][out["n_id"]], rtol=1e-5, atol=1e-6, msg=msg)
            torch.testing.assert_close(got["all"], ref["all"], rtol=1e-5, atol=1e-6, msg=f"{msg}: forward_all")
        errors = out["errors"]
        assert "pyg_sparsecomm.link.negative_sampling" in errors["plain"], errors
        if world_size > 1:
            assert "gather_nodes(z, data, dst=None)" in errors["forward_all"], errors
            assert "train_data.global_num_nodes" in errors["kl"], errors
            if rank == world_size - 1:
                assert out["positives"] == 0  # a part holding no positive pair
    assert refs["gae"]["losses"][-1] < refs["gae"]["losses"][0]


def test_subclass_overriding_recon_loss_is_refused():
    class Own(GAE):
        def recon_loss(self, z, pos_edge_index, neg_edge_index=None):
            return z.mean()

    with pytest.raises(NotImplementedError, match="overrides recon_loss of PyG's GAE"):
        distribute(Own(Encoder(False)))
    assert np.isclose(1.0, 1.0)
