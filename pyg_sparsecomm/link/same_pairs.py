"""Every rank passed the same global pairs: a check, since ranks that did not would each keep a share of
a different list (pairs lost or scored twice: a silently wrong loss and AUC), or draw different batches
and wait for each other in an exchange.

The usual cause: PyG's ``RandomLinkSplit`` run on every rank with torch seeded but not Python's
``random``, from which PyG's ``negative_sampling`` draws the validation and test negatives.
"""
import zlib

import torch.distributed as dist
from torch import Tensor

from ..comm.group import host_all_reduce
from ..comm.group import world_size as group_world_size


def check_same_pairs(edge_label_index: Tensor, what: str, group: dist.ProcessGroup | None = None,
                     settings: str = "") -> None:
    """Raises ``ValueError`` on every rank unless all ranks passed the same ``edge_label_index`` (and
    ``settings``): a CRC-32 of the ids, compared with one two-integer all-reduce on the host."""
    if group_world_size(group) == 1:
        return
    code = zlib.crc32(edge_label_index.detach().cpu().contiguous().numpy().tobytes(), zlib.crc32(settings.encode()))
    largest, minus_smallest = host_all_reduce([code, -code], dist.ReduceOp.MAX, group)
    if largest != -minus_smallest:
        raise ValueError(f"{what}: the ranks passed different edge_label_index{' or settings' if settings else ''}; "
                         f"every rank passes the whole graph's same pairs (split the graph identically on every "
                         f"rank: RandomLinkSplit draws its negatives from Python's random, so seed random as well "
                         f"as torch, or split on rank 0 and broadcast)")
