"""Which shard a distributed layer is running on, while it runs.

A layer made distributed by :func:`~pyg_sparsecomm.distribute` receives the shard's
:class:`~pyg_sparsecomm.adj.HaloAdj` and hands PyG's code a plain local ``edge_index``
whose targets are the owned rows ``[0, num_owned)`` and whose sources are
``[owned | halo]`` columns ``[0, num_owned + halo_size)``.  PyG functions that compute
source-side degrees (``gcn_norm``, ``get_laplacian``) need the plan to fetch the halo's
degrees; they find it here.  The stack is per thread and every entry is removed by a
forward hook that runs even when the forward raises.
"""
import threading
from dataclasses import dataclass
from typing import List, Optional

import torch.distributed as dist
from torch import Tensor

from ..adj import HaloAdj
from ..plan import RankPlan


@dataclass
class ShardContext:
    """The shard one distributed layer call runs on.

    Attributes:
        adj: the block row the layer was called with.
        group: process group of the halo exchanges (1.5D: the grid's column group).
        edge_index: ``adj`` as a local ``[2, nnz]`` edge index (sources first), in ``adj``'s edge order.
    """
    adj: HaloAdj
    group: Optional[dist.ProcessGroup]
    edge_index: Tensor

    @property
    def plan(self) -> RankPlan:
        return self.adj.plan

    @property
    def num_owned(self) -> int:
        return self.adj.num_owned

    @property
    def num_cols(self) -> int:
        return self.adj.num_cols


_local = threading.local()


def _stack() -> List[ShardContext]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def push(context: ShardContext) -> None:
    _stack().append(context)


def pop() -> None:
    stack = _stack()
    if stack:
        stack.pop()


def current() -> Optional[ShardContext]:
    """The innermost running distributed layer's shard (``None`` outside one)."""
    stack = _stack()
    return stack[-1] if stack else None
