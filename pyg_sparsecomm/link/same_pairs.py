"""Every rank passed the same global pairs and settings: a check, since ranks that did not would each keep
a share of a different list (pairs lost or scored twice: a silently wrong loss and AUC), or draw different
batches and wait for each other in an exchange.

The usual cause of different pairs: PyG's ``RandomLinkSplit`` run on every rank with torch seeded but not
Python's ``random``, from which PyG's ``negative_sampling`` draws the validation and test negatives.  A
setting that differs (a loader's ``batch_size``, ...) is named with every rank's value.
"""
import zlib
from typing import Any

import torch.distributed as dist
from torch import Tensor

from ..comm.group import host_all_reduce
from ..comm.group import world_size as group_world_size


def check_same_pairs(edge_label_index: Tensor, what: str, group: dist.ProcessGroup | None = None,
                     settings: dict[str, Any] | None = None) -> None:
    """Raises ``ValueError`` on every rank unless all ranks passed the same ``edge_label_index`` and
    ``settings`` (``{argument name: value}``): CRC-32s of the ids and of each setting's ``repr``,
    compared with one host all-reduce (then, if a setting differs, one gather of the values).

    Args:
        edge_label_index (torch.Tensor): the pairs every rank passed.
        what (str): the caller, named in the error.
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: :obj:`None`, all)
        settings (dict, optional): arguments that must be the same on every rank, by name.
            (default: :obj:`None`)
    """
    settings = settings or {}
    pairs = zlib.crc32(edge_label_index.detach().cpu().contiguous().numpy().tobytes())
    differs = _differing([pairs, *(zlib.crc32(repr(v).encode()) for v in settings.values())], group)
    _raise_differing(what, {k: v for (k, v), d in zip(settings.items(), differs[1:], strict=True) if d}, group)
    if differs[0]:
        raise ValueError(f"{what}: the ranks passed different edge_label_index; every rank passes the whole graph's "
                         f"same pairs (split the graph identically on every rank: RandomLinkSplit draws its negatives "
                         f"from Python's random, so seed random as well as torch, or split on rank 0 and broadcast)")


def check_same_settings(settings: dict[str, Any], what: str, group: dist.ProcessGroup | None = None) -> None:
    """Raises ``ValueError`` on every rank, naming each argument of ``settings`` whose value differs
    between the ranks and every rank's value (one host all-reduce; a gather when one differs).

    Args:
        settings (dict): arguments that must be the same on every rank, by name.
        what (str): the caller, named in the error.
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: :obj:`None`, all)
    """
    differs = _differing([zlib.crc32(repr(v).encode()) for v in settings.values()], group)
    _raise_differing(what, {k: v for (k, v), d in zip(settings.items(), differs, strict=True) if d}, group)


def _differing(codes: list[int], group: dist.ProcessGroup | None) -> list[bool]:
    """Which of ``codes`` differ between the ranks (the same answer on every rank)."""
    if group_world_size(group) == 1 or not codes:
        return [False] * len(codes)
    reduced = host_all_reduce([*codes, *(-c for c in codes)], dist.ReduceOp.MAX, group)
    return [reduced[i] != -reduced[len(codes) + i] for i in range(len(codes))]


def _raise_differing(what: str, differing: dict[str, Any], group: dist.ProcessGroup | None) -> None:
    """Raises naming the ``differing`` settings with every rank's value (collective when any differs:
    every rank knows the same ones differ)."""
    if not differing:
        return
    every: list[Any] = [None] * group_world_size(group)
    dist.all_gather_object(every, {k: repr(v) for k, v in differing.items()}, group=group)
    values = "; ".join(f"{name}: " + ", ".join(f"rank {r}: {values[name]}" for r, values in enumerate(every))
                       for name in differing)
    names = ", ".join(differing)
    raise ValueError(f"{what}: the ranks passed different {names} ({values}); pass the same {names} on every rank")
