"""scikit-learn's ``roc_auc_score`` and ``average_precision_score`` over the pairs of all ranks: the AUC
PyG's ``examples/link_pred.py`` reports and the AP of PyG's ``GAE.test``, of a shard's pairs (see
:func:`~pyg_sparsecomm.link.metrics.global_auc`, :func:`~pyg_sparsecomm.link.metrics.global_average_precision`)."""
import numpy as np
import torch
import torch.distributed as dist

from .metrics import global_auc, global_average_precision


def roc_auc_score(y_true, y_score, group: dist.ProcessGroup | None = None) -> float:
    """``sklearn.metrics.roc_auc_score(y_true, y_score)`` of every rank's pairs together (binary
    labels; ties count one half, as scikit-learn's); the same float on every rank.  A collective:
    every rank calls it, also one holding no pairs.

    Args:
        y_true (numpy.ndarray or torch.Tensor): ``[m]`` this rank's labels (1: an edge, 0: a negative).
        y_score (numpy.ndarray or torch.Tensor): ``[m]`` their scores (logits or probabilities).
        group (torch.distributed.ProcessGroup, optional): the ranks holding pairs. (default: all)
    """
    return global_auc(_tensor(y_score), _tensor(y_true), group)


def average_precision_score(y_true, y_score, group: dist.ProcessGroup | None = None) -> float:
    """``sklearn.metrics.average_precision_score(y_true, y_score)`` of every rank's pairs together (binary
    labels; tied scores one step, as scikit-learn's); the same float on every rank.  A collective.

    Args:
        y_true (numpy.ndarray or torch.Tensor): ``[m]`` this rank's labels (1: an edge, 0: a negative).
        y_score (numpy.ndarray or torch.Tensor): ``[m]`` their scores (logits or probabilities).
        group (torch.distributed.ProcessGroup, optional): the ranks holding pairs. (default: all)
    """
    return global_average_precision(_tensor(y_score), _tensor(y_true), group)


def _tensor(values) -> torch.Tensor:
    return torch.from_numpy(np.asarray(values)) if not isinstance(values, torch.Tensor) else values
