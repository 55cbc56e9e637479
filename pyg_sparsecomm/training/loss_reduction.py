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

A function of the user's that takes no ``reduction=`` (PyG's ``weighted_mse_loss(pred, target,
weight)``, ending in ``.mean()``) is taken as a mean over the elements of its input: its sum is its
value times ``input.numel()``, its denominator ``input.numel()``.  That is checked at every call
(:func:`check_own_mean`): its value on the rows given twice must be its value on them once, as a
mean's is (a sum's doubles), else a ``ValueError`` names the fix.
"""
import inspect
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
    own_mean: bool = False  # a function without reduction=: a mean over its input's elements


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


def takes_reduction(loss_fn: Any) -> bool:
    """Whether ``loss_fn`` (a loss module, or a function) takes ``reduction=`` (a function whose
    signature cannot be read is taken to, as PyTorch's own losses do)."""
    if isinstance(loss_fn, torch.nn.Module):
        return True
    try:
        parameters = inspect.signature(loss_fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "reduction" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _own_mean_call(loss_fn: Callable[..., Tensor], kwargs: dict) -> _Call:
    if "reduction" in kwargs:
        raise TypeError(f"distributed_loss: {getattr(loss_fn, '__name__', loss_fn)!r} takes no reduction= "
                        f"parameter, so distributed_loss cannot pass reduction={kwargs['reduction']!r}: drop it "
                        f"(the function is taken as a mean over its input's elements) or give the function one")

    def run(input: Tensor, target: Tensor, reduction: str) -> Tensor:
        return loss_fn(input, target, **kwargs)
    return _Call(run, "mean", False, None, -100, own_mean=True)


def _function_call(loss_fn: Callable[..., Tensor], kwargs: dict) -> _Call:
    if not takes_reduction(loss_fn):
        return _own_mean_call(loss_fn, kwargs)
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
    if call.own_mean:
        return _own_mean_terms(call, input, target)
    if call.reduction == "sum":
        return LocalTerms(call.run(input, target, "sum"), None)
    if call.reduction == "batchmean":
        return LocalTerms(call.run(input, target, "sum"), input.size(0) if input.dim() else 1)
    if call.nll and not target.is_floating_point():  # class indices (floating targets: probabilities)
        return LocalTerms(call.run(input, target, "sum"), _weighted_count(target, call.weight, call.ignore_index))
    elements = call.run(input, target, "none")
    return LocalTerms(elements.sum(), elements.numel())


def _own_mean_terms(call: _Call, input: Tensor, target: Tensor) -> LocalTerms:
    """The terms of a function without ``reduction=``, a mean over ``input``'s elements: its value
    times their number, over their number (no rows: a zero of ``input``'s graph, none counted)."""
    count = input.numel()
    if count == 0:
        return LocalTerms(input.sum(), 0)
    value = call.run(input, target, "mean")
    check_own_mean(call, input, target, value)
    return LocalTerms(value * count, count)


def check_own_mean(call: _Call, input: Tensor, target: Tensor, value: Tensor) -> None:
    """Raises ``ValueError`` naming the fix unless the loss of the rows given twice equals ``value``
    (a mean's does; a sum's doubles), or if the loss does not return a scalar."""
    if value.dim() != 0:
        raise ValueError(f"distributed_loss: a loss function without reduction= must return a scalar (a mean over "
                         f"its input's elements), got shape {list(value.shape)}")
    with torch.no_grad():
        try:
            twice = call.run(torch.cat([input.detach(), input.detach()]), torch.cat([target, target]), "mean")
        except Exception as error:  # noqa: BLE001 - named in the refusal
            reason = f"it failed on the rows given twice ({type(error).__name__}: {error})"
        else:
            if torch.allclose(twice.to(value.dtype), value.detach(), rtol=1e-4, atol=1e-6):
                return
            reason = f"its value on the rows given twice is {float(twice):.6g}, not {float(value):.6g}"
    raise ValueError(f"distributed_loss: the loss function takes no reduction=, so it is taken as a mean over its "
                     f"input's elements, which it does not seem to be ({reason}): give it a reduction= parameter "
                     f"(reduction='sum' returning the sum over the rows, 'mean' the mean), as torch's losses have")
