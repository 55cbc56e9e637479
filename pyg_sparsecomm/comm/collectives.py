"""Counted block-row broadcast and reduce, the primitives of the oblivious (CAGNET) baseline."""
from typing import Optional

import torch.distributed as dist
from torch import Tensor

from .counters import comm_counter, row_nbytes
from .group import global_rank, rank, world_size


def broadcast_rows(buf: Tensor, src: int, group: Optional[dist.ProcessGroup] = None) -> Tensor:
    """Broadcasts ``buf`` (``[n, f]``) from group rank ``src`` in place; counts the payload per peer."""
    P, me = world_size(group), rank(group)
    nbytes = buf.size(0) * row_nbytes(buf)
    counter = comm_counter()
    with counter.timed():
        dist.broadcast(buf, src=global_rank(group, src), group=group)
    sent = [nbytes if (me == src and p != src) else 0 for p in range(P)]
    recv = [nbytes if (me != src and p == src) else 0 for p in range(P)]
    counter.record("bcast", sent, recv)
    return buf


def reduce_rows(buf: Tensor, dst: int, group: Optional[dist.ProcessGroup] = None) -> Tensor:
    """Sums ``buf`` over the group into group rank ``dst`` (in place there); counts the payload."""
    P, me = world_size(group), rank(group)
    nbytes = buf.size(0) * row_nbytes(buf)
    counter = comm_counter()
    with counter.timed():
        dist.reduce(buf, dst=global_rank(group, dst), op=dist.ReduceOp.SUM, group=group)
    sent = [nbytes if (me != dst and p == dst) else 0 for p in range(P)]
    recv = [nbytes if (me == dst and p != dst) else 0 for p in range(P)]
    counter.record("reduce", sent, recv)
    return buf
