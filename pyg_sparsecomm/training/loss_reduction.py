r"""What :func:`~pyg_sparsecomm.distributed_loss` sums and divides by on this rank, so that over
all ranks it is the loss's own ``reduction`` over the whole graph.

A PyTorch loss's ``"mean"`` is its sum over a denominator that depends on the loss:

* ``cross_entropy`` / ``nll_loss`` (``torch.nn.CrossEntropyLoss`` / ``NLLLoss``) with class
  indices: :math:`\sum_i w_{y_i}` over the targets other than ``ignore_index`` (their count
  without ``weight``), so ignored rows and class weights count as in one process;
* every other loss, and ``cross_entropy`` with class probabilities: the number of elements of
  its ``reduction="none"`` output (:math:`n C` for ``binary_cross_entropy_with_logits`` or
  ``mse_loss`` of ``[n, C]`` targets, :math:`n` for ``multilabel_soft_margin_loss``);
* ``KLDivLoss(reduction="batchmean")``: the number of rows.

A loss module brings its own arguments (``pos_weight``, ``weight``, ``ignore_index``, ...) and
``reduction``: ``"mean"`` and ``"batchmean"`` are global means, ``"sum"`` the global sum (no
denominator); ``"none"`` is refused, since per-row losses have no whole-graph value to return on
every rank.  A function takes ``reduction=`` among ``distributed_loss``'s keyword arguments
(default ``"mean"``).
"""
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: losses whose mean divides by the (weighted) count of the targets not ignored
_NLL_FUNCTIONS = (F.cross_entropy, F.nll_loss)
_NLL_MODULES = (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss)
_REDUCTIONS = ("mean", "sum", "batchmean")


class LocalTerms(NamedTuple):
    """This rank's part of a loss: ``total`` (its sum over this rank's rows) and ``denominator``
    (its part of what the mean divides by: a host ``int``, a tensor on the target's device, or
    ``None`` for a sum, which has none)."""
    total: Tensor
    denominator: int | Tensor | None


class _Call(NamedTuple):
    run: Callable[[Tensor, Tensor, str], Tensor]  # (input, target, reduction) -> the loss
    reduction: str
    nll: bool  # cross_entropy / nll_loss: the denominator counts the targets not ignored, weighted
    weight: Tensor | None
    ignore_index: int


def _module_call(module: torch.nn.Module, kwargs: dict) -> _Call:
    if kwargs:
        raise TypeError(f"distributed_loss: {type(module).__name__} takes its arguments in its constructor, "
                        f"not as keyword arguments of distributed_loss (got {sorted(kwargs)}): e.g. "
                        f"torch.nn.CrossEntropyLoss(weight=w, ignore_index=-1)")

    own = str(module.reduction)

    def run(input: Tensor, target: Tensor, reduction: str) -> Tensor:
        module.reduction = reduction  # type: ignore[assignment]  # read by the module's forward; restored
        try:
            return module(input, target)
        finally:
            module.reduction = own  # type: ignore[assignment]
    nll = isinstance(module, _NLL_MODULES)
    return _Call(run, own, nll, getattr(module, "weight", None) if nll else None,
                 getattr(module, "ignore_index", -100))


def _function_call(loss_fn: Callable[..., Tensor], kwargs: dict) -> _Call:
    kwargs = dict(kwargs)
    reduction = kwargs.pop("reduction", "mean")

    def run(input: Tensor, target: Tensor, reduction: str) -> Tensor:
        return loss_fn(input, target, reduction=reduction, **kwargs)
    nll = any(loss_fn is f for f in _NLL_FUNCTIONS)
    return _Call(run, reduction, nll, kwargs.get("weight"), kwargs.get("ignore_index", -100))


def _resolve(loss_fn: Any, kwargs: dict) -> _Call:
    if isinstance(loss_fn, torch.nn.Module):
        if not isinstance(getattr(loss_fn, "reduction", None), str):
            raise TypeError(f"distributed_loss: {type(loss_fn).__name__} has no reduction attribute; pass a loss "
                            f"module of torch.nn (torch.nn.CrossEntropyLoss(), torch.nn.BCEWithLogitsLoss(...)) or a "
                            f"function taking reduction= (F.cross_entropy)")
        call = _module_call(loss_fn, kwargs)
    else:
        call = _function_call(loss_fn, kwargs)
    if call.reduction == "none":
        raise ValueError("distributed_loss: reduction='none' gives one loss per row of this rank, which has no "
                         "whole-graph value to return on every rank: use reduction='mean' (the global mean) or "
                         "'sum' (the global sum), or reduce the per-row losses yourself, e.g. "
                         "global_sum(losses.sum()) / global_count(losses.numel())")
    if call.reduction not in _REDUCTIONS:
        raise ValueError(f"distributed_loss: unknown reduction {call.reduction!r}; use 'mean' or 'sum'")
    return call


def _weighted_count(target: Tensor, weight: Tensor | None, ignore_index: int) -> Tensor:
    """:math:`\\sum_i w_{y_i}` over the targets other than ``ignore_index`` (their count without
    ``weight``), as ``float64`` on the target's device (no host synchronisation)."""
    valid = target != ignore_index
    if weight is None:
        return valid.sum(dtype=torch.float64)
    picked = weight.to(target.device).index_select(0, target.masked_fill(~valid, 0).reshape(-1))
    return (picked.to(torch.float64) * valid.reshape(-1)).sum()


def local_terms(loss_fn: Any, input: Tensor, target: Tensor, kwargs: dict) -> LocalTerms:
    """This rank's :class:`LocalTerms` of ``loss_fn`` (a function taking ``reduction=`` or a loss
    module of ``torch.nn``) on ``input`` and ``target`` (see the module doc).

    Args:
        loss_fn (callable or torch.nn.Module): the loss.
        input (Tensor): this rank's scored rows.
        target (Tensor): their targets.
        kwargs (dict): ``distributed_loss``'s keyword arguments for a function (``weight=``,
            ``ignore_index=``, ``reduction=``, ...).
    """
    call = _resolve(loss_fn, kwargs)
    if call.reduction == "sum":
        return LocalTerms(call.run(input, target, "sum"), None)
    if call.reduction == "batchmean":
        return LocalTerms(call.run(input, target, "sum"), input.size(0) if input.dim() else 1)
    if call.nll and not target.is_floating_point():  # class indices (floating targets: probabilities)
        return LocalTerms(call.run(input, target, "sum"), _weighted_count(target, call.weight, call.ignore_index))
    elements = call.run(input, target, "none")
    return LocalTerms(elements.sum(), elements.numel())
