"""The owner of every node, on every rank: what the pair functions need to find an endpoint's rows."""
import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from ..comm.group import world_size as group_world_size
from ..graph.validate import check_partition

_FORMS = ("pass data.part (the [N] partition SparsityAwarePartitioner adds), the partitioned Data itself, "
          "or this rank's shard (shard(data) / load_shard(...))")


def partition_vector(part, group: dist.ProcessGroup | None = None, check_world_size: bool = True) -> np.ndarray:
    """``[N]`` int64 owner of every node, from a partition, a partitioned graph or a shard.

    A shard (a ``Data`` with ``n_id`` and ``global_num_nodes`` but no ``part``) knows only its own
    nodes: every rank's ``n_id`` is then gathered (one ``all_gather_object``; every rank calls it).

    Args:
        part (torch.Tensor or numpy.ndarray or torch_geometric.data.Data): a ``[N]`` integer tensor or
            array, a ``Data`` carrying ``part``, or a shard.
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.
            (default: the default group)
        check_world_size (bool, optional): require part ids below the group's size (off to simulate
            another rank without a process group). (default: :obj:`True`)
    """
    if part is None:
        raise ValueError(f"the pairs' functions need the partition: {_FORMS}")
    P = group_world_size(group)
    if isinstance(part, Data):
        if "replication" in part and int(part.replication) > 1:
            raise ValueError("the pairs' exchange runs on a 1D partition (one part per rank); this shard is a "
                             "1.5D grid's replicated block row: shard the graph without a grid for link prediction")
        if "part" in part:
            if "num_parts" in part and int(part.num_parts) != P and check_world_size:
                raise ValueError(f"the graph was partitioned into num_parts={int(part.num_parts)} but the world size "
                                 f"is {P}: the pairs' exchange needs one part per rank (SparsityAwarePartitioner("
                                 f"num_parts=world_size))")
            part = part.part
        elif "n_id" in part and "global_num_nodes" in part:
            return gathered_partition(part.n_id, int(part.global_num_nodes), group)
        else:
            raise ValueError(f"this Data has neither a partition (part) nor a shard's n_id: {_FORMS}")
    if isinstance(part, np.ndarray):
        part = torch.from_numpy(part)
    if not isinstance(part, Tensor):
        raise ValueError(f"cannot read a partition from a {type(part).__name__}: {_FORMS}")
    check_partition(part, part.numel(), max(P, int(part.max()) + 1 if part.numel() else 1))
    if check_world_size and part.numel() and int(part.max()) >= P:
        raise ValueError(f"the partition has part ids up to {int(part.max())} but the world size is {P}: partition "
                         f"into num_parts={P} (SparsityAwarePartitioner(num_parts=world_size))")
    return part.detach().cpu().numpy().astype(np.int64)


def gathered_partition(n_id: Tensor, num_nodes: int, group: dist.ProcessGroup | None = None) -> np.ndarray:
    """``[num_nodes]`` owner of every node from every rank's shard ``n_id`` (one ``all_gather_object``)."""
    P = group_world_size(group)
    pieces: list = [n_id.detach().cpu()]
    if P > 1:
        pieces = [None] * P
        dist.all_gather_object(pieces, n_id.detach().cpu(), group=group)
    part = np.full(num_nodes, -1, dtype=np.int64)
    for r, ids in enumerate(pieces):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
            raise ValueError(f"rank {r}'s shard holds node id {int(ids.max())} of a graph of {num_nodes} nodes: every "
                             f"rank must pass its shard of the same partition")
        if (part[ids.numpy()] >= 0).any():
            raise ValueError(f"rank {r}'s shard holds nodes another rank holds too: the pairs' exchange needs a 1D "
                             f"partition (one part per rank, no replicated block rows)")
        part[ids.numpy()] = r
    if (part < 0).any():
        raise ValueError(f"the shards' n_id cover {int((part >= 0).sum())} of the graph's {num_nodes} nodes: every "
                         f"rank must pass its shard of the same partition")
    return part
