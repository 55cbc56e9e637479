r"""PyG's ranking metrics over every rank's users in one call each: the functional forms of
:mod:`~pyg_sparsecomm.link.ranking`'s classes (collectives: every rank calls them, also one without users;
the same float on every rank).

.. code-block:: python

    recall = global_recall_at_k(pred_index_mat, edge_label_index, k=20)  # this rank's users' rows
"""
from typing import Any

import torch.distributed as dist
import torch_geometric.metrics as pyg_metrics
from torch import Tensor

from .ranking import DistributedLinkPredMetric, EdgeLabelIndex, pyg_metric


def global_link_pred_metric(metric: Any, pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex,
                            edge_label_weight: Tensor | None = None,
                            group: dist.ProcessGroup | None = None) -> float:
    r"""PyG's ``metric`` over every rank's users (:class:`~pyg_sparsecomm.link.ranking.DistributedLinkPredMetric`).

    Args:
        metric (torch_geometric.metrics.LinkPredMetric): the metric, e.g. ``LinkPredNDCG(k=10, weighted=True)``.
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): the ground truth: ``[0]`` the row of :obj:`pred_index_mat`
            (this rank's users, from 0), ``[1]`` the global item id.
        edge_label_weight (torch.Tensor, optional): ground-truth relevance, for weighted metrics
            (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)

    Shapes:
        pred_index_mat: :math:`[n, \ge k]`; edge_label_index: :math:`[2, m]`; edge_label_weight: :math:`[m]`.
    """
    distributed = DistributedLinkPredMetric(metric, group)
    distributed.update(pred_index_mat, edge_label_index, edge_label_weight)
    return float(distributed.compute())


def global_precision_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                          group: dist.ProcessGroup | None = None) -> float:
    r"""Precision@:math:`k` over every rank's users, as PyG's :class:`~torch_geometric.metrics.LinkPredPrecision`.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)

    Shapes:
        pred_index_mat: :math:`[n, \ge k]`; edge_label_index: :math:`[2, m]`.
    """
    metric = pyg_metric(pyg_metrics.LinkPredPrecision, k)
    return global_link_pred_metric(metric, pred_index_mat, edge_label_index, group=group)


def global_recall_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                       group: dist.ProcessGroup | None = None) -> float:
    r"""Recall@:math:`k` over every rank's users, as PyG's :class:`~torch_geometric.metrics.LinkPredRecall`.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)

    Shapes:
        pred_index_mat: :math:`[n, \ge k]`; edge_label_index: :math:`[2, m]`.
    """
    metric = pyg_metric(pyg_metrics.LinkPredRecall, k)
    return global_link_pred_metric(metric, pred_index_mat, edge_label_index, group=group)


def global_ndcg_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                     group: dist.ProcessGroup | None = None) -> float:
    r"""NDCG@:math:`k` over every rank's users, as PyG's :class:`~torch_geometric.metrics.LinkPredNDCG`.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)

    Shapes:
        pred_index_mat: :math:`[n, \ge k]`; edge_label_index: :math:`[2, m]`.
    """
    metric = pyg_metric(pyg_metrics.LinkPredNDCG, k)
    return global_link_pred_metric(metric, pred_index_mat, edge_label_index, group=group)


def global_mrr_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                    group: dist.ProcessGroup | None = None) -> float:
    r"""MRR@:math:`k` over every rank's users, as PyG's :class:`~torch_geometric.metrics.LinkPredMRR`.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)

    Shapes:
        pred_index_mat: :math:`[n, \ge k]`; edge_label_index: :math:`[2, m]`.
    """
    metric = pyg_metric(pyg_metrics.LinkPredMRR, k)
    return global_link_pred_metric(metric, pred_index_mat, edge_label_index, group=group)


def global_hit_ratio_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                          group: dist.ProcessGroup | None = None) -> float:
    r"""Hit ratio@:math:`k` over every rank's users, as PyG's :class:`~torch_geometric.metrics.LinkPredHitRatio`.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)

    Shapes:
        pred_index_mat: :math:`[n, \ge k]`; edge_label_index: :math:`[2, m]`.
    """
    metric = pyg_metric(pyg_metrics.LinkPredHitRatio, k)
    return global_link_pred_metric(metric, pred_index_mat, edge_label_index, group=group)


def global_map_at_k(pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex, k: int,
                    group: dist.ProcessGroup | None = None) -> float:
    r"""MAP@:math:`k` over every rank's users, as PyG's :class:`~torch_geometric.metrics.LinkPredMAP`.

    Args:
        pred_index_mat (torch.Tensor): this rank's users' predicted global item ids, best first.
        edge_label_index (torch.Tensor): ``[0]`` the row of :obj:`pred_index_mat`, ``[1]`` the item.
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)

    Shapes:
        pred_index_mat: :math:`[n, \ge k]`; edge_label_index: :math:`[2, m]`.
    """
    metric = pyg_metric(pyg_metrics.LinkPredMAP, k)
    return global_link_pred_metric(metric, pred_index_mat, edge_label_index, group=group)
