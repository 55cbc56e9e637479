r"""What a shard's tensor indexed by an index list of the whole graph is: this rank's share of it.

In one process ``data.y[split_idx['test']]`` holds the labels of every listed node, and a script
hands it to a metric, most often on the host: OGB's ``Evaluator.eval`` begins with
``y_true.detach().cpu().numpy()``.  On a shard the same line holds this rank's share only (the
rows of the listed nodes it owns, :mod:`~pyg_sparsecomm.graph.node_index`), and any metric of that
array is a per-rank number that looks like the whole graph's, silently.

Indexing a shard's tensor with a :class:`~pyg_sparsecomm.graph.node_index.ShardIndex` of a
partitioned graph therefore gives a :class:`ShardSelection`: the same tensor, marked.  It computes
as any tensor (the loss, ``argmax``, comparisons; results of its rows stay marked), prints its
rows and lists them (``.tolist()``: ids, ``local.n_id[idx].tolist()``, are per-rank on purpose);
only the way metrics leave torch refuses, naming the fix:

* ``.numpy()`` and ``np.asarray(t)`` (what OGB's ``Evaluator``, scikit-learn's metrics and NumPy
  read a tensor with) raise :class:`PerRankSelectionError`: score every rank's rows together
  (``GlobalEvaluator(Evaluator(name))``, ``global_accuracy``), gather them (``gather_nodes`` of the
  unindexed tensor), or take this rank's rows on purpose as a plain tensor,
  ``t.as_subclass(torch.Tensor)`` (which is the tensor itself at any number of ranks).

A refusal, not a gather: a collective hidden in ``.numpy()`` would hang a script that converts on
one rank only (``if rank == 0: np.save(path, y.numpy())``); an error never does.  On one process (the
whole graph on one part) nothing is marked.
"""
from typing import Any

import torch
from torch import Tensor

from ..compat import torch_function_disabled

#: the conversions by which metrics leave torch, where a per-rank share turns into a number
_HOST_CONVERSIONS: set[Any] = {Tensor.numpy, Tensor.__array__}

#: operations whose result is a plain tensor however it looks (the escape itself)
_PLAIN: set[Any] = {Tensor.as_subclass}


class PerRankSelectionError(TypeError):
    """A :class:`ShardSelection` (this rank's rows of a selection of the whole graph's nodes) was
    converted to NumPy, where a script expects the whole selection."""


class ShardSelection(Tensor):
    r"""A tensor of this rank's rows of a selection of the whole graph's nodes: a shard's tensor
    indexed by a :class:`~pyg_sparsecomm.graph.node_index.ShardIndex` (``data.y[split_idx['test']]``
    on a shard).  It computes as the tensor it is; a result with its rows (``argmax(dim=-1)``,
    ``==``, ``.cpu()``) is one again, a reduction over them is a plain tensor.  ``.numpy()`` and
    ``np.asarray`` raise :class:`PerRankSelectionError` naming the fix (see the module doc);
    ``t.as_subclass(torch.Tensor)`` is the plain tensor of this rank's rows.

    Shapes:
        - :math:`(k_r, *)`: the rank's :math:`k_r` entries of the selection.
    """

    @staticmethod
    def of(rows: Tensor) -> "ShardSelection":
        """``rows`` (a shard's tensor indexed by a ``ShardIndex``) marked as this rank's share.

        Args:
            rows (torch.Tensor): :math:`(k_r, *)` the indexed rows.
        """
        with torch_function_disabled():
            return rows.as_subclass(ShardSelection)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in _HOST_CONVERSIONS:
            raise PerRankSelectionError(_refusal(args[0]))
        with torch_function_disabled():
            out = func(*args, **(kwargs or {}))
            if func in _PLAIN:
                return out
            rows = _selection_size(args, kwargs)
        if type(out) in (tuple, list):  # split, chunk (torch.Size and named tuples stay as they are)
            return type(out)(_marked(o, rows) for o in out)
        return _marked(out, rows)


def _selection_size(args: tuple, kwargs: dict | None) -> int:
    """The number of rows of the first :class:`ShardSelection` among the arguments (called with the
    subclass's ``__torch_function__`` disabled)."""
    for value in (*args, *(kwargs or {}).values()):
        for item in (value if isinstance(value, (tuple, list)) else (value,)):
            if isinstance(item, ShardSelection):
                return item.size(0) if item.dim() else -1
    return -1


def _marked(out: Any, rows: int) -> Any:
    """``out`` as a :class:`ShardSelection` when it is a tensor with the selection's rows (called
    with the subclass's ``__torch_function__`` disabled)."""
    if type(out) is Tensor and out.dim() >= 1 and out.size(0) == rows:
        return ShardSelection.of(out)
    return out


def _refusal(selection: Tensor) -> str:
    return (f"this tensor holds this rank's {selection.size(0)} rows of a selection of the whole graph's nodes (a "
            f"shard's tensor indexed by a shard_index()/shard() index list, e.g. data.y[split_idx['test']]); as NumPy "
            f"it is this rank's share, and a metric of it (OGB's Evaluator.eval) a per-rank number. Score "
            f"every rank's rows together: evaluator = GlobalEvaluator(Evaluator(name)) (or global_accuracy(pred[idx], "
            f"y[idx])); for every node in global order, gather_nodes(tensor, data) of the unindexed tensor; for this "
            f"rank's rows on purpose, t.as_subclass(torch.Tensor) first (a plain tensor, at any number of ranks)")


torch.serialization.add_safe_globals([ShardSelection])  # torch.save of an indexed tensor loads with weights_only=True
