"""Counted collectives: block-row broadcast and reduce (the oblivious CAGNET baseline) and the
differentiable row-group all-reduce of the 1.5D algorithms; the all-reduce of a small value
(a loss, a count, a calibration figure) that the rest of the package agrees on; and the gather of
every rank's rows (an evaluator's labels, a split's pairs), any number per rank."""

import torch
import torch.distributed as dist
from torch import Tensor

from .counters import comm_counter, row_nbytes
from .device_check import check_devices
from .group import collective_device, global_rank, host_all_gather, is_distributed, rank, world_size
from .peer_failure import failures_named
from .waiting import finish


def broadcast_rows(buf: Tensor, src: int, group: dist.ProcessGroup | None = None) -> Tensor:
    """Broadcasts ``buf`` (``[n, f]``) from group rank ``src`` in place; counts the payload per peer."""
    P, me = world_size(group), rank(group)
    nbytes = buf.size(0) * row_nbytes(buf)
    counter = comm_counter()
    check_devices("broadcast_rows", group, buf)
    with counter.timed(buf.device), failures_named("broadcast_rows", group):
        dist.broadcast(buf, src=global_rank(group, src), group=group)
    sent = [nbytes if (me == src and p != src) else 0 for p in range(P)]
    recv = [nbytes if (me != src and p == src) else 0 for p in range(P)]
    counter.record("bcast", sent, recv, group)
    return buf


def reduce_rows(buf: Tensor, dst: int, group: dist.ProcessGroup | None = None) -> Tensor:
    """Sums ``buf`` over the group into group rank ``dst`` (in place there); counts the payload."""
    P, me = world_size(group), rank(group)
    nbytes = buf.size(0) * row_nbytes(buf)
    counter = comm_counter()
    check_devices("reduce_rows", group, buf)
    with counter.timed(buf.device), failures_named("reduce_rows", group):
        dist.reduce(buf, dst=global_rank(group, dst), op=dist.ReduceOp.SUM, group=group)
    sent = [nbytes if (me != dst and p == dst) else 0 for p in range(P)]
    recv = [nbytes if (me == dst and p != dst) else 0 for p in range(P)]
    counter.record("reduce", sent, recv, group)
    return buf


def all_reduce_value(value: Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM,
                     group: dist.ProcessGroup | None = None, what: str = "all_reduce_value") -> Tensor:
    """``value`` (a small detached tensor) reduced with ``op`` over ``group``'s ranks, returned on
    ``value``'s device: one uncounted all-reduce on the group's collective device (``value`` itself
    without ``torch.distributed``).  ``what`` names the caller in the device check's error.

    Shapes:
        value: any; the result has its shape, dtype and device.
    """
    if not is_distributed(group):
        return value
    reduced = value.to(collective_device(group) or value.device, copy=True)
    check_devices(what, group, reduced)
    with failures_named(what, group):
        finish(dist.all_reduce(reduced, op=op, group=group, async_op=True), group)
    return reduced.to(value.device)


def ring_allreduce_nbytes(nbytes: int, group_size: int) -> int:
    """Bytes each rank sends (and receives) in a bandwidth-optimal ring all-reduce of ``nbytes``:
    a reduce-scatter plus an all-gather, ``2 (g - 1) / g`` of the buffer.  The counters and the
    cost model use this figure; a backend may run another algorithm underneath."""
    return 0 if group_size <= 1 else 2 * (group_size - 1) * nbytes // group_size


def _ring_counts(nbytes: int, group: dist.ProcessGroup | None) -> tuple[list[int], list[int]]:
    P, me = world_size(group), rank(group)
    moved = ring_allreduce_nbytes(nbytes, P)
    sent, recv = [0] * P, [0] * P
    if P > 1:
        sent[(me + 1) % P], recv[(me - 1) % P] = moved, moved
    return sent, recv


def all_reduce_rows(buf: Tensor, group: dist.ProcessGroup | None = None, kind: str = "allreduce") -> Tensor:
    """Sums ``buf`` over ``group`` in place (counted with the ring model, see above)."""
    counter = comm_counter()
    check_devices("all_reduce_rows", group, buf)
    with counter.timed(buf.device), failures_named(kind, group):
        finish(dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group, async_op=True), group)
    counter.record(kind, *_ring_counts(buf.numel() * buf.element_size(), group), group)
    return buf


class _RowAllReduce(torch.autograd.Function):
    """``Y = Σ_g T_g`` over the group, on every member; ``∂T_g = Σ_g' ∂Y_g'`` (the adjoint of
    "sum then replicate" is "sum then replicate" again)."""

    @staticmethod
    def forward(ctx, partial: Tensor, group) -> Tensor:
        ctx.group = group
        return all_reduce_rows(partial.clone(), group, "allreduce")

    @staticmethod
    def backward(ctx, grad: Tensor):
        return all_reduce_rows(grad.contiguous().clone(), ctx.group, "allreduce_grad"), None


def row_all_reduce(partial: Tensor, group: dist.ProcessGroup | None = None) -> Tensor:
    """Differentiable all-reduce (sum) of partial results over ``group`` (1.5D's process row)."""
    if world_size(group) == 1:
        return partial
    return _RowAllReduce.apply(partial, group)


def gather_rows(rows: Tensor, group: dist.ProcessGroup | None = None, who: str = "gather_rows") -> Tensor:
    r"""Every rank's ``rows`` concatenated in rank order, on every rank (a collective: the counts
    all-gathered on the host, then the rows padded to the longest).  Not differentiable.

    Args:
        rows (torch.Tensor): this rank's rows (any number, the same trailing shape and dtype on
            every rank).
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: all ranks)
        who (str, optional): the caller, in the error when a peer fails. (default: ``"gather_rows"``)

    Shapes:
        - **input:** :math:`(k_r, *)`
        - **output:** :math:`(\sum_r k_r, *)`
    """
    if not is_distributed(group) or world_size(group) == 1:
        return rows
    rows = rows.detach().as_subclass(Tensor)  # a marked tensor (a ShardSelection) gathered is the whole
    counts = [c[0] for c in host_all_gather([int(rows.size(0))], group)]
    device = collective_device(group) or rows.device
    padded = rows.new_zeros((max(counts), *rows.shape[1:]), device=device)
    padded[:rows.size(0)] = rows.to(device)
    parts = [torch.empty_like(padded) for _ in counts]
    with failures_named(who, group):
        dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(rows.device)
