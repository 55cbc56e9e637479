"""PyG's ``DeepGraphInfomax`` under ``distribute()`` (issue 54, item 2) equals single-process PyG at P = 1..4:
the forward (latent rows, corrupted rows, summary), the loss curve of a few Adam steps, the parameter and input
gradients (through the permutation's exchange), and ``test``'s accuracy, with PyG's own summary lambda and
corruption function, on a directed graph with isolated nodes where one part has no training rows; the ranks'
torch generators start apart (rank 0's as the single process's).  User functions that cannot be exact are
refused by name; so are subclasses overriding what ``distribute()`` replaces."""
import numpy as np
import pytest
import torch
from sklearn_stand_in import install, installed
from torch_geometric.data import Data
from torch_geometric.nn import DeepGraphInfomax, GCNConv

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.testing import launch

N, F_IN, HIDDEN, STEPS = 64, 8, 16, 4


def make_graph():
    gen = torch.Generator().manual_seed(4)
    edge_index = torch.randint(0, N - 6, (2, 220), generator=gen)  # the last 6 nodes isolated, directed
    data = Data(x=torch.randn(N, F_IN, generator=gen), edge_index=edge_index, num_nodes=N)
    data.y = torch.randint(0, 3, (N,), generator=gen)
    data.test_mask = torch.rand(N, generator=gen) < 0.5
    return data


def partition(P: int) -> torch.Tensor:
    return torch.randint(0, P, (N,), generator=torch.Generator().manual_seed(P))


def train_mask(P: int) -> torch.Tensor:
    """Training rows only in parts 0..P-2 (at P >= 2 the last part has none), the same nodes for any P... of
    this P's partition; the reference uses the same mask."""
    return partition(P) < max(P - 1, 1)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(F_IN, HIDDEN)
        self.prelu = torch.nn.PReLU(HIDDEN)

    def forward(self, x, edge_index):
        return self.prelu(self.conv(x, edge_index))


def corruption(x, edge_index):  # PyG's examples/infomax_transductive.py
    return x[torch.randperm(x.size(0))], edge_index


def build():
    torch.manual_seed(0)
    return DeepGraphInfomax(HIDDEN, Encoder(), summary=lambda z, *args, **kwargs: torch.sigmoid(z.mean(dim=0)),
                            corruption=corruption)


def train(model, x, edge_index, mask, test_mask, y):
    """Forward outputs of the first step, the losses, gradients of the first step, the accuracy of test()."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    out, losses, grads = {}, [], None
    for step in range(STEPS):
        optimizer.zero_grad()
        x_in = x.clone().requires_grad_()
        pos_z, neg_z, summary = model(x_in, edge_index)
        loss = model.loss(pos_z, neg_z, summary)
        loss.backward()
        if step == 0:
            out.update(pos=pos_z.detach(), neg=neg_z.detach(), summary=summary.detach(), x_grad=x_in.grad)
            grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        optimizer.step()
        losses.append(float(loss))
    model.eval()
    z, _, _ = model(x, edge_index)
    out.update(losses=torch.tensor(losses, dtype=torch.float64), grads=grads,
               acc=model.test(z[mask], y[mask], z[test_mask], y[test_mask], max_iter=150))
    return out


def reference(P: int):
    data = make_graph()
    with installed():
        return train(build(), data.x, data.edge_index, train_mask(P), data.test_mask, data.y)


def _worker(rank, world_size):
    install()
    data = make_graph()
    data.train_mask = train_mask(world_size)
    data.part, data.num_parts = partition(world_size), world_size
    local = shard(data)
    model = distribute(build())
    if rank:
        torch.manual_seed(1000 + rank)  # the ranks' generators apart: the corruption draws rank 0's
    out = train(model, local.x, local.adj, local.train_mask, local.test_mask, local.y)
    out["n_id"], out["train_rows"] = local.n_id, int(local.train_mask.sum())
    out["errors"] = _errors(local)
    return out


def _errors(local):
    """Messages of user functions that cannot be exact (raised on every rank)."""
    bad = {"noise": (lambda z, *a, **k: torch.sigmoid(z.mean(dim=0)), lambda x, ei: (x + torch.randn_like(x), ei)),
           "max": (lambda z, *a, **k: z.max(dim=0).values, corruption),
           "numpy": (lambda z, *a, **k: z.mean(dim=0),
                     lambda x, ei: (x[np.random.default_rng(torch.distributed.get_rank()).permutation(x.size(0))], ei)),
           "rows": (lambda z, *a, **k: z, corruption)}
    messages = {}
    for name, (summary, cor) in bad.items():
        model = distribute(DeepGraphInfomax(HIDDEN, Encoder(), summary=summary, corruption=cor))
        try:
            model(local.x, local.adj)
            messages[name] = "no error"
        except (NotImplementedError, ValueError) as error:
            messages[name] = str(error)
    return messages


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_deep_graph_infomax_equals_single_process_pyg(world_size):
    ref = reference(world_size)
    assert ref["losses"][-1] < ref["losses"][0]
    for rank, out in enumerate(launch(_worker, world_size, timeout=300)):
        n_id, msg = out["n_id"], f"rank {rank} of {world_size}"
        torch.testing.assert_close(out["pos"], ref["pos"][n_id], msg=msg)
        torch.testing.assert_close(out["neg"], ref["neg"][n_id], msg=f"{msg}: corrupted rows (one permutation)")
        torch.testing.assert_close(out["summary"], ref["summary"], msg=f"{msg}: summary over all nodes")
        torch.testing.assert_close(out["losses"], ref["losses"], rtol=0, atol=1e-6, msg=f"{msg}: losses")
        for key, grad in ref["grads"].items():
            torch.testing.assert_close(out["grads"][key], grad, rtol=1e-5, atol=1e-6, msg=f"{msg}: grad {key}")
        torch.testing.assert_close(out["x_grad"], ref["x_grad"][n_id], rtol=1e-5, atol=1e-6, msg=f"{msg}: x.grad")
        assert out["acc"] == pytest.approx(ref["acc"], abs=1e-12), msg
        errors = out["errors"]
        assert "torch.randn_like" in errors["noise"] and "corruption" in errors["noise"], errors
        assert "Tensor.max" in errors["max"] and "summary" in errors["max"], errors
        assert "a row per node" in errors["rows"], errors
        if world_size > 1:
            assert "different permutations" in errors["numpy"], errors
            if rank == world_size - 1:
                assert out["train_rows"] == 0  # a part without training rows


class OwnLoss(DeepGraphInfomax):
    def loss(self, pos_z, neg_z, summary):
        return pos_z.mean()


class OwnInit(DeepGraphInfomax):
    def __init__(self):
        super().__init__(HIDDEN, Encoder(), lambda z, *a, **k: z.mean(dim=0), corruption)


def test_subclasses_are_distributed_or_refused_by_name():
    with pytest.raises(NotImplementedError, match="overrides loss of PyG's DeepGraphInfomax"):
        distribute(OwnLoss(HIDDEN, Encoder(), lambda z, *a, **k: z.mean(dim=0), corruption))
    model = distribute(OwnInit())
    assert type(model).__name__ == "DistributedOwnInit" and isinstance(model, OwnInit)
    assert list(model.state_dict()) == list(OwnInit().state_dict())
