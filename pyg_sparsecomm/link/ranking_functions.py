r"""Deprecated (issue 57, one ranking-metric API): functional forms of :mod:`~pyg_sparsecomm.link.ranking`'s
classes, which are the API, as PyG's ``torch_geometric.metrics.LinkPred*`` classes are; each function warns with
a :class:`DeprecationWarning` naming the class, then runs it (a collective, the same float on every rank).
They are removed in 0.5.

.. code-block:: python

    recall = global_recall_at_k(pred_index_mat, edge_label_index, k=20)  # deprecated: instead
    metric = DistributedLinkPredRecall(k=20)
    metric.update(pred_index_mat, edge_label_index)  # this rank's users' rows
    recall = float(metric.compute())
"""
import warnings
from typing import Any

import torch.distributed as dist
import torch_geometric.metrics as pyg_metrics
from torch import Tensor

from .ranking import DistributedLinkPredMetric, EdgeLabelIndex, pyg_metric


def _deprecated(name: str, instead: str, metric: Any, pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex,
                edge_label_weight: Tensor | None, group: dist.ProcessGroup | None) -> float:
    """Warns that ``name`` is deprecated for the class ``instead``, then computes ``metric`` with it."""
    warnings.warn(f"pyg_sparsecomm.link.{name} is deprecated (one ranking-metric API, removed in 0.5): use "
                  f"metric = pyg_sparsecomm.link.{instead}; metric.update(pred_index_mat, edge_label_index); "
                  f"float(metric.compute())", DeprecationWarning, stacklevel=3)
    distributed = DistributedLinkPredMetric(metric, group)
    distributed.update(pred_index_mat, edge_label_index, edge_label_weight)
    return float(distributed.compute())


def global_link_pred_metric(metric: Any, pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex,
                            edge_label_weight: Tensor | None = None,
                            group: dist.ProcessGroup | None = None) -> float:
    r"""Deprecated: :class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredMetric` ``(metric, group)``.

    Args:
        metric (torch_geometric.metrics.LinkPredMetric): the metric, e.g. ``LinkPredNDCG(k=10, weighted=True)``.
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        edge_label_weight (torch.Tensor, optional): ground-truth relevance, for weighted metrics
            (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """
    return _deprecated("global_link_pred_metric", "DistributedLinkPredMetric(metric, group)", metric,
                       pred_index_mat, edge_label_index, edge_label_weight, group)


def global_precision_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                          group: dist.ProcessGroup | None = None) -> float:
    r"""Deprecated: :class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredPrecision` ``(k, group)``.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """
    return _deprecated("global_precision_at_k", "DistributedLinkPredPrecision(k, group)",
                       pyg_metric(pyg_metrics.LinkPredPrecision, k), pred_index_mat, edge_label_index, None, group)


def global_recall_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                       group: dist.ProcessGroup | None = None) -> float:
    r"""Deprecated: :class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredRecall` ``(k, group=group)``.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """
    return _deprecated("global_recall_at_k", "DistributedLinkPredRecall(k, group=group)",
                       pyg_metric(pyg_metrics.LinkPredRecall, k), pred_index_mat, edge_label_index, None, group)


def global_ndcg_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                     group: dist.ProcessGroup | None = None) -> float:
    r"""Deprecated: :class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredNDCG` ``(k, group=group)``.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """
    return _deprecated("global_ndcg_at_k", "DistributedLinkPredNDCG(k, group=group)",
                       pyg_metric(pyg_metrics.LinkPredNDCG, k), pred_index_mat, edge_label_index, None, group)


def global_mrr_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                    group: dist.ProcessGroup | None = None) -> float:
    r"""Deprecated: :class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredMRR` ``(k, group)``.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """
    return _deprecated("global_mrr_at_k", "DistributedLinkPredMRR(k, group)",
                       pyg_metric(pyg_metrics.LinkPredMRR, k), pred_index_mat, edge_label_index, None, group)


def global_hit_ratio_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                          group: dist.ProcessGroup | None = None) -> float:
    r"""Deprecated: :class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredHitRatio` ``(k, group)``.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """
    return _deprecated("global_hit_ratio_at_k", "DistributedLinkPredHitRatio(k, group)",
                       pyg_metric(pyg_metrics.LinkPredHitRatio, k), pred_index_mat, edge_label_index, None, group)


def global_map_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                    group: dist.ProcessGroup | None = None) -> float:
    r"""Deprecated: :class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredMAP` ``(k, group)``.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """
    return _deprecated("global_map_at_k", "DistributedLinkPredMAP(k, group)",
                       pyg_metric(pyg_metrics.LinkPredMAP, k), pred_index_mat, edge_label_index, None, group)
