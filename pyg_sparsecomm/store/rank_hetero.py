r"""``shard()`` of a heterogeneous graph: this rank's :class:`~torch_geometric.data.HeteroData`.

Per node type the owned rows of every node-level attribute (``x``, ``y``, masks, ...) and
``n_id``; per relation a :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj` ``adj`` (rows: owned
nodes of the destination type; columns: ``[owned | halo]`` of the source type) with ``e_id`` and
the relation's edge attributes in ``adj``'s edge order, so ``local.adj_dict`` is what a
heterogeneous PyG model takes as ``edge_index_dict``.  A relation's supervision pairs
(``edge_label_index``, ``edge_label``, ``edge_label_time``: ``RandomLinkSplit``'s) are no edges of the
graph: every rank keeps them whole, in global ids of the two types, for
:func:`~pyg_sparsecomm.link.hetero_pairs.distribute_hetero_pairs`.  Every relation reading a source type
shares that type's :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan`: its halo is the union of their halos
(:func:`~pyg_sparsecomm.plan.hetero.source_pattern`).  A node type's index lists
(``data['paper'].train_idx``) become its rows of the owned nodes among their ids, as on a ``Data``
(:mod:`~pyg_sparsecomm.store.shard_index`); a graph-level one is a dict keyed by node type
(``data.split_idx = {'train': {'paper': ids}}``, ``ogbn-mag``'s form).
"""
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..graph.inputs import SUPERVISION_KEYS
from ..graph.node_index import is_index_name
from ..graph.validate import check_edge_weight, check_hetero, check_partition
from ..plan.hetero import source_pattern
from ..plan.homogeneous import RankPlan, local_edges, rank_plan
from ..plan.relation_adj import RelationAdj
from .shard_index import index_attributes, shard_index, unplaced_index_keys

# attributes the shard rebuilds (ids, adjacency) or that describe the whole partition
_NODE_SKIP = {"part", "num_nodes", "n_id"}
_EDGE_SKIP = {"edge_index", "adj_t", "edge_weight", "e_id"}
_GLOBAL_SKIP = {"num_parts", "comm_stats"}


class MissingShardKey(KeyError, AttributeError):
    """A graph attribute a shard does not hold (``local.edge_index_dict``): a ``KeyError`` as PyG's
    ``collect`` raises, and an ``AttributeError`` for ``hasattr``, with a plain message naming what
    the shard holds instead."""

    def __str__(self) -> str:
        return str(self.args[0])


#: the graph attributes of a PyG ``HeteroData`` whose place a shard's ``adj`` takes
_GRAPH_KEYS = ("edge_index", "adj_t")


class HeteroShard(HeteroData):
    """The ``HeteroData`` :func:`shard_hetero` returns (and a heterogeneous loader's batch): PyG's,
    except :meth:`to_homogeneous` and :meth:`collect` of a graph attribute the shard does not hold
    (``local.edge_index_dict``)."""

    def collect(self, key: str, allow_empty: bool = False) -> dict[Any, Any]:
        """PyG's ``collect`` (``local.x_dict`` is ``local.collect("x")``); ``edge_index`` and
        ``adj_t``, which a shard does not hold, raise :class:`MissingShardKey` naming ``adj_dict``."""
        mapping = super().collect(key, allow_empty=True)
        if mapping or allow_empty:
            return mapping
        if key in _GRAPH_KEYS:
            raise MissingShardKey(f"a shard of a HeteroData holds no {key}: each relation's adjacency is "
                                  f"local[edge_type].adj (a RelationAdj over the source type's [owned | halo] rows), "
                                  f"so pass local.adj_dict where the model takes edge_index_dict: "
                                  f"model(local.x_dict, local.adj_dict) (a mini-batch: batch.adj_dict)")
        return super().collect(key)

    def to_homogeneous(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: a shard's relations are ``RelationAdj`` blocks whose columns index each source
        type's own ``[owned | halo]`` rows, which one homogeneous graph of the owned nodes cannot hold."""
        raise ValueError("a shard of a HeteroData cannot be made homogeneous (each relation's columns are the halo of "
                         "its source type): call data.to_homogeneous() on the whole graph, then partition and shard "
                         "that Data (node_type and edge_type are sharded like any attribute)")


def partition_of(data: HeteroData) -> tuple[dict[str, Tensor], int]:
    """``({node type: part}, num_parts)`` of a partitioned ``HeteroData`` (checked)."""
    missing = [t for t in data.node_types if data[t].get("part") is None]
    if missing:
        raise ValueError(f"node type(s) {missing} have no partition: apply SparsityAwarePartitioner("
                         f"num_parts=world_size) to the HeteroData first (it sets data[node_type].part)")
    parts = {t: data[t].part for t in data.node_types}
    num_parts = data.get("num_parts") if "num_parts" in data else None
    if num_parts is None:
        num_parts = max((int(p.max()) + 1 for p in parts.values() if p.numel()), default=1)
    for node_type, part in parts.items():
        check_partition(part, data[node_type].num_nodes, int(num_parts))
    return parts, int(num_parts)


def shard_hetero(data: HeteroData, group: dist.ProcessGroup | None = None, rank: int | None = None,
                 world_size: int | None = None) -> HeteroData:
    """This rank's part of a ``HeteroData`` partitioned by ``SparsityAwarePartitioner`` (see the module doc).

    Args:
        data (torch_geometric.data.HeteroData): a heterogeneous graph carrying ``data[node_type].part`` for every node
            type.
        group (torch.distributed.ProcessGroup, optional): process group to train in (default: the default group).
        rank (int, optional): build another rank's shard without a process group (tests, simulations).
            (default: taken from ``group``)
        world_size (int, optional): the world size with ``rank``. (default: taken from ``group``)
    """
    check_hetero(data)
    parts, num_parts = partition_of(data)
    rank = group_rank(group) if rank is None else rank
    world_size = group_world_size(group) if world_size is None else world_size
    if world_size != num_parts:
        raise ValueError(f"the graph was partitioned into num_parts={num_parts} but the world size is "
                         f"{world_size}: re-run SparsityAwarePartitioner(num_parts={world_size})")
    unplaced = unplaced_index_keys(data._global_store)
    if unplaced:
        raise ValueError(f"data.{unplaced[0]} of a HeteroData names no node type: store an index list on its node "
                         f"type (data['paper'].{unplaced[0]}) or as a dict keyed by node type")
    local = HeteroShard()
    for node_type in data.node_types:
        _shard_nodes(data, local, node_type, parts[node_type], rank, num_parts)
    for key, value in data._global_store.items():
        if key not in _GLOBAL_SKIP:  # a graph-level index list: a dict keyed by node type
            is_index = is_index_name(key) and isinstance(value, Mapping)
            local[key] = shard_index(value, local, num_parts=num_parts) if is_index else value
    plans: dict[str, tuple[Any, RankPlan]] = {}
    for edge_type in data.edge_types:
        src = edge_type[0]
        if src not in plans:
            pattern = source_pattern(data, src, parts, num_parts)
            plans[src] = (pattern, rank_plan(pattern, rank))
        _shard_relation(data, local, edge_type, *plans[src], parts[edge_type[2]])
    return local


def _shard_nodes(data: HeteroData, local: HeteroData, node_type: str, part: Tensor, rank: int, num_parts: int) -> None:
    store = data[node_type]
    n_id = torch.nonzero(part.cpu() == rank).view(-1)
    indexes = index_attributes(store, n_id, store.num_nodes, num_parts)  # train_idx, ... and their labels
    for key, value in store.items():
        if key in _NODE_SKIP:
            continue
        if key in indexes:
            value = indexes[key]
        elif isinstance(value, Tensor) and store.is_node_attr(key):
            value = value[n_id.to(value.device)]
        local[node_type][key] = value
    local[node_type].n_id = n_id
    local[node_type].num_nodes = n_id.numel()
    local[node_type].global_num_nodes = store.num_nodes


def _shard_relation(data: HeteroData, local: HeteroData, edge_type: tuple[str, str, str], pattern,
                    plan: RankPlan, target_part: Tensor) -> None:
    store = data[edge_type]
    row, col, edge_id = local_edges(store.edge_index.cpu(), pattern, plan, target_part=target_part.cpu())
    weight = store.get("edge_weight")
    check_edge_weight(weight, store.edge_index.size(1))
    value = None if weight is None else weight[edge_id.to(weight.device)].cpu()
    num_rows = local[edge_type[2]].num_nodes
    adj = RelationAdj.from_relation(row, col, value, plan, edge_type, num_rows)
    num_edges = store.edge_index.size(1)
    pairs = SUPERVISION_KEYS if "edge_label_index" in store else ()
    for key, attr in store.items():
        if key in _EDGE_SKIP:
            continue
        if key not in pairs and isinstance(attr, Tensor) and attr.dim() >= 1 and attr.size(0) == num_edges:
            attr = attr[edge_id.to(attr.device)]
        local[edge_type][key] = attr
    local[edge_type].adj = adj
    local[edge_type].edge_weight = adj.value
    local[edge_type].e_id = edge_id
