r"""Node pairs scored after a distributed encoder: their exchange plan and their embeddings.

Link prediction scores supervision pairs :math:`(s, t)` (PyG's ``edge_label_index``) with a
decoder of both endpoints' embeddings, e.g. :math:`\hat y_{st} = z_s^\top z_t`.  After
``z = model(local.x, local.adj)`` rank :math:`r` holds :math:`z_v` only for the nodes it owns.
A rank *holds* some pairs (:func:`distribute_pairs`: the owner of the source holds a pair) and
needs :math:`z_v` for every endpoint :math:`v` of its pairs; those it does not own form the pairs'
*halo*, which arrives through the same sparsity-aware exchange as a layer's halo: the owner of
:math:`v` sends :math:`z_v` once per exchange to every rank holding a pair with endpoint
:math:`v`, however many of its pairs use it.  Rows moved per exchange:

.. math::
    V = \sum_r \bigl|\{v \in \mathrm{ends}(\mathcal{P}_r) : \mathrm{part}(v) \ne r\}\bigr|

(:math:`\mathcal{P}_r` the pairs rank :math:`r` holds).  The plan is a
:class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` with :mod:`~pyg_sparsecomm.plan.homogeneous`'s layout
(halo ordered by (owner, global id); send rows grouped by destination, ascending id within), so the exchange is
:func:`~pyg_sparsecomm.comm.halo.halo_exchange`: differentiable, the backward sends each pair's
gradient back to the owner of the endpoint (the reverse exchange), counted by
:func:`~pyg_sparsecomm.comm_counter` as ``"halo"`` / ``"halo_grad"``, and predicted by
:meth:`DistributedPairs.predicted_bytes`.

Building a plan costs two small exchanges (how many rows every rank asks every owner for, then
their rows); a plan depends on the pairs only, so it is built once for fixed pairs and reused
every epoch, and built again for fresh negatives.
"""
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.group import raise_together
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..comm.halo import halo_exchange
from ..comm.ids import exchange_ids
from ..graph.validate import check_edge_index
from ..plan.homogeneous import RankPlan, owner_rows
from ..training.whole_graph import global_count
from .partition_vector import partition_vector
from .same_pairs import check_same_pairs


@dataclass
class DistributedPairs:
    r"""The node pairs one rank holds, ready to be scored from its shard's embeddings.

    Attributes:
        edge_label_index (torch.Tensor): ``[2, m]`` global ids of the (source, target) of every pair
            this rank holds.
        edge_label (torch.Tensor, optional): ``[m]`` their labels (``None`` if none were given).
        pair_id (torch.Tensor): ``[m]`` position of every pair in the list it was taken from (the
            global ``edge_label_index``; ``-1`` for pairs built from a rank's own list).
        index (torch.Tensor): ``[2, m]`` rows of :math:`[z \,\|\, z_{halo}]` (this rank's rows,
            then the exchanged ones) of every pair's source and target.
        plan (RankPlan): the exchange bringing the halo rows.
        num_pairs (int): pairs held by all ranks together.
        group (torch.distributed.ProcessGroup, optional): the exchange's process group.
    """
    edge_label_index: Tensor
    edge_label: Tensor | None
    pair_id: Tensor
    index: Tensor
    plan: RankPlan
    num_pairs: int
    group: dist.ProcessGroup | None = None

    def __len__(self) -> int:
        return int(self.index.size(1))

    def gather(self, z: Tensor) -> tuple[Tensor, Tensor]:
        r"""The embeddings of every pair's source and target: ``(z[s], z[t])`` over the whole graph.

        A collective (every rank calls it, also one without pairs); differentiable: the gradient of
        an exchanged row travels back to its owner.

        Args:
            z (torch.Tensor): ``[num_owned, *]`` this rank's rows (the encoder's output on the shard).

        Shapes:
            - **output:** two ``[m, *]`` tensors, in the order of :attr:`edge_label_index`.
        """
        if z.size(0) != self.plan.num_owned:
            raise ValueError(f"DistributedPairs.gather: z has {z.size(0)} rows but this rank owns "
                             f"{self.plan.num_owned} nodes: pass the encoder's output on this rank's shard, "
                             f"model(local.x, local.adj)")
        halo = halo_exchange(z, self.plan, self.group)
        rows = torch.cat([z, halo])  # also when empty: the halo's backward is a collective every rank joins
        index = self.index.to(z.device)
        return rows.index_select(0, index[0]), rows.index_select(0, index[1])

    def predicted_bytes(self, num_columns: int, element_size: int = 4) -> dict:
        """Bytes this rank sends and receives in one :meth:`gather` of ``num_columns`` wide rows
        (the backward moves as many the other way)."""
        return self.plan.predicted_bytes(num_columns, element_size)

    def to(self, device) -> "DistributedPairs":
        return replace(self, edge_label_index=self.edge_label_index.to(device), pair_id=self.pair_id.to(device),
                       edge_label=None if self.edge_label is None else self.edge_label.to(device),
                       index=self.index.to(device), plan=self.plan.to(device))


def distribute_pairs(edge_label_index: Tensor, edge_label: Tensor | None = None, part=None,
                     group: dist.ProcessGroup | None = None) -> DistributedPairs:
    r"""This rank's share of the whole graph's supervision pairs: those whose *source* it owns.

    Every rank passes the same global ``edge_label_index`` (e.g. from PyG's ``RandomLinkSplit`` run
    on the whole graph); rank :math:`r` keeps pair :math:`k` iff :math:`\mathrm{part}(s_k) = r`, so
    every pair is scored exactly once over the ranks.  A collective (the plan's two exchanges, and
    one small all-reduce checking that every rank passed the same pairs).

    Args:
        edge_label_index (torch.Tensor): ``[2, num_pairs]`` global (source, target) ids.
        edge_label (torch.Tensor, optional): ``[num_pairs]`` labels (or anything per pair).
        part: the partition: the ``[N]`` part of every node (``data.part``), the partitioned graph
            (a ``Data`` carrying ``part``) or this rank's shard (then gathered from every rank's
            ``n_id``).
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.

    Returns:
        DistributedPairs: the pairs, their labels and global positions, and their exchange plan.
    """
    part_np = partition_vector(part, group)
    num_nodes = part_np.size
    check_edge_index(edge_label_index, num_nodes)
    m = edge_label_index.size(1)
    if edge_label is not None and (edge_label.dim() < 1 or edge_label.size(0) != m):
        raise ValueError(f"edge_label must hold one entry per pair ({m}, edge_label_index.size(1)), got shape "
                         f"{list(edge_label.shape)}")
    check_same_pairs(edge_label_index, "distribute_pairs", group)
    rank = group_rank(group)
    mine = torch.from_numpy(np.flatnonzero(part_np[edge_label_index[0].cpu().numpy()] == rank))
    pairs = local_pairs(edge_label_index[:, mine.to(edge_label_index.device)], part_np,
                        None if edge_label is None else edge_label[mine.to(edge_label.device)], group)
    return replace(pairs, pair_id=mine, num_pairs=m)


def local_pairs(edge_label_index: Tensor, part, edge_label: Tensor | None = None,
                group: dist.ProcessGroup | None = None) -> DistributedPairs:
    """:class:`DistributedPairs` of the pairs this rank holds, whatever their endpoints (e.g. the
    negatives it drew, :func:`~pyg_sparsecomm.link.negative_sampling`).  A collective: every rank
    calls it with its own pairs (possibly none)."""
    part_np = partition_vector(part, group)
    # this rank's own pairs: a bad one raises on every rank (its peers would wait in the plan's exchange)
    raise_together(lambda: check_edge_index(edge_label_index, part_np.size), "local_pairs", group, flag_first=True)
    plan, index = pair_plan(edge_label_index, part_np, group)
    num_pairs = global_count(int(edge_label_index.size(1)), group)  # a host integer (any backend)
    return DistributedPairs(edge_label_index, edge_label, torch.full((edge_label_index.size(1),), -1),
                            index, plan, num_pairs, group)


def pair_plan(edge_label_index: Tensor, part: np.ndarray, group: dist.ProcessGroup | None = None
              ) -> tuple[RankPlan, Tensor]:
    r"""The exchange plan of the pairs this rank holds, and every endpoint's row.

    Rank :math:`r`'s halo is the set of endpoints it does not own, ordered by (owner, global id);
    each owner learns which of its rows :math:`r` needs from one exchange of counts and one of
    rows (:func:`~pyg_sparsecomm.comm.ids.exchange_ids`, counted as ``"pair_plan"``).

    Args:
        edge_label_index (torch.Tensor): ``[2, m]`` global ids of this rank's pairs.
        part (numpy.ndarray): ``[N]`` owner of every node.
        group (torch.distributed.ProcessGroup, optional): the process group.

    Returns:
        ``(plan, index)``: the :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` and the ``[2, m]`` rows of
        ``[owned | halo]`` of every pair's source and target.
    """
    rank, P = group_rank(group), group_world_size(group)
    part_sizes, local_index = owner_rows(part, P)
    if part_sizes.size > P:
        raise ValueError(f"the partition has {part_sizes.size} parts but the world size is {P}: partition into "
                         f"num_parts={P}")
    ends = edge_label_index.cpu().numpy().reshape(-1).astype(np.int64)
    n_id = torch.from_numpy(np.flatnonzero(part == rank))
    plan, column = endpoint_plan(ends, part[ends], local_index[ends], n_id, part.size, part_sizes.tolist(), group)
    return plan, column.view(2, -1)


def endpoint_plan(ends: np.ndarray, owner: np.ndarray, row: np.ndarray, n_id: Tensor, num_nodes: int,
                  part_sizes: list[int], group: dist.ProcessGroup | None = None) -> tuple[RankPlan, Tensor]:
    """The exchange bringing the rows of the endpoints ``ends`` (global ids) this rank does not own.

    Args:
        ends: ``[k]`` global ids; ``owner[i]`` holds ``ends[i]`` at row ``row[i]`` of its ``z``.
        n_id: ``[num_owned]`` global ids of this rank's rows of ``z``.
        num_nodes, part_sizes: the graph's nodes and every rank's rows (recorded in the plan).

    Returns:
        ``(plan, column)``: the plan and the ``[k]`` row of every endpoint in ``[z | halo]``.
    """
    rank, P, N = group_rank(group), group_world_size(group), num_nodes
    remote = owner != rank
    key = owner[remote] * N + ends[remote]
    halo_key = np.unique(key)  # (owner, id) order
    halo_n_id, halo_owner = halo_key % N, halo_key // N
    at = np.searchsorted(halo_key, key)  # every remote endpoint's halo row
    halo_row = np.zeros(halo_key.size, dtype=np.int64)
    halo_row[at] = row[remote]
    column = row.copy()
    column[remote] = n_id.numel() + at

    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    recv_counts = np.bincount(halo_owner, minlength=P).tolist()
    # every owner gets the rows each rank asks for, in that rank's halo order: its send lists
    send_index, send_counts = exchange_ids(t(halo_row), recv_counts, group, "pair_plan")
    plan = RankPlan(rank=rank, world_size=P, num_nodes=N, n_id=n_id, halo_n_id=t(halo_n_id),
                    halo_owner=t(halo_owner), halo_remote_index=t(halo_row), send_index=send_index.clone(),
                    send_counts=list(send_counts), recv_counts=recv_counts, part_sizes=list(part_sizes))
    return plan, t(column)
