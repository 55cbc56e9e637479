"""``shard()``: the rank-local ``Data`` of a partitioned graph."""
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..comm.grid import ProcessGrid
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..graph.inputs import FORM_KEY, SUPERVISION_KEYS, with_edge_index
from ..graph.validate import check_edge_index, check_edge_weight, check_node_tensor, check_partition
from ..plan.halo_adj import HaloAdj
from ..plan.homogeneous import CommPattern, local_edges, rank_plan
from ..plan.known_pattern import pattern_of
from .shard_index import index_attributes, owned_by_replica

# Attributes a shard rebuilds itself (adjacency, weights, ids) or that describe the whole partition.
_SKIP = {"edge_index", "adj_t", "edge_weight", "e_id", "part", "num_parts", "comm_stats", "num_nodes"}


def _edge_weight_of(data: Data) -> Tensor | None:
    if getattr(data, "edge_weight", None) is not None:
        return data.edge_weight
    attr = getattr(data, "edge_attr", None)
    if attr is not None and (attr.dim() == 1 or (attr.dim() == 2 and attr.size(1) == 1)):
        return attr.view(-1)  # PyG's convention: a 1-column edge_attr is a weight
    return None


def shard(data: Data, group: dist.ProcessGroup | None = None, rank: int | None = None,
          world_size: int | None = None, grid: ProcessGrid | None = None) -> Data:
    r"""Returns this rank's part of a graph partitioned by ``SparsityAwarePartitioner``.

    The result holds the owned rows of every node-level attribute (``x``, ``y``,
    masks, ...), the local edges of every edge-level attribute (``edge_attr``,
    ``edge_type``, ...; in ``adj`` order, i.e. ``value[e_id]``), graph-level values
    unchanged, ``n_id`` (global id of every local row), ``adj`` (a
    :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` whose values are the edge weights, if
    any), ``edge_weight`` (those weights in ``adj``'s edge order) and ``e_id`` (the
    global edge id of every local edge, in the same order).  Of a graph given as ``adj_t`` (e.g.
    by ``T.ToSparseTensor()``), ``adj`` is also ``adj_t``, so the script's ``data.adj_t`` reads it.
    A link split's supervision pairs (``edge_label_index``, ``edge_label``, ``edge_label_time`` of
    ``RandomLinkSplit``) are no edges: they are kept whole, in global ids, on every rank
    (:func:`~pyg_sparsecomm.link.distribute_pairs` gives each rank its own).  Index lists of
    nodes (``train_idx``, ``idx_test``, a ``split_idx`` dict: the rule of
    :mod:`~pyg_sparsecomm.graph.node_index`) become the rows of the owned nodes among their ids, in
    their order (a :class:`~pyg_sparsecomm.graph.node_index.ShardIndex`), and their labels
    (``Entities``' ``train_y``) the labels of those entries, so ``out[local.train_idx]`` and
    ``local.train_y`` stay aligned (:mod:`~pyg_sparsecomm.store.shard_index`).

    With a :class:`~pyg_sparsecomm.comm.grid.ProcessGrid` ``grid`` of replication
    ``c`` (the 1.5D algorithms), ``data`` must be partitioned into ``P / c``
    parts and the result is the *replicated* view: block row ``grid.row``, the
    same on the ``c`` ranks of a grid row.  So that losses and metrics count
    every node once across replicas, ``owner_mask`` marks the rows this replica
    scores (local row ``l`` on replica ``l mod c``) and every boolean node
    attribute whose name ends in ``mask`` (``train_mask``, ...) and every index list is
    restricted to them; ``distributed_loss``, ``global_accuracy`` and ``sync_gradients`` over
    the whole world then equal single-process training.  AND your own masks
    with ``owner_mask``.

    ``local.to(device)`` (``cuda()``, ``cpu()``) moves ``adj`` and its plan with the tensors.

    A partitioned ``HeteroData`` gives this rank's ``HeteroData`` (per node type the owned rows,
    per relation a bipartite ``adj``; see :mod:`pyg_sparsecomm.store.rank_hetero`).

    Args:
        data (torch_geometric.data.Data): a graph carrying ``part`` (see ``SparsityAwarePartitioner``), given as
            ``edge_index`` or ``adj_t`` (torch sparse CSR/CSC/COO or ``torch_sparse.SparseTensor``,
            its values the edge weights; see :mod:`pyg_sparsecomm.graph.inputs`).
        group (torch.distributed.ProcessGroup, optional): process group to train in (default: the default group).
        rank (int, optional): build the shard of another rank without a process group (tests,
            simulations). (default: taken from ``group``)
        world_size (int, optional): the world size with ``rank``. (default: taken from ``group``)
        grid (ProcessGrid, optional): the 1.5D process grid (``rank``/``world_size`` are then the grid's).
            (default: :obj:`None`)

    Shapes:
        - **input:** ``data``: node features :math:`(|\mathcal{V}|, F)`, edge indices
          :math:`(2, |\mathcal{E}|)` or sparse matrix :math:`(|\mathcal{V}|, |\mathcal{V}|)`,
          edge weights :math:`(|\mathcal{E}|)` *(optional)*, ``part`` :math:`(|\mathcal{V}|)`
        - **output:** node features :math:`(|\mathcal{V}_r|, F)` of the :math:`|\mathcal{V}_r|`
          nodes rank :math:`r` owns, ``n_id`` :math:`(|\mathcal{V}_r|)`, ``adj`` a
          :math:`(|\mathcal{V}_r|, |\mathcal{V}_r| + |\mathcal{H}_r|)` matrix over the owned rows
          and the :math:`|\mathcal{H}_r|` halo rows, ``edge_weight`` and ``e_id``
          :math:`(|\mathcal{E}_r|)` for the :math:`|\mathcal{E}_r|` edges into owned nodes
    """
    if isinstance(data, HeteroData):
        if grid is not None:
            raise NotImplementedError("shard(HeteroData, grid=...): the 1.5D layout is not supported for "
                                      "heterogeneous graphs yet; shard without a grid")
        from .rank_hetero import shard_hetero
        return shard_hetero(data, group, rank, world_size)
    data = with_edge_index(data, "shard")
    part = getattr(data, "part", None)
    if part is None:
        raise ValueError("data has no partition: apply SparsityAwarePartitioner(num_parts=world_size) first")
    num_nodes = data.num_nodes
    num_parts = int(getattr(data, "num_parts", None) or (int(part.max()) + 1 if part.numel() else 1))
    check_partition(part, num_nodes, num_parts)
    check_edge_index(data.edge_index, num_nodes)
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        check_node_tensor(key, getattr(data, key, None), num_nodes)
    if grid is not None:
        if rank is not None or world_size is not None or group is not None:
            raise ValueError("shard(..., grid=...) takes the rank and world size from the grid: do not also pass "
                             "group, rank or world_size (build ProcessGrid(c, world_size=P, rank=r) to simulate)")
        if num_parts != grid.num_block_rows:
            raise ValueError(f"a grid with replication c={grid.replication} on P={grid.world_size} ranks needs a "
                             f"partition into P/c={grid.num_block_rows} parts, but the graph has num_parts="
                             f"{num_parts}: re-run SparsityAwarePartitioner(num_parts={grid.num_block_rows})")
        pattern = pattern_of(data.edge_index, part, num_nodes, num_parts, getattr(data, "comm_stats", None))
        return replicate(shard_from_pattern(data, pattern, grid.row), grid.col, grid.replication)
    rank = group_rank(group) if rank is None else rank
    world_size = group_world_size(group) if world_size is None else world_size
    if world_size != num_parts:
        raise ValueError(f"the graph was partitioned into num_parts={num_parts} but the world size is "
                         f"{world_size}: re-run SparsityAwarePartitioner(num_parts={world_size})")

    # the partitioner's pattern when data is its result, unedited (plan/known_pattern.py)
    pattern = pattern_of(data.edge_index, part, num_nodes, num_parts, getattr(data, "comm_stats", None))
    return shard_from_pattern(data, pattern, rank)


def replicate(local: Data, replica: int, replication: int) -> Data:
    """Marks a block-row shard as replica ``replica`` of ``replication``: ``owner_mask`` and the
    ``*mask`` attributes select the rows this replica scores (every row on exactly one replica)."""
    owner_mask = torch.arange(local.num_nodes) % replication == replica
    for key, value in list(local.items()):
        if key.endswith("mask") and isinstance(value, Tensor) and value.dtype == torch.bool \
                and value.dim() >= 1 and value.size(0) == local.num_nodes:
            local[key] = value & owner_mask.view((-1,) + (1,) * (value.dim() - 1)).to(value.device)
    owned_by_replica(local, owner_mask)
    local.owner_mask = owner_mask
    local.replica, local.replication = replica, replication
    return local


def shard_from_pattern(data: Data, pattern: CommPattern, rank: int) -> Data:
    """``shard`` for a pattern computed once (building every rank's shard costs one pattern)."""
    edge_index = data.edge_index.cpu()
    weight = _edge_weight_of(data)
    check_edge_weight(weight, edge_index.size(1))
    plan = rank_plan(pattern, rank)
    row, col, edge_id = local_edges(edge_index, pattern, plan)
    value = None if weight is None else weight[edge_id.to(weight.device)]
    adj = HaloAdj.from_coo(row, col, None if value is None else value.cpu(), plan, is_sorted=True)  # local_edges sorts

    local = Data()
    pairs = SUPERVISION_KEYS if "edge_label_index" in data else ()
    indexes = index_attributes(data, plan.n_id, data.num_nodes, pattern.num_parts)  # train_idx, ... and train_y
    for key, value in data.items():
        if key in pairs:
            local[key] = value  # the split's pairs, whole, in global ids (link.distribute_pairs takes them)
        elif key in indexes:
            local[key] = indexes[key]
        elif key not in _SKIP:
            local[key] = _local_attr(data, key, value, plan.n_id, edge_id)
    return attach_adjacency(local, adj, edge_id)


def _is_edge_level(data: Data, key: str, value: Any) -> bool:
    # PyG's rule, plus any tensor with one row per edge that PyG files elsewhere because of its
    # name (e.g. an '*index*' key, concatenated along the last dimension).
    num_edges = data.edge_index.size(1)
    return data.is_edge_attr(key) or (isinstance(value, Tensor) and value.dim() >= 1
                                      and value.size(0) == num_edges)


def _take(value: Any, index: Tensor) -> Any:
    if isinstance(value, Tensor):
        return value[index.to(value.device)]
    items = [value[i] for i in index.tolist()]
    return tuple(items) if isinstance(value, tuple) else items


def _local_attr(data: Data, key: str, value: Any, n_id: Tensor, edge_id: Tensor) -> Any:
    """This rank's part of attribute ``key``: the owned rows of a node-level attribute, the local
    edges (in ``adj`` order, as ``e_id``) of an edge-level one, graph-level values unchanged.

    When ``num_nodes == num_edges`` PyG's name rule decides ('edge' in the name: edge-level).
    Raises ``ValueError`` for an edge-level tensor whose first dimension is not the edge
    dimension: copying it whole would put the whole graph on every rank."""
    if not isinstance(value, (Tensor, list, tuple)) or key == "n_id":
        return value
    if data.is_node_attr(key):
        return _take(value, n_id)
    if not _is_edge_level(data, key, value):
        return value  # graph-level (class weights, ...): small, the same on every rank
    num_edges = data.edge_index.size(1)
    if isinstance(value, Tensor) and (value.dim() == 0 or value.size(0) != num_edges):
        raise ValueError(f"edge-level attribute {key!r} has shape {list(value.shape)}: shard() slices "
                         f"edge attributes along their first dimension only, which must have one entry "
                         f"per edge ({num_edges}); store it as [num_edges, ...] or delete it before "
                         f"sharding")
    return _take(value, edge_id)


def attach_adjacency(local: Data, adj: HaloAdj, e_id: Tensor) -> Data:
    """Sets the fields every shard carries besides its node attributes (one place for
    ``shard`` and ``load_shard``): of a graph given as ``adj_t``, ``adj`` is also ``adj_t``, where
    the script reads it."""
    plan = adj.plan
    adj.given_as = local[FORM_KEY] if FORM_KEY in local else "edge_index"  # the script's form of the graph
    local.n_id = plan.n_id
    local.adj = adj
    if adj.given_as != "edge_index":
        local.adj_t = adj  # PyG's adj_t carries the weights, as adj does
    local.edge_weight = adj.value
    local.e_id = e_id  # global edge id of every local edge, in adj order
    local.num_nodes = plan.num_owned
    local.global_num_nodes = plan.num_nodes
    return local
