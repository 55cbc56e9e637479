r"""Ranking metrics of recommendations over the users of all ranks, as PyG computes them in one process.

:class:`DistributedLinkPredMetric` wraps one of PyG's :class:`~torch_geometric.metrics.LinkPredMetric`
(recall, precision, NDCG, MRR, hit ratio, MAP, F1 @ :math:`k`, weighted or not): every rank calls
:meth:`~DistributedLinkPredMetric.update` with the top-:math:`k` predictions of *its own* users, and
:meth:`~DistributedLinkPredMetric.compute` (a collective: every rank calls it, also one without users)
returns on every rank PyG's metric of the concatenation of all ranks' users.

Per-user values are PyG's own (``metric._compute``), so users without ground truth count as PyG counts
them: they add 0 to the sum and are left out of the number of users averaged over. Only sums cross the
wire: the metric's sum over this rank's users, how many of them have ground truth, and, to check the
input, an error count and :math:`k` and :math:`k^2` (one all-reduce of five ``float64`` per
:meth:`~DistributedLinkPredMetric.compute`, 40 bytes, not counted: a small value like a loss).
The sum is kept in ``float64``, where adding the ``float32`` per-user values is exact whatever the
order when each nonzero value is at least :math:`2^{-10}` and there are fewer than :math:`2^{20}` users
(e.g. :math:`k \le 1000` and fewer than 1000 ground-truth items per user): the result is then the same
float for any number of ranks and any split into :meth:`~DistributedLinkPredMetric.update` calls.
PyG's own ``float32`` running sum can differ from it in the last bit (its rounding depends on how
the users are batched).

Bad input (a row index past this rank's rows, a negative item id, weights of the wrong length) is
reported by :meth:`~DistributedLinkPredMetric.compute` on every rank: an error raised by
:meth:`~DistributedLinkPredMetric.update` on one rank alone would leave its peers waiting in
:meth:`~DistributedLinkPredMetric.compute`.
"""
from typing import Any

import torch
import torch.distributed as dist
import torch_geometric.metrics as pyg_metrics
from torch import Tensor

from ..comm.collectives import all_reduce_value
from ..comm.group import raise_together
from ..comm.group import world_size as group_world_size

EdgeLabelIndex = Tensor | tuple[Tensor, Tensor]


def pyg_metric(metric_class: type, k: int, **kwargs: Any) -> Any:
    """PyG's ``metric_class(k, **kwargs)``, after checking ``k`` with an error that names the fix."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{metric_class.__name__}: k must be a positive integer (the number of top-ranked "
                         f"items scored per user), got {k!r}: pass k >= 1")
    return metric_class(k, **kwargs)


def _metric_data_class() -> type:
    data_class = getattr(pyg_metrics.link_pred, "LinkPredMetricData", None)
    if data_class is None:  # PyG before the weighted metrics (2.6)
        raise ImportError("distributed ranking metrics reuse PyG's LinkPredMetricData, which this "
                          "torch_geometric lacks: upgrade it (pip install -U torch_geometric)")
    return data_class


def _as_pair(edge_label_index: EdgeLabelIndex) -> tuple[Tensor, Tensor]:
    if isinstance(edge_label_index, Tensor):
        if edge_label_index.dim() != 2 or edge_label_index.size(0) != 2:
            raise ValueError(f"edge_label_index must have shape [2, num_ground_truth], got "
                             f"{list(edge_label_index.shape)}: stack (row, item) pairs as rows")
        return edge_label_index[0], edge_label_index[1]
    rows, items = edge_label_index
    if rows.dim() != 1 or rows.shape != items.shape:
        raise ValueError(f"edge_label_index as a tuple needs two vectors of one length, got shapes "
                         f"{list(rows.shape)} and {list(items.shape)}")
    return rows, items


def _check_ids(pred_index_mat: Tensor, rows: Tensor, items: Tensor) -> None:
    for name, t in (("pred_index_mat", pred_index_mat), ("edge_label_index", rows)):
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"{name} must hold integer ids, got {t.dtype}: convert with .long()")
    if pred_index_mat.dim() != 2:
        raise ValueError(f"pred_index_mat must have shape [num_users, k], got {list(pred_index_mat.shape)}")
    num_rows = pred_index_mat.size(0)
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= num_rows):
        raise ValueError(f"edge_label_index[0] holds rows {int(rows.min())}..{int(rows.max())} but this rank's "
                         f"pred_index_mat has {num_rows} rows: edge_label_index[0] indexes this rank's rows of "
                         f"pred_index_mat (0..{num_rows - 1}), not global user ids (map them, e.g. with "
                         f"torch.searchsorted on this rank's sorted user ids)")
    for name, t in (("pred_index_mat", pred_index_mat), ("edge_label_index[1]", items)):
        if t.numel() and int(t.min()) < 0:
            raise ValueError(f"{name} holds the negative item id {int(t.min())}: item ids must be global ids "
                             f">= 0 (PyG matches predictions and ground truth by id)")


class DistributedLinkPredMetric:
    r"""PyG's link-prediction ``metric`` over the users of every rank of ``group``.

    Each rank passes the top-:math:`k` predictions of its own users; :meth:`compute` returns on every
    rank what ``metric`` returns in one process after one ``update`` with all ranks' rows concatenated
    (rows of rank 0, then rank 1, ...; the row indices of ``edge_label_index`` shifted to match).

    .. code-block:: python

        recall = DistributedLinkPredMetric(LinkPredRecall(k=20))
        recall.update(pred_index_mat, edge_label_index)  # this rank's users
        value = recall.compute()  # every rank calls it, also one without users

    Args:
        metric (torch_geometric.metrics.LinkPredMetric): the metric, e.g.
            :class:`~torch_geometric.metrics.LinkPredNDCG` ``(k=20, weighted=True)``; its own state is
            not used.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users
            (default: :obj:`None`, the default group).
    """

    def __init__(self, metric: Any, group: dist.ProcessGroup | None = None) -> None:
        self.metric, self.group = metric, group
        self._data_class = _metric_data_class()
        self.reset()

    @property
    def k(self) -> int:
        """The number of top-ranked predictions scored per user."""
        return int(self.metric.k)

    def reset(self) -> None:
        """Forgets every update (and any pending error)."""
        self.accum = torch.zeros((), dtype=torch.float64)
        self.total = torch.zeros((), dtype=torch.long)
        self.error: Exception | None = None

    def update(self, pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex,
               edge_label_weight: Tensor | None = None) -> None:
        r"""Adds this rank's users; no communication (as PyG's, may be called for every batch).

        Args:
            pred_index_mat (torch.Tensor): the global item ids predicted for this rank's users, best
                first.
            edge_label_index (torch.Tensor or (torch.Tensor, torch.Tensor)): the ground truth:
                ``[0]`` the row of :obj:`pred_index_mat` (this rank's users, from 0), ``[1]`` the
                global item id.
            edge_label_weight (torch.Tensor, optional): the relevance of each ground-truth pair;
                required by weighted metrics, ignored by the others, pairs of weight :math:`\le 0`
                dropped, as PyG does (default: :obj:`None`)

        Shapes:
            pred_index_mat: :math:`[n, \ge k]` (:math:`n` may be 0);
            edge_label_index: :math:`[2, m]`; edge_label_weight: :math:`[m]`.
        """
        if self.error is not None:
            return
        try:
            values, counted = self._per_user(pred_index_mat, edge_label_index, edge_label_weight)
        except Exception as error:  # noqa: BLE001 - raised by compute() on every rank, not here alone
            self.error = error
            return
        self.accum = self.accum.to(values.device) + values.double().sum()
        self.total = self.total.to(values.device) + counted

    def _per_user(self, pred_index_mat: Tensor, edge_label_index: EdgeLabelIndex,
                  edge_label_weight: Tensor | None) -> tuple[Tensor, Tensor]:
        rows, items = _as_pair(edge_label_index)
        _check_ids(pred_index_mat, rows, items)
        weighted = bool(getattr(self.metric, "weighted", False))
        if weighted and edge_label_weight is None:
            raise ValueError(f"{self.metric!r} is weighted: pass edge_label_weight to update()")
        if weighted and edge_label_weight is not None and edge_label_weight.shape != rows.shape:
            raise ValueError(f"edge_label_weight has shape {list(edge_label_weight.shape)} but there are "
                             f"{rows.numel()} ground-truth pairs: pass one weight per pair")
        data = self._data_class(pred_index_mat=pred_index_mat, edge_label_index=(rows, items),
                                edge_label_weight=edge_label_weight if weighted else None)
        return self.metric._compute(data), (data.label_count > 0).sum()

    def compute(self) -> Tensor:
        """The metric over every rank's users (a collective; the same value on every rank).

        Returns a scalar in PyG's dtype (``torch.get_default_dtype()``); 0 when no user of any rank has
        ground truth, as PyG.
        """
        P = group_world_size(self.group)
        flags = self.accum.new_tensor([float(self.error is not None), float(self.k), float(self.k) ** 2])
        stats = torch.cat([self.accum.view(1), self.total.double().view(1), flags])
        stats = all_reduce_value(stats, dist.ReduceOp.SUM, self.group, what=f"{self.name}.compute")
        accum, total, errors, k_sum, k_squares = (float(v) for v in stats.cpu())
        if errors:
            raise_together(self._raise_pending, f"{self.name}.update", self.group)
        if k_squares * P != k_sum ** 2:  # equal iff every rank has the same k (Cauchy-Schwarz)
            raise ValueError(f"{self.name}: the ranks built the metric with different k (this rank: {self.k}): "
                             f"construct it with the same k on every rank")
        value = accum / total if total else 0.0
        return torch.tensor(value, dtype=torch.float64).to(self.metric.accum.dtype)

    def _raise_pending(self) -> None:
        if self.error is not None:
            raise self.error

    @property
    def name(self) -> str:
        return type(self.metric).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.metric!r})"


class DistributedLinkPredPrecision(DistributedLinkPredMetric):
    r"""PyG's :class:`~torch_geometric.metrics.LinkPredPrecision` over every rank's users
    (see :class:`DistributedLinkPredMetric`).

    Args:
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """

    def __init__(self, k: int, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(pyg_metric(pyg_metrics.LinkPredPrecision, k), group)


class DistributedLinkPredRecall(DistributedLinkPredMetric):
    r"""PyG's :class:`~torch_geometric.metrics.LinkPredRecall` over every rank's users
    (see :class:`DistributedLinkPredMetric`).

    Args:
        k (int): the number of top-ranked predictions scored per user.
        weighted (bool, optional): relevance-weighted recall, as PyG's (default: :obj:`False`)
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """

    def __init__(self, k: int, weighted: bool = False, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(pyg_metric(pyg_metrics.LinkPredRecall, k, weighted=weighted), group)


class DistributedLinkPredNDCG(DistributedLinkPredMetric):
    r"""PyG's :class:`~torch_geometric.metrics.LinkPredNDCG` over every rank's users
    (see :class:`DistributedLinkPredMetric`).

    Args:
        k (int): the number of top-ranked predictions scored per user.
        weighted (bool, optional): graded relevance from ``edge_label_weight``, as PyG's
            (default: :obj:`False`)
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """

    def __init__(self, k: int, weighted: bool = False, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(pyg_metric(pyg_metrics.LinkPredNDCG, k, weighted=weighted), group)


class DistributedLinkPredMRR(DistributedLinkPredMetric):
    r"""PyG's :class:`~torch_geometric.metrics.LinkPredMRR` over every rank's users
    (see :class:`DistributedLinkPredMetric`).

    Args:
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """

    def __init__(self, k: int, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(pyg_metric(pyg_metrics.LinkPredMRR, k), group)


class DistributedLinkPredHitRatio(DistributedLinkPredMetric):
    r"""PyG's :class:`~torch_geometric.metrics.LinkPredHitRatio` over every rank's users
    (see :class:`DistributedLinkPredMetric`).

    Args:
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """

    def __init__(self, k: int, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(pyg_metric(pyg_metrics.LinkPredHitRatio, k), group)


class DistributedLinkPredMAP(DistributedLinkPredMetric):
    r"""PyG's :class:`~torch_geometric.metrics.LinkPredMAP` over every rank's users
    (see :class:`DistributedLinkPredMetric`).

    Args:
        k (int): the number of top-ranked predictions scored per user.
        group (torch.distributed.ProcessGroup, optional): the ranks holding users (default: :obj:`None`)
    """

    def __init__(self, k: int, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(pyg_metric(pyg_metrics.LinkPredMAP, k), group)
