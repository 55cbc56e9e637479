"""Ranking metrics and top-k recommendation over sharded users and items equal single-process PyG (issue 48).

One launch per P = 1, 2, 3 (P = 3: rank 2 owns no user, rank 1 no item) checks, on random users and
items (users 0..4 without ground truth, items 12..16 nobody rated, integer embeddings full of tied
scores): PyG's LinkPredPrecision/Recall/NDCG/MRR/HitRatio/MAP/F1 (weighted too) of the concatenated
users, updated in two batches per rank; the same float for every P; the top-k of every user over all
ranks' items with seen pairs excluded, ties by the lower item id, equal to a sort of the whole score
matrix (users scored in several batches); the counted bytes equal the documented formula; bad input
raises on every rank, naming the fix.
"""
import numpy as np
import torch
import torch_geometric.metrics as pyg_metrics
from torch_geometric.utils import coalesce

import pyg_sparsecomm.link.topk as topk_module
from pyg_sparsecomm.comm.counters import comm_counter
from pyg_sparsecomm.link import (
    DistributedLinkPredMetric,
    DistributedLinkPredRecall,
    global_link_pred_metric,
    global_map_at_k,
    global_mrr_at_k,
    global_ndcg_at_k,
    recommend_topk,
)
from pyg_sparsecomm.testing import launch

USERS, ITEMS, K, DIM = 23, 17, 5, 3
#: (PyG class, keyword arguments): every metric the package mirrors, weighted variants included
METRICS = [(pyg_metrics.LinkPredPrecision, {}), (pyg_metrics.LinkPredRecall, {}),
           (pyg_metrics.LinkPredRecall, {"weighted": True}), (pyg_metrics.LinkPredNDCG, {}),
           (pyg_metrics.LinkPredNDCG, {"weighted": True}), (pyg_metrics.LinkPredMRR, {}),
           (pyg_metrics.LinkPredHitRatio, {}), (pyg_metrics.LinkPredMAP, {}), (pyg_metrics.LinkPredF1, {})]
KINDS = ("topk_users", "topk_user_ids", "topk_scores", "topk_ids")


def _data():
    gen = torch.Generator().manual_seed(0)
    pred = torch.stack([torch.randperm(ITEMS, generator=gen)[:K + 2] for _ in range(USERS)])
    truth = coalesce(torch.stack([torch.randint(5, USERS, (60,), generator=gen),  # users 0..4: no truth
                                  torch.randint(0, 12, (60,), generator=gen)]))  # items 12..: nobody rated
    weight = torch.rand(truth.size(1), generator=gen) * 1.3 - 0.3  # some <= 0: PyG drops those pairs
    users = torch.randint(-1, 2, (USERS, DIM), generator=gen).float()  # many tied scores
    items = torch.randint(-1, 2, (ITEMS, DIM), generator=gen).float()
    seen = torch.stack([torch.randint(0, USERS, (30,), generator=gen), torch.randint(0, ITEMS, (30,), generator=gen)])
    all_but_two = torch.stack([torch.full((ITEMS - 2,), 6), torch.arange(2, ITEMS)])  # user 6: 2 items unseen
    seen = torch.cat([seen, all_but_two], dim=1)
    return {"pred": pred, "truth": truth, "weight": weight, "users": users, "items": items,
            "seen": coalesce(seen), "float_users": torch.randn(USERS, 4, generator=gen),
            "float_items": torch.randn(ITEMS, 4, generator=gen)}


def _owners(P):
    if P == 3:  # rank 2 owns no user, rank 1 no item
        return torch.arange(USERS) % 2, (torch.arange(ITEMS) % 2) * 2
    return (torch.randint(0, P, (USERS,), generator=torch.Generator().manual_seed(P)),
            torch.randint(0, P, (ITEMS,), generator=torch.Generator().manual_seed(P + 10)))


def _my_truth(data, mine):
    """This rank's ground truth with rows of its own users (0..) and global item ids."""
    keep = torch.isin(data["truth"][0], mine)
    rows = torch.searchsorted(mine, data["truth"][0][keep])
    return torch.stack([rows, data["truth"][1][keep]]), data["weight"][keep]


def _metrics(data, mine):
    pred = data["pred"][mine]
    truth, weight = _my_truth(data, mine)
    half = pred.size(0) // 2
    out = []
    for cls, kwargs in METRICS:
        metric = DistributedLinkPredMetric(cls(K, **kwargs))
        for lo, hi in ((0, half), (half, pred.size(0))):  # two batches: accumulation
            batch = (truth[0] >= lo) & (truth[0] < hi)
            metric.update(pred[lo:hi], truth[:, batch] - torch.tensor([[lo], [0]]), weight[batch])
        out.append(metric.compute())
    functional = [global_ndcg_at_k(pred, truth, K), global_mrr_at_k(pred, (truth[0], truth[1]), K),
                  global_map_at_k(pred, truth, K),
                  global_link_pred_metric(pyg_metrics.LinkPredNDCG(K, weighted=True), pred, truth, weight)]
    return out, functional


def _recommend(data, mine, items_mine):
    seen = data["seen"][:, torch.isin(data["seen"][1], items_mine)]  # held by the item's owner
    comm_counter().reset()
    topk_module._SCORES_PER_BATCH = 40  # users scored in several batches, the seen pairs split between them
    top = recommend_topk(data["users"][mine], data["items"][items_mine], items_mine, K, user_ids=mine, exclude=seen)
    topk_module._SCORES_PER_BATCH = 1 << 22
    counted = {kind: (comm_counter().bytes_sent(kind), comm_counter().bytes_received(kind)) for kind in KINDS}
    plain = recommend_topk(data["float_users"][mine], data["float_items"][items_mine], items_mine, K)
    return top, counted, plain


def _error(fn):
    try:
        fn()
    except ValueError as e:
        return str(e)
    return None


def _errors(rank, P, data, mine, items_mine):
    pred, (truth, _) = data["pred"][mine], _my_truth(data, mine)

    def bad_update(who, row, item, k=K):
        """Recall with one extra ground-truth pair (row, item) on rank ``who`` (none when ``who`` < 0)."""
        metric = DistributedLinkPredRecall(k)
        extra = torch.tensor([[row], [item]]) if rank == who else torch.zeros(2, 0, dtype=torch.long)
        metric.update(pred, torch.cat([truth, extra], dim=1))
        return metric.compute()

    users, items = data["users"], data["items"]
    shifted = items_mine + 100 if rank == P - 1 else items_mine
    not_mine = torch.tensor([[0], [999]]) if rank == 0 else torch.zeros(2, 0, dtype=torch.long)
    return {
        "row": _error(lambda: bad_update(P - 1, pred.size(0), 0)),  # rank P - 1: one row past its rows
        "item": _error(lambda: bad_update(0, 0, -3)),
        "k_differs": _error(lambda: bad_update(-1, 0, 0, k=K + (rank == 0))) if P > 1 else "skip",
        "k0_metric": _error(lambda: DistributedLinkPredRecall(0)),
        "k0": _error(lambda: recommend_topk(users[mine], items[items_mine], items_mine, 0)),
        "k_big": _error(lambda: recommend_topk(users[mine], items[items_mine], items_mine, ITEMS + 1)),
        "ids": _error(lambda: recommend_topk(users[mine], items[items_mine], shifted, K)),
        "exclude": _error(lambda: recommend_topk(users[mine], items[items_mine], items_mine, K, mine, not_mine)),
        "after": float(DistributedLinkPredRecall(K).compute()),  # the group still works
    }


def _worker(rank, P, data):
    user_owner, item_owner = _owners(P)
    mine = (user_owner == rank).nonzero().view(-1)
    items_mine = (item_owner == rank).nonzero().view(-1)
    metrics, functional = _metrics(data, mine)
    top, counted, plain = _recommend(data, mine, items_mine)
    return {"mine": mine, "metrics": metrics, "functional": functional, "top": top, "counted": counted,
            "plain": plain, "errors": _errors(rank, P, data, mine, items_mine)}


def _pyg(data, cls, kwargs):
    """PyG's metric of all users in one process, and the float64 sum of its per-user values."""
    metric = cls(K, **kwargs)
    metric.update(data["pred"], data["truth"], data["weight"])
    exact_data = pyg_metrics.link_pred.LinkPredMetricData(
        data["pred"], data["truth"], data["weight"] if kwargs.get("weighted") else None)
    exact = metric._compute(exact_data).double().sum() / (exact_data.label_count > 0).sum()
    return metric.compute(), exact.float()


def _reference_topk(users, items, seen, k):
    """Sort of the whole score matrix: highest first, ties by the lower item id, seen pairs at -inf."""
    scores = (users.double() @ items.double().t()).numpy()
    scores[seen[0].numpy(), seen[1].numpy()] = -np.inf
    order = np.stack([np.lexsort((np.arange(scores.shape[1]), -row))[:k] for row in scores])
    return torch.from_numpy(np.take_along_axis(scores, order, 1)), torch.from_numpy(order)


def _predicted_bytes(P, rank, excluded):
    """The module's formula: |Q_r| U_r (d s + 8 e) users out, c_r (U - U_r)(s + 8) candidates back."""
    user_owner, item_owner = _owners(P)
    U_r = int((user_owner == rank).sum())
    items = [int((item_owner == q).sum()) for q in range(P)]
    Q = sum(1 for q in range(P) if q != rank and items[q])
    c = min(K, items[rank])
    receives_users = sum(int((user_owner == q).sum()) for q in range(P) if q != rank) if items[rank] else 0
    got_candidates = U_r * sum(min(K, items[q]) for q in range(P) if q != rank)
    return {"topk_users": (Q * U_r * DIM * 4, receives_users * DIM * 4),
            "topk_user_ids": (Q * U_r * 8, receives_users * 8) if excluded else (0, 0),
            "topk_scores": (c * (USERS - U_r) * 4, got_candidates * 4),
            "topk_ids": (c * (USERS - U_r) * 8, got_candidates * 8)}


def _check_rank(P, r, out, data, refs):
    """Every check of one rank's results against single-process PyG and the reference top-k."""
    for value, (cls, kwargs), (pyg_value, exact) in zip(out["metrics"], METRICS, refs, strict=True):
        assert value.dtype == pyg_value.dtype
        assert value.item() == exact.item(), (cls.__name__, kwargs, P)  # the exact sum, whatever P
        torch.testing.assert_close(value, pyg_value, rtol=3e-7, atol=0)  # PyG's float32 sum: last bit
    expected = [refs[3][1], refs[5][1], refs[7][1], refs[4][1]]
    assert out["functional"] == [float(v) for v in expected]
    mine = out["mine"]
    values, indices = _reference_topk(data["users"], data["items"], data["seen"], K)
    assert torch.equal(out["top"].indices, indices[mine]), (P, r)
    assert torch.equal(out["top"].values.double(), values[mine])
    plain = data["float_users"] @ data["float_items"].t()
    top = plain.sort(dim=1, descending=True, stable=True)
    assert torch.equal(out["plain"].indices, top.indices[mine, :K])
    torch.testing.assert_close(out["plain"].values, top.values[mine, :K])
    assert out["counted"] == _predicted_bytes(P, r, excluded=True), (P, r, out["counted"])


def _check_errors(P, r, errors):
    assert "indexes this rank's rows of pred_index_mat" in errors["row"]
    assert "negative item id -3" in errors["item"]
    assert errors["k_differs"] == "skip" or "same k on every rank" in errors["k_differs"]
    assert "pass k >= 1" in errors["k0_metric"] and "pass k >= 1" in errors["k0"]
    assert f"pass k <= {ITEMS}" in errors["k_big"]
    assert f"item ids are 0..{ITEMS - 1}" in errors["ids"]
    assert "held by the item's owner" in errors["exclude"]
    if P > 1:  # the ranks with good input name the failing rank
        assert "rank 0" in errors["exclude"] and f"rank {P - 1}" in errors["row"]
    assert errors["after"] == 0.0


def test_ranking_metrics_and_topk_equal_single_process():
    data = _data()
    refs = [_pyg(data, cls, kwargs) for cls, kwargs in METRICS]
    values, _ = _reference_topk(data["users"], data["items"], data["seen"], K)
    assert bool(torch.isinf(values[6]).any()), "user 6 must have fewer than K unseen items"
    for P in (1, 2, 3, 4):
        outs = launch(_worker, P, data)
        for r, out in enumerate(outs):
            _check_rank(P, r, out, data, refs)
            _check_errors(P, r, out["errors"])
    user_owner, item_owner = _owners(3)
    assert not bool((user_owner == 2).any()) and not bool((item_owner == 1).any())
