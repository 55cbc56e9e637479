r"""Link-prediction metrics over the pairs of all ranks, exactly as one process computes them.

* :func:`global_auc`: the area under the ROC curve of every rank's (score, label) pairs, i.e.
  scikit-learn's ``roc_auc_score`` (what PyG's ``examples/link_pred.py`` reports) on the
  concatenation;
* :func:`global_average_precision`: the average precision of every rank's (score, label) pairs,
  scikit-learn's ``average_precision_score`` (what PyG's ``GAE.test`` reports) on the concatenation;
* :func:`global_hits_at_k`: OGB's Hits@K (``ogb.linkproppred.Evaluator``): the fraction of
  positive pairs scoring above the :math:`K`-th highest negative score of all ranks.

Both are collectives (every rank calls them, also one without pairs) and return the same float
on every rank.
"""
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.collectives import gather_rows
from ..training.whole_graph import global_count


def auc(scores: Tensor, labels: Tensor) -> float:
    r"""The ROC AUC of one process's scores (ties count one half), by the rank-sum statistic:

    .. math::
        \mathrm{AUC} = \frac{\sum_{i \in \mathcal{P}} \mathrm{rank}_i - |\mathcal{P}|(|\mathcal{P}|+1)/2}
        {|\mathcal{P}|\,|\mathcal{N}|}

    with average ranks among tied scores (:math:`\mathcal{P}`, :math:`\mathcal{N}`: positives, negatives).
    """
    scores, positive = scores.detach().double().view(-1).cpu(), _binary(labels).view(-1).cpu()
    num_pos = int(positive.sum())
    num_neg = positive.numel() - num_pos
    if num_pos == 0 or num_neg == 0:
        raise ValueError(f"AUC needs positive and negative pairs, got {num_pos} positive and {num_neg} negative "
                         f"(over all ranks): score the negatives too (label 0)")
    unique, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts  # 0-based rank of each distinct score's first occurrence
    average_rank = first.double() + (counts.double() + 1) / 2
    rank_sum = float(average_rank[inverse][positive].sum())
    return (rank_sum - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg)


def _binary(labels: Tensor) -> Tensor:
    values = labels.detach()
    if values.numel() and not bool(((values == 0) | (values == 1)).all()):
        raise ValueError("labels must be 0 (negative pair) or 1 (positive pair), as RandomLinkSplit's edge_label")
    return values.bool()


def global_auc(scores: Tensor, labels: Tensor, group: dist.ProcessGroup | None = None) -> float:
    """ROC AUC of the (score, label) pairs of all ranks (see :func:`auc`); the same on every rank.

    Args:
        scores (torch.Tensor): ``[m]`` this rank's pair scores (logits or probabilities).
        labels (torch.Tensor): ``[m]`` their labels (1: an edge, 0: a negative).
        group (torch.distributed.ProcessGroup, optional): the ranks holding pairs. (default: the default group)
    """
    if scores.numel() != labels.numel():
        raise ValueError(f"global_auc: {scores.numel()} scores but {labels.numel()} labels")
    both = torch.stack([scores.detach().double().view(-1), _binary(labels).double().view(-1)], dim=1)
    every = gather_rows(both, group)
    return auc(every[:, 0], every[:, 1])


def average_precision(scores: Tensor, labels: Tensor) -> float:
    r"""The average precision of one process's scores, scikit-learn's step-wise sum over the distinct
    scores :math:`t_1 > t_2 > \dots` (tied scores form one step):

    .. math::
        \mathrm{AP} = \sum_k (R_k - R_{k-1})\, P_k, \qquad R_0 = 0,

    :math:`P_k` and :math:`R_k` the precision and recall of the pairs scoring at least :math:`t_k`.
    """
    scores, positive = scores.detach().double().view(-1).cpu(), _binary(labels).view(-1).cpu()
    num_pos = int(positive.sum())
    if num_pos == 0:
        raise ValueError("average precision needs positive pairs, got none (over all ranks)")
    order = torch.argsort(scores, descending=True, stable=True)
    ordered, true_positives = scores[order], torch.cumsum(positive[order].double(), 0)
    last = torch.cat([(ordered[1:] != ordered[:-1]).nonzero().view(-1), torch.tensor([ordered.numel() - 1])])
    tps = true_positives[last]
    precision, recall = tps / (last + 1).double(), tps / num_pos
    return float(((recall - torch.cat([recall.new_zeros(1), recall[:-1]])) * precision).sum())


def global_average_precision(scores: Tensor, labels: Tensor, group: dist.ProcessGroup | None = None) -> float:
    """The average precision of the (score, label) pairs of all ranks (see :func:`average_precision`);
    the same on every rank.

    Args:
        scores (torch.Tensor): ``[m]`` this rank's pair scores (logits or probabilities).
        labels (torch.Tensor): ``[m]`` their labels (1: an edge, 0: a negative).
        group (torch.distributed.ProcessGroup, optional): the ranks holding pairs. (default: the default group)
    """
    if scores.numel() != labels.numel():
        raise ValueError(f"global_average_precision: {scores.numel()} scores but {labels.numel()} labels")
    both = torch.stack([scores.detach().double().view(-1), _binary(labels).double().view(-1)], dim=1)
    every = gather_rows(both, group)
    return average_precision(every[:, 0], every[:, 1])


def global_hits_at_k(pos_scores: Tensor, neg_scores: Tensor, k: int, group: dist.ProcessGroup | None = None) -> float:
    r"""OGB's Hits@K over all ranks: :math:`\frac{1}{|\mathcal{P}|}\bigl|\{i \in \mathcal{P} :
    \hat y_i > \hat y^{-}_{(K)}\}\bigr|`, :math:`\hat y^{-}_{(K)}` the :math:`K`-th highest negative
    score of all ranks (1.0 when there are fewer than :math:`K` negatives, as OGB).

    Each rank sends only its :math:`K` highest negative scores; the positives are counted where they are.

    Args:
        pos_scores (torch.Tensor): this rank's scores of positive pairs.
        neg_scores (torch.Tensor): this rank's scores of negative pairs.
        k (int): :math:`K`.
        group (torch.distributed.ProcessGroup, optional): the ranks holding pairs. (default: the default group)
    """
    if k < 1:
        raise ValueError(f"Hits@K needs K >= 1, got {k}")
    top = torch.topk(neg_scores.detach().double().view(-1), min(k, neg_scores.numel())).values
    every_top = gather_rows(top, group)
    num_pos = global_count(pos_scores.numel(), group)
    if every_top.numel() < k:
        return 1.0
    threshold = float(torch.topk(every_top, k).values[-1])
    hits = global_count(int((pos_scores.detach().double() > threshold).sum()), group)
    return hits / max(num_pos, 1)
