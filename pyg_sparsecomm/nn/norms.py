r"""Normalisations whose statistics span the whole graph, reduced over all ranks.

On one process, ``BatchNorm`` (and PyG's ``InstanceNorm``/``GraphNorm``/graph-mode
``LayerNorm`` with ``batch=None``) normalise with statistics over *all* nodes.  On a shard
each rank holds some of them, so the statistics are summed over ranks with a
differentiable all-reduce (backward: the all-reduce of the gradients, since every rank's
loss depends on the shared statistics), in two passes for accuracy:

.. math::
    \mu = \frac{1}{N} \sum_r \sum_{i \in V_r} x_i, \qquad
    \sigma^2 = \frac{1}{N} \sum_r \sum_{i \in V_r} (x_i - \mu)^2

This is ``SyncBatchNorm``'s semantics, on gloo/CPU as well as NCCL.  Running statistics are
updated with the unbiased :math:`\sigma^2 N / (N - 1)` as on one process.  The classes are
swapped in place (:func:`convert_norm`); parameters, buffers and ``state_dict`` keys stay.
Without a multi-rank process group each behaves exactly as its PyG/torch base class.
"""

import torch
from torch import Tensor
from torch_geometric.nn import norm as pyg_norm

from ..comm.collectives import row_all_reduce
from ..comm.grid import process_grid
from ..comm.group import world_size
from ..training.whole_graph import global_count
from .rules.registry import swap_class


class _GlobalStatistics:
    """Mixin: the process group the statistics are reduced over (set by :func:`convert_norm`)."""
    _sparsecomm_settings = None

    def _stats_group(self):
        settings = self._sparsecomm_settings
        if settings is None:
            return None
        return process_grid(settings.replication).col_group if settings.replication > 1 else settings.group

    def _distributed(self) -> bool:
        return self._sparsecomm_settings is not None and world_size(self._stats_group()) > 1

    def _one_distributed_graph(self, batch: Tensor | None) -> bool:
        """Whether this call normalises over all ranks (a batch vector is refused then)."""
        if not self._distributed():
            return False
        _refuse_batch(self, batch)
        return True


def global_mean_var(rows: Tensor, group, mean_scale=1.0) -> tuple[Tensor, Tensor, int]:
    """Per-column mean of ``rows`` ``[n, C]`` over all ranks' rows, the biased variance of
    ``rows - mean_scale * mean`` (GraphNorm's learnable shift; 1: the plain variance), and ``N``."""
    count = global_count(rows.size(0), group)
    mean = row_all_reduce(rows.sum(0), group) / max(count, 1)
    centred = rows - mean * mean_scale
    var = row_all_reduce((centred * centred).sum(0), group) / max(count, 1)
    return mean, var, count


def _update_running(module, mean: Tensor, var: Tensor, count: int) -> None:
    if not getattr(module, "track_running_stats", False) or module.running_mean is None:
        return
    with torch.no_grad():
        momentum = module.momentum
        if isinstance(module, torch.nn.BatchNorm1d) and module.num_batches_tracked is not None:
            module.num_batches_tracked.add_(1)  # F.instance_norm (InstanceNorm) does not count
            if momentum is None:
                momentum = 1.0 / float(module.num_batches_tracked)
        unbiased = var * count / max(count - 1, 1)
        module.running_mean.mul_(1 - momentum).add_(momentum * mean.detach())
        module.running_var.mul_(1 - momentum).add_(momentum * unbiased.detach())


def _feature_norm(module, x: Tensor, group) -> Tensor:
    """BatchNorm over nodes (and the length dimension of ``[N, C, L]`` inputs)."""
    rows = x if x.dim() == 2 else x.transpose(1, 2).reshape(-1, x.size(1))
    if module.training or not module.track_running_stats:
        mean, var, count = global_mean_var(rows, group)
        if module.training:
            _update_running(module, mean, var, count)
    else:
        mean, var = module.running_mean, module.running_var
    out = (rows - mean) / torch.sqrt(var + module.eps)
    if module.weight is not None:
        out = out * module.weight + module.bias
    return out if x.dim() == 2 else out.reshape(x.size(0), x.size(2), x.size(1)).transpose(1, 2)


class DistributedBatchNorm(_GlobalStatistics, torch.nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` (also inside PyG's ``BatchNorm``) with all ranks' statistics."""

    def forward(self, x: Tensor) -> Tensor:
        if not self._distributed():
            return super().forward(x)
        return _feature_norm(self, x, self._stats_group())


class DistributedInstanceNorm(_GlobalStatistics, pyg_norm.InstanceNorm):
    """PyG's ``InstanceNorm`` of one graph (``batch=None``) with all ranks' statistics."""

    def forward(self, x: Tensor, batch: Tensor | None = None, batch_size: int | None = None) -> Tensor:
        if not self._one_distributed_graph(batch):
            return super().forward(x, batch, batch_size)
        return _feature_norm(self, x, self._stats_group())


class DistributedGraphNorm(_GlobalStatistics, pyg_norm.GraphNorm):
    """PyG's ``GraphNorm`` of one graph (``batch=None``) with all ranks' statistics."""

    def forward(self, x: Tensor, batch: Tensor | None = None, batch_size: int | None = None) -> Tensor:
        if not self._one_distributed_graph(batch):
            return super().forward(x, batch, batch_size)
        mean, var, _ = global_mean_var(x, self._stats_group(), self.mean_scale)
        return self.weight * (x - mean * self.mean_scale) / (var + self.eps).sqrt() + self.bias


class DistributedLayerNorm(_GlobalStatistics, pyg_norm.LayerNorm):
    """PyG's ``LayerNorm``; in ``mode="graph"`` with ``batch=None`` over all ranks' entries."""

    def forward(self, x: Tensor, batch: Tensor | None = None, batch_size: int | None = None) -> Tensor:
        if self.mode != "graph" or not self._one_distributed_graph(batch):
            return super().forward(x, batch, batch_size)
        mean, var, _ = global_mean_var(x.reshape(-1, 1), self._stats_group())
        out = (x - mean) / (var.sqrt() + self.eps)
        if self.weight is not None and self.bias is not None:
            out = out * self.weight + self.bias
        return out


def _refuse_batch(module, batch: Tensor | None) -> None:
    if batch is not None:
        raise NotImplementedError(f"{type(module).__name__} with a batch vector cannot run distributed: its "
                                  f"graphs may span ranks; call it with batch=None (one graph)")


def convert_norm(module: torch.nn.Module, settings) -> None:
    """Swaps the class of a whole-graph norm for its rule's ``distributed_class`` in place
    (idempotent); other modules are left alone."""
    swap_class(module)
    if isinstance(module, _GlobalStatistics):
        module._sparsecomm_settings = settings
