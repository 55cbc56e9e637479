r"""PyG's ``CorrectAndSmooth`` on a shard: its autoscale over the whole graph, its masks the shard's rows.

``distribute(model)`` swaps in :class:`DistributedCorrectAndSmooth` (no parameters; its two
``LabelPropagation`` children propagate as any ``distribute()``d layer).  PyG's ``correct`` with
``autoscale=True`` scales the propagated error of row :math:`i` by

.. math::
    s_i = \frac{\sigma}{\lVert \hat e_i \rVert_1}, \qquad
    \sigma = \frac{1}{|\mathcal{T}|} \sum_{j \in \mathcal{T}} \lVert e_j \rVert_1,

the mean error of the training nodes :math:`\mathcal{T}` (:math:`s_i = 1` where infinite or above
1000).  On a shard :math:`\sigma` is a sum and a count over all ranks' training rows; a rank's own
mean would scale its rows by another number.  ``mask`` (``correct`` and ``smooth``) must select the
shard's rows: its bool mask or a :class:`~pyg_sparsecomm.graph.node_index.ShardIndex`
(``shard_index(split_idx, data)['train']``), with ``y_true`` their labels (``data.y[mask]``); a plain
integer index on a partitioned graph is refused on every rank, naming ``shard_index``.

Called with a plain ``edge_index`` (no shard) it is PyG's ``CorrectAndSmooth``.
"""
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn.models import CorrectAndSmooth
from torch_geometric.utils import one_hot

from ..comm.group import raise_together
from ..graph.node_index import node_selection
from ..plan.halo_adj import HaloAdj
from ..training.whole_graph import global_count, global_sum
from .norms import _GlobalStatistics


class DistributedCorrectAndSmooth(_GlobalStatistics, CorrectAndSmooth):
    """PyG's ``CorrectAndSmooth`` on a shard (see the module doc)."""

    def _group(self) -> Any:
        settings = self._sparsecomm_settings
        return None if settings is None else settings.group

    def _rows(self, y_soft: Tensor, y_true: Tensor, mask: Any, adj: HaloAdj, step: str) -> Tensor:
        """The shard's rows ``mask`` selects, checked with ``y_soft`` and ``y_true`` on every rank."""
        def check() -> Tensor:
            who = f"{type(self).__name__}.{step}"
            if y_soft.size(0) != adj.num_owned:
                raise ValueError(f"{who}: y_soft has {y_soft.size(0)} rows but this rank owns {adj.num_owned}: pass "
                                 f"the predictions of the shard's rows (model(data.x, data.edge_index))")
            rows = node_selection(mask, adj.num_owned, adj.plan.world_size > 1, f"{who}(mask=...)")
            if not isinstance(rows, Tensor):
                raise ValueError(f"{who}: mask must be a bool mask or an index of the shard's rows, got "
                                 f"{type(mask).__name__}")
            selected = int(rows.sum()) if rows.dtype == torch.bool else rows.numel()
            if y_true.size(0) != selected:
                raise ValueError(f"{who}: y_true has {y_true.size(0)} rows but mask selects {selected} of this "
                                 f"shard's rows: pass their labels, data.y[mask] of the shard")
            return rows
        return raise_together(check, f"{type(self).__name__}.{step}", self._group(), flag_first=True)

    def correct(self, y_soft: Tensor, y_true: Tensor, mask: Tensor, edge_index: Any,
                edge_weight: Tensor | None = None) -> Tensor:
        """PyG's ``correct``, with :math:`\\sigma` over all ranks on a shard (see the module doc).

        Args:
            y_soft (torch.Tensor): the soft predictions of the shard's rows.
            y_true (torch.Tensor): the labels of the rows ``mask`` selects.
            mask (torch.Tensor): a bool mask or an index of the shard's rows.
            edge_index (HaloAdj): the shard's adjacency (``data.edge_index``, ``data.adj_t``).
            edge_weight (torch.Tensor, optional): the shard's edge weights. (default: :obj:`None`)
        """
        if not isinstance(edge_index, HaloAdj):
            return super().correct(y_soft, y_true, mask, edge_index, edge_weight)
        rows = self._rows(y_soft, y_true, mask, edge_index, "correct")
        if not self.autoscale:  # the error is fixed at the training rows after every step: local
            return super().correct(y_soft, y_true, rows, edge_index, edge_weight)
        if y_true.dtype == torch.long and y_true.size(0) == y_true.numel():
            y_true = one_hot(y_true.view(-1), num_classes=y_soft.size(-1), dtype=y_soft.dtype)
        error = torch.zeros_like(y_soft)
        error[rows] = y_true - y_soft[rows]
        smoothed = self.prop1(error, edge_index, edge_weight=edge_weight, post_step=lambda x: x.clamp_(-1., 1.))
        group = self._group()
        count = global_count(int(rows.sum()) if rows.dtype == torch.bool else rows.numel(), group)
        sigma = global_sum(error[rows].abs().sum(), group).to(y_soft.dtype) / count
        scale = sigma / smoothed.abs().sum(dim=1, keepdim=True)
        scale[scale.isinf() | (scale > 1000)] = 1.0
        return y_soft + scale * smoothed

    def smooth(self, y_soft: Tensor, y_true: Tensor, mask: Tensor, edge_index: Any,
               edge_weight: Tensor | None = None) -> Tensor:
        """PyG's ``smooth``, with ``mask`` checked as the shard's rows on a shard.

        Args:
            y_soft (torch.Tensor): the corrected predictions of the shard's rows.
            y_true (torch.Tensor): the labels of the rows ``mask`` selects.
            mask (torch.Tensor): a bool mask or an index of the shard's rows.
            edge_index (HaloAdj): the shard's adjacency.
            edge_weight (torch.Tensor, optional): the shard's edge weights. (default: :obj:`None`)
        """
        if isinstance(edge_index, HaloAdj):
            mask = self._rows(y_soft, y_true, mask, edge_index, "smooth")
        return super().smooth(y_soft, y_true, mask, edge_index, edge_weight)
