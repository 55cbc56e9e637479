r"""Node pairs of a relation ``(src, rel, dst)`` of a heterogeneous graph, scored after a distributed encoder.

PyG's heterogeneous link prediction scores the pairs of one edge type from two embedding tables:
``z_dict[src][edge_label_index[0]]`` and ``z_dict[dst][edge_label_index[1]]``, each id in its own
type's numbering.  On a heterogeneous shard (:mod:`~pyg_sparsecomm.store.rank_hetero`) rank
:math:`r` holds the rows of the nodes of every type it owns, by the partition of that type.  As
for homogeneous pairs (:mod:`~pyg_sparsecomm.link.pairs`), the owner of a pair's source holds it
(:func:`distribute_hetero_pairs`), and the rows of the endpoints it does not own arrive through the
sparsity-aware exchange: one :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` per endpoint type,
over that type's nodes (one for both ends when ``src == dst``), each needed row moved once per
rank however many pairs use it.  Rows moved per exchange, over the endpoint types :math:`T`:

.. math::
    V = \sum_{T} \sum_r \bigl|\{v \in \mathrm{ends}_T(\mathcal{P}_r) : \mathrm{part}_T(v) \ne r\}\bigr|

Counted by :func:`~pyg_sparsecomm.comm_counter` (``"halo"`` / ``"halo_grad"``) and predicted by
:meth:`HeteroPairs.predicted_bytes`.
"""
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..comm.group import host_all_reduce, is_distributed, raise_together
from ..comm.group import rank as group_rank
from ..plan.homogeneous import RankPlan
from ..training.whole_graph import global_count
from .pair_exchange import ends_plan, rows_with_halo
from .partition_vector import gathered_partition, partition_vector
from .same_pairs import check_same_pairs

EdgeType = tuple[str, str, str]


@dataclass
class HeteroPairs:
    r"""The pairs of one relation a rank holds, ready to be scored from its shard's embeddings.

    Attributes:
        edge_type (tuple[str, str, str]): the relation ``(src, rel, dst)``.
        edge_label_index (torch.Tensor): ``[2, m]`` (source id of type ``src``, target id of type ``dst``).
        edge_label (torch.Tensor): ``[m]`` their labels, or ``None``.
        pair_id (torch.Tensor): ``[m]`` position of every pair in the global list (``-1``: a rank's own).
        index (torch.Tensor): ``[2, m]`` row of every source in :math:`[z_{src} \,\|\, z_{src, halo}]`
            and of every target in :math:`[z_{dst} \,\|\, z_{dst, halo}]`.
        plans (dict[str, RankPlan]): the exchange of every endpoint type.
        num_pairs (int): pairs held by all ranks together.
        group (torch.distributed.ProcessGroup, optional): the exchange's process group. (default: :obj:`None`)
    """
    edge_type: EdgeType
    edge_label_index: Tensor
    edge_label: Tensor | None
    pair_id: Tensor
    index: Tensor
    plans: dict[str, RankPlan]
    num_pairs: int
    group: dist.ProcessGroup | None = None

    def __len__(self) -> int:
        return int(self.index.size(1))

    def gather(self, z) -> tuple[Tensor, Tensor]:
        """``(z_dict[src][s], z_dict[dst][t])`` of every pair: a collective, differentiable.

        Args:
            z (dict[str, torch.Tensor] or tuple[torch.Tensor, torch.Tensor]): this rank's rows of every
                node type (the encoder's ``z_dict``), or ``(z_src, z_dst)``.
        """
        src, _, dst = self.edge_type
        z_src, z_dst = (z[src], z[dst]) if isinstance(z, Mapping) else z
        rows = {src: self.rows(src, z_src)}
        if dst != src:
            rows[dst] = self.rows(dst, z_dst)
        index = self.index.to(z_src.device)
        return rows[src].index_select(0, index[0]), rows[dst].index_select(0, index[1])

    def rows(self, node_type: str, z: Tensor) -> Tensor:
        r""":math:`[z \,\|\, z_{halo}]` of one endpoint type: this rank's rows, then those of the
        endpoints of that type it does not own (a collective, differentiable).

        Args:
            node_type (str): the relation's source or destination type.
            z (torch.Tensor): this rank's rows of that type.
        """
        plan = self.plans[node_type]
        if z.size(0) != plan.num_owned:
            raise ValueError(f"the pairs' gather: the rows of node type {node_type!r} are {z.size(0)} but this rank "
                             f"owns {plan.num_owned} {node_type!r} nodes: pass the encoder's output on this rank's "
                             f"shard, z_dict = model(local.x_dict, local.adj_dict)")
        return rows_with_halo(z, plan, self.group)

    def predicted_bytes(self, num_columns: int, element_size: int = 4) -> dict:
        """Bytes this rank sends and receives in one :meth:`gather` of ``num_columns`` wide rows of
        every type (the backward moves as many the other way)."""
        out = {"sent": 0, "received": 0}
        for plan in self.plans.values():
            for key, value in plan.predicted_bytes(num_columns, element_size).items():
                out[key] += value
        return out

    def to(self, device) -> "HeteroPairs":
        return replace(self, edge_label_index=self.edge_label_index.to(device), pair_id=self.pair_id.to(device),
                       edge_label=None if self.edge_label is None else self.edge_label.to(device),
                       index=self.index.to(device), plans={t: p.to(device) for t, p in self.plans.items()})


def distribute_hetero_pairs(edge_label_index: Tensor, edge_type: EdgeType, edge_label: Tensor | None = None,
                            part=None, group: dist.ProcessGroup | None = None) -> HeteroPairs:
    r"""This rank's share of a relation's supervision pairs: those whose source it owns (see the module doc).

    Every rank passes the same global pairs; a collective.

    Args:
        edge_label_index (torch.Tensor): ``[2, num_pairs]`` (source id of type ``src``, target id of
            type ``dst``), as PyG's ``data[edge_type].edge_label_index``.
        edge_type (tuple[str, str, str]): the relation ``(src, rel, dst)``.
        edge_label (torch.Tensor, optional): ``[num_pairs]`` labels. (default: :obj:`None`)
        part (torch_geometric.data.HeteroData or dict[str, torch.Tensor], optional): the partition: the
            partitioned ``HeteroData`` (``data[node_type].part``), this rank's shard of it (every rank's
            ``n_id`` then gathered), or ``{node type: [N_type] part}``. (default: :obj:`None`, which
            raises: it is required)
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.
            (default: :obj:`None`, all)
    """
    parts = type_partitions(part, edge_type, group)
    src, _, dst = edge_type
    def check() -> None:  # bad pairs on one rank raise on every rank
        check_pair_ids(edge_label_index, edge_type, parts[src].size, parts[dst].size)
        check_edge_label(edge_label, edge_label_index.size(1))
    raise_together(check, "distribute_pairs", group, flag_first=True)
    m = edge_label_index.size(1)
    check_same_pairs(edge_label_index, "distribute_pairs", group, settings={"edge_type": edge_type})
    mine = torch.from_numpy(np.flatnonzero(parts[src][edge_label_index[0].cpu().numpy()] == group_rank(group)))
    pairs = local_hetero_pairs(edge_label_index[:, mine.to(edge_label_index.device)], edge_type, parts,
                               None if edge_label is None else edge_label[mine.to(edge_label.device)], group)
    return replace(pairs, pair_id=mine, num_pairs=m)


def local_hetero_pairs(edge_label_index: Tensor, edge_type: EdgeType, part, edge_label: Tensor | None = None,
                       group: dist.ProcessGroup | None = None) -> HeteroPairs:
    """:class:`HeteroPairs` of the pairs this rank holds, whatever their endpoints (a collective:
    every rank calls it with its own pairs, possibly none); ``part`` as for :func:`distribute_hetero_pairs`."""
    parts = type_partitions(part, edge_type, group)
    src, _, dst = edge_type
    raise_together(lambda: check_pair_ids(edge_label_index, edge_type, parts[src].size, parts[dst].size),
                   "local_pairs", group, flag_first=True)
    ends = edge_label_index.cpu().numpy().astype(np.int64)
    if src == dst:
        plan, column = ends_plan(ends.reshape(-1), parts[src], group)
        plans, index = {src: plan}, column.view(2, -1)
    else:
        (src_plan, src_column), (dst_plan, dst_column) = (ends_plan(ends[0], parts[src], group),
                                                          ends_plan(ends[1], parts[dst], group))
        plans, index = {src: src_plan, dst: dst_plan}, torch.stack([src_column, dst_column])
    num_pairs = global_count(int(edge_label_index.size(1)), group)
    return HeteroPairs(tuple(edge_type), edge_label_index, edge_label,  # type: ignore[arg-type]
                       torch.full((edge_label_index.size(1),), -1), index, plans, num_pairs, group)


def check_edge_label(edge_label: Tensor | None, num_pairs: int) -> None:
    """Raises ``ValueError`` unless ``edge_label`` is ``None`` or holds one entry per pair."""
    if edge_label is not None and (edge_label.dim() < 1 or edge_label.size(0) != num_pairs):
        raise ValueError(f"edge_label must hold one entry per pair ({num_pairs}, edge_label_index.size(1)), got shape "
                         f"{list(edge_label.shape)}")


def check_pair_ids(edge_label_index: Tensor, edge_type: EdgeType, num_src: int, num_dst: int) -> None:
    """Raises ``ValueError`` naming the fix unless every pair is (a ``src`` id, a ``dst`` id) in range."""
    if edge_label_index.dim() != 2 or edge_label_index.size(0) != 2 or edge_label_index.is_floating_point():
        raise ValueError(f"edge_label_index of {edge_type} must be a [2, num_pairs] integer tensor, got "
                         f"{edge_label_index.dtype} of shape {list(edge_label_index.shape)}")
    for end, (node_type, count) in enumerate(((edge_type[0], num_src), (edge_type[2], num_dst))):
        ids = edge_label_index[end]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= count):
            bad = int(ids.max()) if int(ids.max()) >= count else int(ids.min())
            raise ValueError(f"edge_label_index[{end}] of {edge_type} holds id {bad} but node type {node_type!r} has "
                             f"{count} nodes: row {end} holds ids of {node_type!r} in its own numbering "
                             f"(0..{count - 1}), as PyG's data[edge_type].edge_label_index")


def type_partitions(part, edge_type: EdgeType, group: dist.ProcessGroup | None = None) -> dict[str, np.ndarray]:
    """``{node type: [N_type] owner}`` of the relation's two end types (see :func:`distribute_hetero_pairs`).

    Raises ``ValueError`` naming the fix for an edge type that is not a relation of the graph."""
    if not (isinstance(edge_type, tuple) and len(edge_type) == 3 and all(isinstance(t, str) for t in edge_type)):
        raise ValueError(f"edge_type must be a (source type, relation, destination type) tuple of strings, as PyG's "
                         f"HeteroData.edge_types, got {edge_type!r}")
    if isinstance(part, Mapping) and not isinstance(part, HeteroData):
        node_types = list(part)
    elif isinstance(part, HeteroData):
        node_types = list(part.node_types)
        if part.edge_types and edge_type not in part.edge_types:
            raise ValueError(f"edge type {edge_type} is not a relation of this graph: pass one of its edge types "
                             f"{part.edge_types}")
    else:
        raise ValueError(f"the pairs of an edge type need the heterogeneous partition: the partitioned HeteroData, "
                         f"this rank's shard of it, or {{node type: part}}; got {type(part).__name__}")
    missing = [t for t in (edge_type[0], edge_type[2]) if t not in node_types]
    if missing:
        raise ValueError(f"edge type {edge_type} names node type(s) {missing} the graph lacks: its node types are "
                         f"{node_types}")
    return {t: _type_partition(part, t, group) for t in dict.fromkeys((edge_type[0], edge_type[2]))}


def _type_partition(part, node_type: str, group: dist.ProcessGroup | None) -> np.ndarray:
    if not isinstance(part, HeteroData):
        return partition_vector(part[node_type], group)
    store = part[node_type]
    if "part" in store:
        return partition_vector(store.part, group)
    if "n_id" not in store:
        raise ValueError(f"node type {node_type!r} has neither a partition (part) nor a shard's n_id: pass the "
                         f"partitioned HeteroData (SparsityAwarePartitioner(num_parts=world_size)(data)) or its shard")
    num_nodes = int(store.n_id.numel())
    if is_distributed(group):
        num_nodes = host_all_reduce([num_nodes], dist.ReduceOp.SUM, group)[0]
    return gathered_partition(store.n_id, num_nodes, group)
