"""Process-group helpers that also work when ``torch.distributed`` is not initialised."""
from typing import Optional

import torch
import torch.distributed as dist


def is_distributed(group: Optional[dist.ProcessGroup] = None) -> bool:
    return dist.is_available() and dist.is_initialized()


def collective_device(group: Optional[dist.ProcessGroup] = None) -> Optional[torch.device]:
    """Where small bookkeeping tensors must live for a collective: NCCL reduces only CUDA
    tensors, gloo takes CPU tensors (``None``: leave them where they are)."""
    if is_distributed(group) and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def world_size(group: Optional[dist.ProcessGroup] = None) -> int:
    return dist.get_world_size(group) if is_distributed(group) else 1


def rank(group: Optional[dist.ProcessGroup] = None) -> int:
    return dist.get_rank(group) if is_distributed(group) else 0


def global_rank(group: Optional[dist.ProcessGroup], group_rank: int) -> int:
    """The default-group rank of ``group_rank`` (what ``broadcast``/``reduce`` take as src/dst)."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def check_plan_matches_group(plan_world_size: int, plan_rank: int,
                             group: Optional[dist.ProcessGroup] = None) -> None:
    """A plan made for another world size or rank would deadlock or mix up rows."""
    if plan_world_size > 1 and not is_distributed(group):
        raise RuntimeError(f"this shard belongs to a {plan_world_size}-rank partition but "
                           f"torch.distributed is not initialised: call init_process_group first")
    ws, r = world_size(group), rank(group)
    if plan_world_size != ws:
        raise ValueError(f"the graph was partitioned into {plan_world_size} parts but the process group "
                         f"has world size {ws}: partition with num_parts={ws}")
    if plan_rank != r:
        raise ValueError(f"this shard was built for rank {plan_rank} but this process is rank {r}")
