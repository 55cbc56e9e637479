r"""Negatives of one relation ``(src, rel, dst)`` of a heterogeneous graph, drawn by hashes of global ids.

PyG draws a relation's negatives with bipartite sizes: ``RandomLinkSplit`` calls
``negative_sampling(edge_index, (data[src].num_nodes, data[dst].num_nodes))`` for a relation between
two node types, and ``negative_sampling(edge_index, data[src].num_nodes)`` when both ends are of one
type.  :func:`hetero_negative_sampling` and :func:`hetero_structured_negative_sampling` do the same
with the hash-based samplers of :mod:`~pyg_sparsecomm.link.negative_sampling`: sources are ids of
type ``src``, targets ids of type ``dst``, each in its own type's numbering, and the negatives are the
same set for any ``P`` and partition (every rank returns those whose source it owns, by the source
type's partition).

The relation is read from the whole partitioned ``HeteroData`` (``data[node_type].part``: no
communication) or from this rank's shard (:func:`~pyg_sparsecomm.shard` of it): then every rank's
edges of the relation are gathered by their ids ``e_id`` (a collective), which gives back the
relation's ``edge_index`` in its order, so a shard draws what the whole graph draws.
"""
import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..comm.collectives import gather_rows
from ..comm.group import is_distributed, world_size
from .negative_sampling import negative_sampling, structured_negative_sampling
from .partition_vector import gathered_partition

EdgeType = tuple[str, str, str]


def hetero_negative_sampling(data: HeteroData, edge_type: EdgeType, num_neg_samples: int | float | None = None,
                             method: str = "sparse", *, seed: int = 0, epoch: int | None = None,
                             group: dist.ProcessGroup | None = None, rank: int | None = None) -> Tensor:
    r"""This rank's share of PyG's ``negative_sampling`` of the relation ``edge_type`` (see the module doc).

    Args:
        data (torch_geometric.data.HeteroData): the whole graph, partitioned (``data[t].part``;
            unpartitioned in a single process only: every pair) or this rank's shard of it.
        edge_type (tuple[str, str, str]): the relation ``(src, rel, dst)``, one of ``data.edge_types``.
        num_neg_samples (int or float, optional): negatives over all ranks; a float is a ratio of the
            relation's edges; ``None``: as many as edges. (default: :obj:`None`)
        method (str, optional): ``"sparse"`` or ``"dense"``, as PyG's (the draw is the same).
            (default: ``"sparse"``)
        seed (int, optional): the random stream. (default: ``0``)
        epoch (int, optional): the draw within the stream; ``None``: fresh negatives at every call,
            as PyG's (every rank calls together). (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: the default group)
        rank (int, optional): draw this rank's share of a whole partitioned graph without a process
            group (tests, simulations). (default: :obj:`None`)

    Shapes:
        - **output:** :math:`(2, m)`: (source id of type ``src``, target id of type ``dst``) of the
          negatives whose source this rank owns, sorted by source
    """
    edge_index, num_nodes, part = relation(data, edge_type, group, rank)
    return negative_sampling(edge_index, num_nodes, num_neg_samples, method, seed=seed, epoch=epoch, part=part,
                             group=group, rank=rank)


def hetero_structured_negative_sampling(data: HeteroData, edge_type: EdgeType, contains_neg_self_loops: bool = True,
                                        *, seed: int = 0, epoch: int | None = None,
                                        group: dist.ProcessGroup | None = None, rank: int | None = None
                                        ) -> tuple[Tensor, Tensor, Tensor]:
    r"""This rank's share of PyG's ``structured_negative_sampling`` of the relation ``edge_type``:
    for every edge :math:`(i, j)` whose source this rank owns, :math:`k` uniform over the nodes of
    type ``dst`` that :math:`i` has no edge to.

    Args:
        data (torch_geometric.data.HeteroData): the whole graph or this rank's shard, as in
            :func:`hetero_negative_sampling`.
        edge_type (tuple[str, str, str]): the relation ``(src, rel, dst)``.
        contains_neg_self_loops (bool, optional): :math:`k = i` may be drawn; only meaningful when
            ``src == dst`` (must stay :obj:`True` otherwise). (default: :obj:`True`)
        seed (int, optional): the random stream. (default: ``0``)
        epoch (int, optional): the draw within the stream; ``None``: fresh at every call.
            (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: the default group)
        rank (int, optional): as in :func:`hetero_negative_sampling`. (default: :obj:`None`)

    Shapes:
        - **output:** three :math:`(|\mathcal{E}_r|)` tensors ``i``, ``j``, ``k`` for the relation's
          edges whose source this rank owns, in the relation's edge order
    """
    edge_index, num_nodes, part = relation(data, edge_type, group, rank)
    return structured_negative_sampling(edge_index, num_nodes, contains_neg_self_loops, seed=seed, epoch=epoch,
                                        part=part, group=group, rank=rank)


def relation(data: HeteroData, edge_type: EdgeType, group: dist.ProcessGroup | None = None,
             rank: int | None = None) -> tuple[Tensor, int | tuple[int, int], np.ndarray | Tensor | None]:
    """``(edge_index, num_nodes, part)`` of a relation, as PyG's samplers take them (``num_nodes``
    an ``int`` if both ends are of one type, else ``(num_src, num_dst)``; ``part`` the source type's
    partition or ``None``); raises ``ValueError`` naming the fix for a bad edge type."""
    check_edge_type(data, edge_type)
    src, _, dst = edge_type
    store = data[edge_type]
    if "n_id" in data[src]:  # a shard
        if rank is not None:
            raise ValueError("rank= draws a rank's share without a process group, from the whole partitioned graph: "
                             "pass the partitioned HeteroData, not a shard")
        num_src, num_dst = (int(data[t].global_num_nodes) for t in (src, dst))
        edge_index = _gathered_edges(data, edge_type, group)
        part: np.ndarray | Tensor | None = gathered_partition(data[src].n_id, num_src, group)
    else:
        num_src, num_dst = data[src].num_nodes, data[dst].num_nodes
        if "edge_index" not in store:
            raise ValueError(f"relation {edge_type} has no edge_index: pass the HeteroData as PyG's (edge_index per "
                             f"edge type) or this rank's shard of it")
        edge_index, part = store.edge_index, data[src].get("part")
        if part is None and (rank is not None or (is_distributed(group) and world_size(group) > 1)):
            raise ValueError(f"node type {src!r} has no partition, so every rank would draw every negative: pass the "
                             f"partitioned HeteroData (SparsityAwarePartitioner(num_parts=world_size)(data)) or this "
                             f"rank's shard of it")
    return edge_index, (num_src if src == dst else (num_src, num_dst)), part


def check_edge_type(data: HeteroData, edge_type: EdgeType) -> None:
    """Raises ``ValueError`` naming the fix unless ``edge_type`` is a relation of ``data``."""
    if not isinstance(data, HeteroData):
        raise ValueError(f"the negatives of an edge type are drawn from a HeteroData (the whole graph or this rank's "
                         f"shard), got {type(data).__name__}; for a homogeneous graph call negative_sampling")
    if not (isinstance(edge_type, tuple) and len(edge_type) == 3 and all(isinstance(t, str) for t in edge_type)):
        raise ValueError(f"edge_type must be a (source type, relation, destination type) tuple of strings, as PyG's "
                         f"HeteroData.edge_types, got {edge_type!r}")
    if edge_type not in data.edge_types:
        raise ValueError(f"edge type {edge_type} is not a relation of this graph: pass one of its edge types "
                         f"{data.edge_types}")


def _gathered_edges(local: HeteroData, edge_type: EdgeType, group: dist.ProcessGroup | None) -> Tensor:
    """``[2, E]`` global edges of a relation, in its order, from every rank's shard (a collective)."""
    store = local[edge_type]
    if "adj" not in store or "e_id" not in store:
        raise ValueError(f"relation {edge_type} of this shard has no adj / e_id: pass the shard shard() returned")
    plan = store.adj.plan
    ids = torch.cat([plan.n_id, plan.halo_n_id]).cpu()
    mine = store.adj.edge_index().cpu()
    rows = torch.stack([store.e_id.cpu(), ids[mine[0]], local[edge_type[2]].n_id.cpu()[mine[1]]], dim=1)
    rows = gather_rows(rows, group)
    num_edges = int(rows.size(0))
    if num_edges and (int(rows[:, 0].max()) >= num_edges or torch.unique(rows[:, 0]).numel() != num_edges):
        raise ValueError(f"the shards' edges of {edge_type} do not cover the relation: every rank must pass its shard "
                         f"of the same partitioned graph")
    edge_index = torch.empty((2, num_edges), dtype=torch.long)
    edge_index[:, rows[:, 0]] = rows[:, 1:].t()
    return edge_index
