"""PyG's ``LightGCN`` under ``distribute()`` (issue 48, item 4) equals single-process PyG at P = 1..3: the
loss curve of mini-batch steps with the same positives and negatives (BPR + lambda-term over distinct nodes),
the embedding table's gradient at every rank's owned rows, the final table, ``recommend`` with the training
interactions excluded, precision@20 and recall@20 through the distributed metrics, on an Amazon-Book-like
bipartite graph with users without interactions, books nobody rated and, at P = 3, a part owning no user.
``LGConv`` on a relation within one node type (``HeteroConv``) equals PyG's; misuse raises naming the fix."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.metrics import LinkPredPrecision, LinkPredRecall
from torch_geometric.nn import HeteroConv, LGConv, LightGCN

from pyg_sparsecomm import comm_counter, distribute, distributed_loss, shard
from pyg_sparsecomm.comm.collectives import ring_allreduce_nbytes
from pyg_sparsecomm.graph.datasets import amazon_book_like
from pyg_sparsecomm.link import DistributedLinkPredPrecision, DistributedLinkPredRecall
from pyg_sparsecomm.testing import launch

USERS, BOOKS, DIM, K, STEPS, BATCH = 40, 60, 8, 20, 4, 64


def make_graph():
    """The homogeneous graph of PyG's recipe (users first) and its training pairs (user, book)."""
    hetero = amazon_book_like(USERS, BOOKS, 500, isolated=0.1, seed=3)
    data = hetero.to_homogeneous()
    del data.node_type, data.edge_type
    data.num_nodes = USERS + BOOKS
    train = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    return data, train


def partition(P: int) -> torch.Tensor:
    """Users over ranks 0..P-2 (at P = 3 rank 2 owns no user), books over all ranks."""
    gen = torch.Generator().manual_seed(P)
    users = torch.randint(0, max(P - 1, 1), (USERS,), generator=gen)
    return torch.cat([users, torch.randint(0, P, (BOOKS,), generator=gen)])


def batches(train: torch.Tensor) -> list[torch.Tensor]:
    """``STEPS`` batches of (positives | negatives) as PyG's script draws them, from one generator."""
    gen = torch.Generator().manual_seed(11)
    out = []
    for _ in range(STEPS):
        pos = train[:, torch.randperm(train.size(1), generator=gen)[:BATCH]]
        neg = torch.stack([pos[0], torch.randint(USERS, USERS + BOOKS, (pos.size(1),), generator=gen)])
        out.append(torch.cat([pos, neg], dim=1))
    return out


def run(model, edge_index, train, steps):
    """Losses of the steps, the table's gradient after the first, the final embedding, the first step's
    scores (of all its pairs: on a shard too)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses, grad, scores = [], None, None
    for edge_label_index in steps:
        optimizer.zero_grad()
        out = model(edge_index, edge_label_index)
        scores = out.detach().as_subclass(torch.Tensor).clone() if scores is None else scores
        pos, neg = out.chunk(2)
        assert pos.numel() == edge_label_index.size(1) // 2  # upstream's count of the batch's pairs
        loss = model.recommendation_loss(pos, neg, node_id=edge_label_index.unique(), lambda_reg=0.1)
        loss.backward()
        grad = model.embedding.weight.grad.clone() if grad is None else grad
        optimizer.step()
        losses.append(float(loss))
    return torch.tensor(losses, dtype=torch.float64), grad, model.embedding.weight.detach().clone(), scores


def bce(model, edge_index, edge_label_index, loss_fn):
    """A binary cross-entropy of the scores of positives (1) and negatives (0) through ``loss_fn`` (PyG's
    function, or distributed_loss of it): its value and the table's gradient."""
    model.zero_grad()
    label = torch.cat([torch.ones(edge_label_index.size(1) // 2), torch.zeros(edge_label_index.size(1) // 2)])
    loss = loss_fn(model(edge_index, edge_label_index), label)
    loss.backward()
    return float(loss), model.embedding.weight.grad.clone()


def users_items(top: torch.Tensor, test: torch.Tensor, users: torch.Tensor):
    """``top`` and the test pairs of ``users`` (ascending global ids) as PyG's metrics take them."""
    mine = torch.isin(test[0], users)
    return top, torch.stack([torch.searchsorted(users, test[0, mine]), test[1, mine]])


def _worker(rank, world_size):
    data, train = make_graph()
    data.part, data.num_parts = partition(world_size), world_size
    local = shard(data)
    torch.manual_seed(0 if rank == 0 else 100 + rank)  # the ranks' tables differ: distribute() copies rank 0's
    model = distribute(LightGCN(data.num_nodes, DIM, num_layers=2))
    out = {"n_id": local.n_id}
    with pytest.raises(ValueError, match="got a plain edge_index .* pass the shard's graph") if world_size > 1 \
            else _nothing():
        model.get_embedding(data.edge_index)
    counter = comm_counter()
    before = counter.bytes_sent("replicated_rows")
    out["losses"], out["grad"], out["weight"], out["scores"] = run(model, local.adj, train, batches(train))
    out["replicated_bytes"] = counter.bytes_sent("replicated_rows") - before
    out["bce"] = bce(model, local.adj, batches(train)[0],
                     lambda s, y: distributed_loss(F.binary_cross_entropy_with_logits, s, y))
    with torch.no_grad():
        users, books = torch.arange(USERS), torch.arange(USERS, USERS + BOOKS)
        top = model.recommend(local.adj, src_index=users, dst_index=books, k=K, exclude=train)
        owned_users = local.n_id[local.n_id < USERS].sort().values
        pred, truth = users_items(top, data.edge_label_index, owned_users)
        metrics = [DistributedLinkPredPrecision(K), DistributedLinkPredRecall(K)]
        for metric in metrics:
            metric.update(pred, truth)
        out.update(top=top, users=owned_users, metrics=[float(m.compute()) for m in metrics])
        out["emb"] = model.get_embedding(local.adj)
    out["errors"] = _errors(model, local, train, rank)
    return out


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _errors(model, local, train, rank):
    """Misuse raising on every rank (the messages): ranks passing different pairs, repeated targets."""
    messages = []
    for call in (lambda: model(local.adj, train if rank == 0 else train[:, :3]),
                 lambda: model.recommend(local.adj, dst_index=torch.tensor([0, 0]), k=1)):
        try:
            call()
        except ValueError as e:
            messages.append(str(e))
    return messages


def reference():
    data, train = make_graph()
    torch.manual_seed(0)
    model = LightGCN(data.num_nodes, DIM, num_layers=2)
    losses, grad, weight, scores = run(model, data.edge_index, train, batches(train))
    loss_bce = bce(model, data.edge_index, batches(train)[0], F.binary_cross_entropy_with_logits)
    with torch.no_grad():
        emb = model.get_embedding(data.edge_index)
        logits = emb[:USERS] @ emb[USERS:].t()
        logits[train[0], train[1] - USERS] = float("-inf")
        top = logits.topk(K, dim=-1).indices + USERS
    metrics = []
    for metric in (LinkPredPrecision(K), LinkPredRecall(K)):
        metric.update(top, data.edge_label_index)
        metrics.append(float(metric.compute()))
    return losses, grad, weight, emb, top, metrics, scores, loss_bce


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_lightgcn_equals_single_process_pyg(world_size):
    losses, grad, weight, emb, top, metrics, scores, loss_bce = reference()
    assert losses[-1] < losses[0]
    assert (top >= USERS).all()
    for rank, out in enumerate(launch(_worker, world_size, timeout=240)):
        n_id = out["n_id"]
        torch.testing.assert_close(out["losses"], losses, rtol=0, atol=1e-6, msg=f"rank {rank}: losses")
        torch.testing.assert_close(out["scores"], scores, msg=f"rank {rank}: all pairs' scores on every rank")
        # one all-reduce of a batch's 2 * BATCH float32 scores per step, counted (ring model)
        assert out["replicated_bytes"] == STEPS * ring_allreduce_nbytes(2 * BATCH * 4, world_size)
        assert out["bce"][0] == pytest.approx(loss_bce[0], abs=1e-6), f"rank {rank}: BCE of the scores"
        torch.testing.assert_close(out["bce"][1], loss_bce[1][n_id], rtol=1e-5, atol=1e-7, msg=f"rank {rank}: BCE")
        torch.testing.assert_close(out["grad"], grad[n_id], rtol=1e-5, atol=1e-7, msg=f"rank {rank}: grad")
        torch.testing.assert_close(out["weight"], weight[n_id], rtol=1e-5, atol=1e-6, msg=f"rank {rank}")
        torch.testing.assert_close(out["emb"], emb[n_id], rtol=1e-5, atol=1e-6, msg=f"rank {rank}")
        assert torch.equal(out["top"], top[out["users"]]), f"rank {rank}: recommend"
        torch.testing.assert_close(torch.tensor(out["metrics"]), torch.tensor(metrics), rtol=0, atol=1e-6)
        if world_size > 1:
            assert any("the same on every rank" in m for m in out["errors"]), out["errors"]
        assert any("dst_index repeats a node" in m for m in out["errors"]), out["errors"]
    if world_size == 3:
        assert not bool((partition(3)[:USERS] == 2).any())  # rank 2 owns no user


def test_graph_has_isolated_users_and_unrated_books():
    data, train = make_graph()
    degree = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
    assert bool((degree[:USERS] == 0).any()) and bool((degree[USERS:] == 0).any())


FOLLOWS = ("user", "follows", "user")


def follows_graph():
    """Users following users (directed, some following nobody) and the books they rate."""
    gen = torch.Generator().manual_seed(5)
    data = amazon_book_like(USERS, BOOKS, 300, isolated=0.1, seed=4)
    data["user"].x, data["book"].x = torch.randn(USERS, 4, generator=gen), torch.randn(BOOKS, 4, generator=gen)
    data[FOLLOWS].edge_index = torch.randint(0, USERS // 2, (2, 90), generator=gen)
    data[FOLLOWS].edge_weight = torch.rand(90, generator=gen) + 0.5
    return data


def lgconv_on_relation(x_user, adj_dict, weights, n_id, distributed):
    """Two ``LGConv`` on ``follows`` (the second weighted, unnormalised) in ``HeteroConv``: the users'
    output and the gradient of their input under a loss weighting each row by its global id."""
    convs = [HeteroConv({FOLLOWS: LGConv()}), HeteroConv({FOLLOWS: LGConv(normalize=False)})]
    if distributed:
        convs = [distribute(conv) for conv in convs]
    x = x_user.clone().requires_grad_()
    h = convs[0]({"user": x}, adj_dict)
    out = convs[1](h, adj_dict, edge_weight_dict={FOLLOWS: weights})["user"]
    (out * (n_id.view(-1, 1) + torch.arange(out.size(1))).float().sin()).sum().backward()
    return out.detach(), x.grad


def _relation_worker(rank, world_size):
    from pyg_sparsecomm import SparsityAwarePartitioner
    data = follows_graph()
    local = shard(SparsityAwarePartitioner(world_size, method="random", seed=1)(data))
    n_id = local["user"].n_id
    return (n_id, *lgconv_on_relation(local["user"].x, local.adj_dict, local[FOLLOWS].edge_weight, n_id, True))


@pytest.mark.parametrize("world_size", [1, 3])
def test_lgconv_on_a_relation_within_one_type(world_size):
    """``LGConv`` in ``HeteroConv`` on ``('user', 'follows', 'user')`` of a shard equals PyG's (outputs and
    input gradients at the owned rows)."""
    data = follows_graph()
    out, grad = lgconv_on_relation(data["user"].x, data.edge_index_dict, data[FOLLOWS].edge_weight,
                                   torch.arange(USERS), False)
    for rank, (n_id, d_out, d_grad) in enumerate(launch(_relation_worker, world_size, timeout=120)):
        torch.testing.assert_close(d_out, out[n_id], msg=f"rank {rank}: output")
        torch.testing.assert_close(d_grad, grad[n_id], msg=f"rank {rank}: input gradient")
