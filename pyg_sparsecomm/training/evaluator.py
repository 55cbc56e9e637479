r"""An evaluator of the rows of all ranks: OGB's ``Evaluator`` (or any object with ``eval``) on a shard.

OGB's node-property scripts score a split with ``evaluator.eval({'y_true': data.y[idx], 'y_pred':
y_pred[idx]})``.  On a shard those are this rank's rows, and the metric of them a per-rank value.
:class:`GlobalEvaluator` wraps the evaluator: its ``eval`` gathers every tensor (or NumPy array) of
the input from every rank, concatenated in rank order, and evaluates them once, on every rank::

    evaluator = GlobalEvaluator(Evaluator(name='ogbn-arxiv'))
    train_acc = evaluator.eval({'y_true': data.y[split_idx['train']],
                                'y_pred': y_pred[split_idx['train']]})['acc']

The rows come in another order than in one process (rank by rank), so a metric that does not depend
on the order of the rows (OGB's accuracy, ROC-AUC, ...) is the single-process value.  Every rank
holds the gathered rows of the split while it evaluates (evaluation only: ``k`` rows of the labels
and predictions, no features).
"""
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.collectives import gather_rows


class GlobalEvaluator:
    """``evaluator`` of the rows of all ranks (see the module doc); other attributes are the
    evaluator's (``eval_metric``, ``expected_input_format``, ...).

    Args:
        evaluator (Any): an object with ``eval(input_dict)`` (OGB's ``Evaluator``).
        group (torch.distributed.ProcessGroup, optional): the ranks holding the rows. (default: all ranks)
    """

    def __init__(self, evaluator: Any, group: dist.ProcessGroup | None = None) -> None:
        self.evaluator, self.group = evaluator, group

    def eval(self, input_dict: dict[str, Any]) -> Any:
        """The evaluator's ``eval`` of every rank's rows of ``input_dict`` together (a collective:
        every rank calls it with the same keys).

        Args:
            input_dict (dict): this rank's rows per key (tensors or NumPy arrays; other values are
                passed as they are).
        """
        return self.evaluator.eval({key: self._gathered(value) for key, value in input_dict.items()})

    def _gathered(self, value: Any) -> Any:
        if isinstance(value, Tensor):
            return gather_rows(value, self.group, "GlobalEvaluator")
        if isinstance(value, np.ndarray):
            return gather_rows(torch.from_numpy(value), self.group, "GlobalEvaluator").numpy()
        return value

    def __getattr__(self, name: str) -> Any:
        if name in ("evaluator", "group"):  # not yet set (copy, unpickling)
            raise AttributeError(name)
        return getattr(self.evaluator, name)
