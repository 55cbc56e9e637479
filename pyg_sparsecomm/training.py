"""What a training loop over a shard needs so that it equals single-process training.

Each rank computes its owned rows; the whole-graph loss is the sum over ranks
of each rank's *sum* of per-node losses, divided by the *global* number of
labelled nodes.  Backward through the halo exchanges delivers to every rank
its share of the parameter gradient; summing the shares
(:func:`sync_gradients`) gives exactly the single-process gradient::

    out = model(local.x, local.adj)
    loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])
    loss.backward()
    sync_gradients(model)
    optimizer.step()
    print(global_sum(loss))          # the whole-graph loss, same on every rank

Every rank must run the same forward/backward (also a rank with no labelled
rows): the exchanges are collectives.
"""
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from .comm.device_check import check_devices
from .comm.group import collective_device, is_distributed


def global_sum(value, group: dist.ProcessGroup | None = None) -> Tensor:
    """Sum of a (detached) scalar or tensor over all ranks (returned on the input's device)."""
    t = torch.as_tensor(value.detach() if isinstance(value, Tensor) else value).clone()
    if is_distributed(group):
        device = collective_device(group) or t.device
        reduced = t.to(device)
        check_devices("global_sum", group, reduced)
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM, group=group)
        t = reduced.to(t.device)
    return t


def global_count(mask_or_count, group: dist.ProcessGroup | None = None) -> int:
    """Number of selected rows over all ranks (a bool mask, an index tensor or an int)."""
    if isinstance(mask_or_count, Tensor):
        local = int(mask_or_count.sum()) if mask_or_count.dtype == torch.bool else mask_or_count.numel()
    else:
        local = int(mask_or_count)
    return int(global_sum(torch.tensor(local, dtype=torch.long), group))


def distributed_loss(loss_fn: Callable[..., Tensor], input: Tensor, target: Tensor,
                     group: dist.ProcessGroup | None = None, **kwargs) -> Tensor:
    """``loss_fn(..., reduction='sum')`` on the local rows divided by the global row count.

    Summed over ranks it equals ``loss_fn(..., reduction='mean')`` over the whole graph.
    """
    count = global_count(input.size(0), group)
    return loss_fn(input, target, reduction="sum", **kwargs) / max(count, 1)


def sync_gradients(module: torch.nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Sums parameter gradients over ranks, in one flat all-reduce.

    A parameter without a gradient on this rank contributes zeros, so ranks
    never disagree about the collective's size.
    """
    if not is_distributed(group):
        return
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    check_devices("sync_gradients", group, flat)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def global_accuracy(pred: Tensor, target: Tensor, group: dist.ProcessGroup | None = None) -> float:
    """Fraction of correct predictions over the rows of all ranks."""
    correct = global_sum(torch.tensor(float((pred == target).sum()), dtype=torch.float64), group)
    total = global_count(pred.numel(), group)
    return float(correct) / max(total, 1)
