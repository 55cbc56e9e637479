"""Exchanges of integer ids of varying length (a mini-batch's requests and replies), counted.

``all_to_all_single`` needs every receiver to know its split sizes, so a request of
unknown length costs two collectives: the counts (``P`` integers per rank), then the ids.
"""
import torch
import torch.distributed as dist
from torch import Tensor

from .counters import comm_counter
from .device_check import check_devices
from .group import collective_device, world_size
from .halo import all_to_all_rows
from .waiting import finish


def exchange_counts(send_counts: list[int], group: dist.ProcessGroup | None = None,
                    kind: str = "ids") -> list[int]:
    """How many entries every rank sends this one, given how many it sends every rank
    (one all-to-all of ``P`` integers, counted as ``kind + "_counts"``)."""
    P = world_size(group)
    if P == 1:
        return list(send_counts)
    device = collective_device(group)
    send = torch.tensor(send_counts, dtype=torch.long, device=device)
    recv = torch.empty_like(send)
    check_devices("exchange_counts", group, send)
    with comm_counter().timed(send.device):
        finish(dist.all_to_all_single(recv, send, group=group, async_op=True), group)
    comm_counter().record(kind + "_counts", [8] * P, [8] * P, group)
    return recv.tolist()


def exchange_ids(ids: Tensor, send_counts: list[int], group: dist.ProcessGroup | None = None,
                 kind: str = "ids", recv_counts: list[int] | None = None) -> tuple[Tensor, list[int]]:
    """Sends ``send_counts[p]`` consecutive entries of ``ids`` (``[n]`` or ``[n, k]`` int64) to every
    rank ``p``; returns what this rank received (grouped by source rank) and the counts.

    ``recv_counts`` given (a reply whose sizes both sides know) saves the counts exchange.
    """
    if world_size(group) == 1:
        return ids, list(send_counts)
    if recv_counts is None:
        recv_counts = exchange_counts(send_counts, group, kind)
    device = collective_device(group) or ids.device
    recv = all_to_all_rows(ids.to(device), send_counts, recv_counts, group, kind)
    return recv.to(ids.device), recv_counts
