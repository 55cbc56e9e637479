r"""What a loader is given, checked: a rank's homogeneous shard (its :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj`)
or heterogeneous shard (every relation's :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj`), and PyG's
heterogeneous ``input_nodes`` read over the latter.  Each check raises ``ValueError`` naming the fix."""
from typing import Any

import torch.distributed as dist
from torch_geometric.data import Data, HeteroData

from ..comm.group import world_size
from ..plan.halo_adj import HaloAdj
from ..plan.relation_adj import RelationAdj
from ..sampling.hetero_rules import EdgeType


def shard_adj(local: Data, group: dist.ProcessGroup | None) -> HaloAdj:
    """The adjacency of a homogeneous shard (``shard(data)`` / ``load_shard``), checked: it carries ``adj``
    and ``e_id``, is a 1D shard, and was made for the group's number of ranks.

    Args:
        local (torch_geometric.data.Data): the rank's shard.
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
    """
    adj = getattr(local, "adj", None)
    if not isinstance(adj, HaloAdj) or getattr(local, "e_id", None) is None:
        raise ValueError("the loader takes a rank's shard: local = shard(data) (or load_shard(...)), "
                         "which carries adj and e_id")
    if getattr(local, "replication", 1) > 1:
        raise ValueError("this shard is a replicated 1.5D block row (shard(data, grid=...)); the mini-batch "
                         "loaders run on 1D shards: partition into P parts and call shard(data)")
    if adj.plan.world_size != world_size(group):
        raise ValueError(f"the shard was made for {adj.plan.world_size} ranks but the process group has "
                         f"{world_size(group)}")
    return adj


def relation_adjs(local: HeteroData, group: dist.ProcessGroup | None) -> dict[EdgeType, RelationAdj]:
    """Every relation's adjacency of a heterogeneous shard (``shard(hetero_data)``), checked: every relation
    carries ``adj`` and ``e_id``, made for the group's number of ranks.

    Args:
        local (torch_geometric.data.HeteroData): the rank's heterogeneous shard.
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
    """
    adjs = {et: local[et].get("adj") for et in local.edge_types}
    if any(not isinstance(a, RelationAdj) for a in adjs.values()) or any(
            local[et].get("e_id") is None for et in adjs):
        raise ValueError("the loader takes a rank's heterogeneous shard: local = shard(hetero_data), whose "
                         "relations carry adj and e_id")
    sizes = {a.plan.world_size for a in adjs.values()}
    if sizes != {world_size(group)}:
        raise ValueError(f"the shard was made for {sorted(sizes)} ranks but the process group has "
                         f"{world_size(group)}")
    return adjs


def hetero_input_nodes(local: HeteroData, input_nodes: Any) -> tuple[str, Any]:
    """``(node type, ids or mask)`` of PyG's ``input_nodes`` on a heterogeneous shard (a node type alone:
    ``(node type, None)``).

    Args:
        local (torch_geometric.data.HeteroData): the rank's heterogeneous shard.
        input_nodes (str or Tuple[str, torch.Tensor or None]): PyG's ``input_nodes``.
    """
    if isinstance(input_nodes, str):
        input_type, ids = input_nodes, None
    elif isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        input_type, ids = input_nodes
    else:
        raise ValueError(f"input_nodes on a heterogeneous graph is (node type, ids or mask) or a node type, as "
                         f"PyG's loaders take it, e.g. ('paper', data['paper'].train_mask); got "
                         f"{type(input_nodes).__name__}")
    if input_type not in local.node_types:
        raise ValueError(f"input_nodes names node type {input_type!r}, which the graph does not have "
                         f"(node types: {local.node_types})")
    return input_type, ids
