"""Full-graph link prediction on P ranks equals single-process PyG (issue 29).

One launch per P = 1..4 checks, on a directed graph with isolated nodes and self-loops (P = 3: the
last part owns nothing): the training curve with PyG's fixed ``RandomLinkSplit`` negatives, then with
fresh hash-drawn negatives every epoch, equals single-process PyG; the pairs' exchange moves exactly
the predicted bytes, each endpoint row once per rank that needs it, and its backward gives the
single-process gradient; the global AUC / Hits@K equal a brute-force single-process computation on
the same scores; the negatives are the same pairs whatever P and the partition; no validation or test
edge reaches the shards' message passing.
"""
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.utils import coalesce
from torch_geometric.utils import negative_sampling as pyg_negative_sampling

from pyg_sparsecomm import comm_counter, distribute, distributed_loss, shard
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.link import (
    distribute_pairs,
    global_auc,
    global_hits_at_k,
    local_pairs,
    negative_sampling,
    structured_negative_sampling,
)
from pyg_sparsecomm.testing import launch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_link  # noqa: E402

N, FEATURES, HIDDEN, OUT, LR = 60, 6, 16, 8, 0.02
FIXED_EPOCHS, FRESH_EPOCHS, HITS_K = 4, 4, 5


def _graph():
    """Directed, nodes 0..11 isolated, a few self-loops; split by PyG's RandomLinkSplit (fixed negatives)."""
    gen = torch.Generator().manual_seed(5)
    edges = torch.cat([torch.randint(12, N, (2, 260), generator=gen), torch.arange(12, N, 7).repeat(2, 1)], dim=1)
    data = Data(x=torch.randn(N, FEATURES, generator=gen), edge_index=coalesce(edges, num_nodes=N), num_nodes=N)
    torch.manual_seed(0)
    random.seed(0)  # PyG's negative_sampling draws from Python's generator
    split = T.RandomLinkSplit(num_val=0.1, num_test=0.2, is_undirected=False, add_negative_train_samples=True)
    return split(data)


def _partition(P):
    if P == 3:  # rank 2 owns nothing
        return torch.arange(N) % 2
    return torch.randint(0, P, (N,), generator=torch.Generator().manual_seed(P))


def _given_scores(val):
    """Fixed validation scores with ties."""
    scores = torch.randn(val.edge_label_index.size(1), generator=torch.Generator().manual_seed(9))
    return torch.round(scores, decimals=1)


def _decode(z_src, z_dst):
    return (z_src * z_dst).sum(-1)


def _positives(train):
    return train.edge_label_index[:, train.edge_label == 1]


def _fresh_negatives(train, epoch, part=None, rank=None):
    return negative_sampling(train.edge_index, N, num_neg_samples=_positives(train).size(1), seed=3, epoch=epoch,
                             part=part, rank=rank)


def _model():
    torch.manual_seed(0)
    return GraphSAGE(FEATURES, HIDDEN, num_layers=2, out_channels=OUT)


def _worker(rank, P, train, val, part):
    data = train.clone()
    data.part, data.num_parts = part, P
    local = shard(data)
    model = distribute(_model())
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    fixed = distribute_pairs(train.edge_label_index, train.edge_label, part)
    positives = distribute_pairs(_positives(train), None, data)  # the partitioned Data as the partition
    losses = []
    for epoch in range(FIXED_EPOCHS + FRESH_EPOCHS):
        if epoch < FIXED_EPOCHS:
            batches = [(fixed, fixed.edge_label)]
        else:  # fresh negatives: this rank draws those whose source it owns, and builds their plan
            negatives = local_pairs(_fresh_negatives(train, epoch, part), local)  # the shard as the partition
            batches = [(positives, torch.ones(len(positives))), (negatives, torch.zeros(len(negatives)))]
        opt.zero_grad()
        z = model(local.x, local.adj)
        score = torch.cat([_decode(*pairs.gather(z)) for pairs, _ in batches])
        loss = distributed_loss(F.binary_cross_entropy_with_logits, score, torch.cat([y for _, y in batches]))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))

    model.eval()
    val_pairs = distribute_pairs(val.edge_label_index, val.edge_label, part)
    with torch.no_grad():
        val_score = _decode(*val_pairs.gather(model(local.x, local.adj)))
    positive = val_pairs.edge_label == 1
    out = {"losses": losses, "val_id": val_pairs.pair_id, "val_score": val_score,
           "val_auc": global_auc(val_score, val_pairs.edge_label),
           "val_hits": global_hits_at_k(val_score[positive], val_score[~positive], HITS_K)}

    # the same scores everywhere (ties included): the metrics must equal the brute-force ones exactly
    mine = _given_scores(val)[val_pairs.pair_id]
    out["given_auc"] = global_auc(mine, val_pairs.edge_label)
    out["given_hits"] = global_hits_at_k(mine[positive], mine[~positive], HITS_K)

    # bytes and gradients of one exchange of fixed rows
    z_global = torch.randn(N, OUT, generator=torch.Generator().manual_seed(11))
    z = z_global[local.n_id].clone().requires_grad_()
    weight = torch.randn(train.edge_label_index.size(1), generator=torch.Generator().manual_seed(12))[fixed.pair_id]
    comm_counter().reset()
    z_src, z_dst = fixed.gather(z)
    counted = {"sent": comm_counter().bytes_sent("halo"), "received": comm_counter().bytes_received("halo")}
    (weight * _decode(z_src, z_dst)).sum().backward()
    counted["grad_sent"] = comm_counter().bytes_sent("halo_grad")
    out.update(counted=counted, predicted=fixed.predicted_bytes(OUT), n_id=local.n_id, z_grad=z.grad,
               fixed_id=fixed.pair_id, fixed_pairs=fixed.edge_label_index)

    # negatives drawn by this rank; the shard's message-passing edges in global ids
    out["negatives"] = [_fresh_negatives(train, 1, part), negative_sampling(
        train.edge_index, N, 0.5, force_undirected=True, seed=4, epoch=0, part=part)]
    out["structured"] = structured_negative_sampling(train.edge_index, N, False, seed=5, epoch=0, part=part)
    bad = torch.tensor([[0], [N]]) if rank == P - 1 else torch.zeros(2, 0, dtype=torch.long)
    try:  # one rank's bad pair raises on every rank, not a hang in the plan's exchange
        local_pairs(bad, part)
    except ValueError as e:
        out["bad_pair_error"] = str(e)
    if P > 1:  # ranks holding different lists (RandomLinkSplit with Python's random unseeded): an error
        theirs = val.edge_label_index if rank else val.edge_label_index.flip(1)
        try:
            distribute_pairs(theirs, None, part)
        except ValueError as e:
            out["different_pairs_error"] = str(e)
    columns = torch.cat([local.n_id, local.adj.plan.halo_n_id])
    out["mp_edges"] = torch.stack([columns[local.adj.col], local.n_id[local.adj.row()]])
    return out


def _pyg_step(model, opt, train, pairs, label, decode) -> float:
    """One single-process PyG training step on ``pairs``; its loss."""
    opt.zero_grad()
    z = model(train.x, train.edge_index)
    loss = F.binary_cross_entropy_with_logits(decode(z[pairs[0]], z[pairs[1]]), label)
    loss.backward()
    opt.step()
    return float(loss.detach())


def _reference(train, val):
    """Single-process PyG: the same model, pairs and negatives; losses, val scores, z's gradient."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for epoch in range(FIXED_EPOCHS + FRESH_EPOCHS):
        if epoch < FIXED_EPOCHS:
            pairs, label = train.edge_label_index, train.edge_label
        else:
            neg = _fresh_negatives(train, epoch)
            pairs = torch.cat([_positives(train), neg], dim=1)
            label = torch.cat([torch.ones(_positives(train).size(1)), torch.zeros(neg.size(1))])
        losses.append(_pyg_step(model, opt, train, pairs, label, _decode))
    model.eval()
    with torch.no_grad():
        z = model(train.x, train.edge_index)
    val_score = _decode(z[val.edge_label_index[0]], z[val.edge_label_index[1]])
    z_global = torch.randn(N, OUT, generator=torch.Generator().manual_seed(11)).requires_grad_()
    weight = torch.randn(train.edge_label_index.size(1), generator=torch.Generator().manual_seed(12))
    ei = train.edge_label_index
    (weight * _decode(z_global[ei[0]], z_global[ei[1]])).sum().backward()
    return losses, val_score, z_global.grad


def _brute_auc(score, label):
    pos, neg = score[label == 1].double(), score[label == 0].double()
    return float(((pos[:, None] > neg[None]).double() + 0.5 * (pos[:, None] == neg[None]).double()).mean())


def _brute_hits(score, label, k):
    kth = torch.sort(score[label == 0], descending=True).values[k - 1]
    return float((score[label == 1] > kth).double().mean())


def _keys(edges):
    return sorted((edges[0] * N + edges[1]).tolist())


def test_link_prediction_equals_single_process():
    train, val, test = _graph()
    ref_losses, ref_val_score, ref_grad = _reference(train, val)
    assert ref_losses[FIXED_EPOCHS - 1] < ref_losses[0]  # it really trained
    single_negatives = [_fresh_negatives(train, 1), negative_sampling(train.edge_index, N, 0.5,
                                                                      force_undirected=True, seed=4, epoch=0)]
    single_structured = structured_negative_sampling(train.edge_index, N, False, seed=5, epoch=0)
    held_out = {key for split in (val, test) for key in _keys(split.edge_label_index[:, split.edge_label == 1])}
    label, given = val.edge_label, _given_scores(val)
    for P in (1, 2, 3, 4):
        part = _partition(P)
        outs = launch(_worker, P, train, val, part)
        if P == 3:
            assert outs[2]["n_id"].numel() == 0  # the empty part took part in every exchange
        for out in outs:
            assert f"rank {P - 1}: ValueError: edge_label_index holds node ids in [0, {N}]" in out["bad_pair_error"]
            assert P == 1 or "ranks passed different edge_label_index" in out["different_pairs_error"]
            torch.testing.assert_close(torch.tensor(out["losses"]), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)
            assert out["val_auc"] == outs[0]["val_auc"] and out["given_auc"] == outs[0]["given_auc"]
            assert out["given_auc"] == pytest.approx(_brute_auc(given, label), abs=1e-12)
        assert outs[0]["given_hits"] == pytest.approx(_brute_hits(given, label, HITS_K), abs=1e-12)

        val_score = torch.zeros(label.numel())
        for out in outs:
            val_score[out["val_id"]] = out["val_score"]
        torch.testing.assert_close(val_score, ref_val_score, rtol=1e-5, atol=1e-5)
        assert outs[0]["val_auc"] == pytest.approx(_brute_auc(val_score, label), abs=1e-12)
        assert outs[0]["val_auc"] == pytest.approx(_brute_auc(ref_val_score, label), abs=0.02)
        assert outs[0]["val_hits"] == pytest.approx(_brute_hits(val_score, label, HITS_K), abs=1e-12)

        grad = torch.zeros(N, OUT)
        for r, out in enumerate(outs):
            grad[out["n_id"]] = out["z_grad"]
            assert out["counted"]["sent"] == out["predicted"]["sent"]
            assert out["counted"]["received"] == out["predicted"]["received"]
            assert out["counted"]["grad_sent"] == out["predicted"]["received"]  # backward: the reverse
            ends = out["fixed_pairs"].reshape(-1)  # every non-owned endpoint once: the minimal volume
            assert bool((part[out["fixed_pairs"][0]] == r).all())
            assert out["counted"]["received"] == torch.unique(ends[part[ends] != r]).numel() * OUT * 4
        torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-5)
        assert sum(o["counted"]["sent"] for o in outs) == sum(o["counted"]["received"] for o in outs)
        assert (sum(o["counted"]["sent"] for o in outs) > 0) == (P > 1)
        assert sorted(torch.cat([o["fixed_id"] for o in outs]).tolist()) == list(range(train.edge_label.numel()))

        for which, single in enumerate(single_negatives):
            drawn = [out["negatives"][which] for out in outs]
            assert _keys(torch.cat(drawn, dim=1)) == _keys(single)  # the same pairs whatever P and part
            smaller = [d[:, d[0] < d[1]] if which == 1 else d for d in drawn]
            assert all(bool((part[d[0]] == r).all()) for r, d in enumerate(smaller))  # drawn by the owner
        for k in range(3):
            mine = torch.cat([out["structured"][k] for out in outs])
            order = torch.argsort(torch.cat([out["structured"][0] * N + out["structured"][1] for out in outs]),
                                  stable=True)
            single_order = torch.argsort(single_structured[0] * N + single_structured[1], stable=True)
            assert torch.equal(mine[order], single_structured[k][single_order])

        mp_edges = torch.cat([out["mp_edges"] for out in outs], dim=1)
        assert _keys(mp_edges) == _keys(train.edge_index)  # the shards hold train_data's edges only
        assert not held_out & set(_keys(mp_edges))  # no validation / test edge in message passing


def test_negative_sampling_follows_pyg_distribution():
    """Every non-edge as often as PyG draws it (a uniform subset of the non-edges), exactly k pairs."""
    edge_index = torch.tensor([[0, 0, 1, 2, 3, 4, 4, 2], [1, 2, 2, 0, 4, 0, 4, 2]])
    n, k, draws = 6, 5, 1000
    non_edges = n * (n - 1) - 6  # 6 distinct edges i != j
    ours, pyg = torch.zeros(n * n), torch.zeros(n * n)
    random.seed(0)
    for epoch in range(draws):
        neg = negative_sampling(edge_index, n, k, seed=1, epoch=epoch)
        assert neg.size(1) == k and torch.unique(neg[0] * n + neg[1]).numel() == k
        ours += torch.bincount(neg[0] * n + neg[1], minlength=n * n)
        ref = pyg_negative_sampling(edge_index, n, k)
        pyg += torch.bincount(ref[0] * n + ref[1], minlength=n * n)
    assert ours[edge_index[0] * n + edge_index[1]].sum() == 0 and ours[torch.arange(n) * (n + 1)].sum() == 0
    allowed = ours > 0
    assert int(allowed.sum()) == non_edges and torch.equal(allowed, pyg > 0)
    assert float((ours[allowed] / draws - k / non_edges).abs().max()) < 0.055
    assert float((pyg[allowed] / draws - k / non_edges).abs().max()) < 0.055

    counts = torch.zeros(n)
    for epoch in range(draws):
        i, j, kk = structured_negative_sampling(edge_index, n, seed=2, epoch=epoch)
        counts += torch.bincount(kk[i == 0], minlength=n)
    # node 0 links to 1 and 2: its negatives are 0, 3, 4, 5 (self-loops allowed by default), uniformly
    assert counts[1] == 0 and counts[2] == 0
    assert float((counts[[0, 3, 4, 5]] / counts.sum() - 0.25).abs().max()) < 0.03


def test_dense_rows_and_errors():
    full = torch.stack(torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")).reshape(2, -1)
    some = full[:, torch.tensor([c % 7 != 3 for c in range(25)])]
    neg = negative_sampling(some, 5, 100, seed=0)  # asks for more than exist: every non-edge once
    missing = set(range(25)) - set((some[0] * 5 + some[1]).tolist()) - {i * 6 for i in range(5)}
    assert set((neg[0] * 5 + neg[1]).tolist()) == missing and neg.size(1) == len(missing)
    with pytest.raises(ValueError, match="method must be 'sparse' or 'dense'"):
        negative_sampling(some, 5, method="exact")
    with pytest.raises(ValueError, match="allow target ids 0..3"):
        negative_sampling(some, (5, 4))
    with pytest.raises(ValueError, match="linked to every node"):
        structured_negative_sampling(full, 5, contains_neg_self_loops=False)
    with pytest.raises(ValueError, match="world size is 1"):
        distribute_pairs(some, part=torch.tensor([0, 1, 0, 1, 0]))
    with pytest.raises(ValueError, match="num_parts=2 but the world size is 1"):
        distribute_pairs(some, part=Data(edge_index=some, part=torch.zeros(5, dtype=torch.long), num_parts=2))
    with pytest.raises(ValueError, match="1.5D grid"):
        distribute_pairs(some, part=Data(n_id=torch.arange(5), global_num_nodes=5, replication=2))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 4\]"):
        distribute_pairs(torch.tensor([[0], [7]]), part=torch.zeros(5, dtype=torch.long))
    pairs = distribute_pairs(some, torch.ones(some.size(1)), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="z has 4 rows but this rank owns 5"):
        pairs.gather(torch.randn(4, 3))
    with pytest.raises(ValueError, match="positive and negative pairs"):
        global_auc(torch.randn(3), torch.ones(3))
    with pytest.raises(ValueError, match="labels must be 0"):
        global_auc(torch.randn(3), torch.tensor([0.0, 2.0, 1.0]))


def _run_example(rank, world_size, argv):
    return train_link.run(train_link.parse_args(argv), rank, world_size, verbose=False)


def _example_reference(args):
    """``examples/train_link.py`` written as a single-process PyG script (same split, model, negatives)."""
    train, val, _ = train_link.split(load_dataset(args.dataset, args.root, args.seed), args.seed)
    torch.manual_seed(args.seed)
    model = GraphSAGE(train.num_features, args.hidden, num_layers=2, out_channels=args.out)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses, val_auc = [], []
    for epoch in range(1, args.epochs + 1):
        neg = negative_sampling(train.edge_index, train.num_nodes, num_neg_samples=train.edge_label_index.size(1),
                                seed=args.seed, epoch=epoch)
        pairs = torch.cat([train.edge_label_index, neg], dim=1)
        label = torch.cat([train.edge_label, torch.zeros(neg.size(1))])
        model.train()
        losses.append(_pyg_step(model, opt, train, pairs, label, train_link.decode))
        model.eval()
        with torch.no_grad():
            z = model(train.x, train.edge_index)
        val_auc.append(_brute_auc(train_link.decode(z[val.edge_label_index[0]], z[val.edge_label_index[1]]),
                                  val.edge_label))
    return losses, val_auc


def test_example_on_cora_equals_single_process(planetoid_root):
    """``examples/train_link.py`` on Cora at P = 3 (METIS): the loss and validation AUC curves of the
    single-process script; the pairs' exchange moves the predicted bytes."""
    argv = ["--dataset", "Cora", "--root", planetoid_root, "--epochs", "3", "--hidden", "32", "--out", "16"]
    ref_losses, ref_auc = _example_reference(train_link.parse_args(argv))
    hist = launch(_run_example, 3, argv)
    torch.testing.assert_close(torch.tensor(hist[0]["loss"]), torch.tensor(ref_losses), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(torch.tensor(hist[0]["val_auc"]), torch.tensor(ref_auc), rtol=0, atol=1e-4)
    assert hist[0]["pair_bytes"] == hist[0]["pair_bytes_predicted"] and min(hist[0]["pair_bytes"]) > 0
    assert ref_losses[-1] < ref_losses[0]
