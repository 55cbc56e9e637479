"""The pieces of a part file shared by homogeneous and heterogeneous partitions: a halo plan as
plain tensors and lists (what ``torch.load(weights_only=True)`` reads back), and the hashing of
a tensor into a graph's fingerprint."""
from typing import Any

import torch

from ..plan.homogeneous import RankPlan

PLAN_TENSORS = ("n_id", "halo_n_id", "halo_owner", "halo_remote_index", "send_index")
PLAN_LISTS = ("send_counts", "recv_counts", "part_sizes")


def hash_header(h: Any, name: str, dtype: torch.dtype, numel: int) -> None:
    """What :func:`hash_tensor` feeds ``h`` before a tensor's bytes (its name, dtype and size)."""
    h.update(f"{name}:{dtype}:{numel}:".encode())


def hash_tensor(h: Any, name: str, value: torch.Tensor) -> None:
    """Feeds ``name``, dtype, size and the bytes of ``value`` to the hash ``h`` (the out-of-core
    writer feeds the same for edge files it never holds whole: ``from_files.EdgeFiles.hash_into``)."""
    value = value.detach().cpu()
    value = (value.to_dense() if value.layout != torch.strided else value).contiguous().reshape(-1)
    hash_header(h, name, value.dtype, value.numel())
    if value.numel():  # an empty tensor cannot be viewed as bytes (and has none)
        h.update(value.view(torch.uint8).numpy())


def plan_record(plan: RankPlan) -> dict:
    """``plan`` as a dict of tensors, lists and numbers."""
    record: dict[str, Any] = {"rank": plan.rank, "world_size": plan.world_size, "num_nodes": plan.num_nodes}
    for name in PLAN_TENSORS:
        record[name] = getattr(plan, name)
    for name in PLAN_LISTS:
        record[name] = list(getattr(plan, name))
    return record


def plan_from_record(record: dict) -> RankPlan:
    """The :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` :func:`plan_record` wrote."""
    return RankPlan(rank=record["rank"], world_size=record["world_size"], num_nodes=record["num_nodes"],
                    **{k: record[k] for k in PLAN_TENSORS}, **{k: record[k] for k in PLAN_LISTS})
