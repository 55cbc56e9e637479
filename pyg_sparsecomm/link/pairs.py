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
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.group import raise_together
from ..comm.group import rank as group_rank
from ..graph.validate import check_edge_index
from ..plan.homogeneous import RankPlan
from ..training.whole_graph import global_count
from .hetero_pairs import check_edge_label, distribute_hetero_pairs, local_hetero_pairs
from .pair_exchange import endpoint_plan, pair_plan, rows_with_halo
from .partition_vector import partition_vector
from .same_pairs import check_same_pairs


@dataclass
class DistributedPairs:
    r"""The node pairs one rank holds, ready to be scored from its shard's embeddings.

    Attributes:
        edge_label_index (torch.Tensor): ``[2, m]`` global ids of the (source, target) of every pair
            this rank holds.
        edge_label (torch.Tensor or None): ``[m]`` their labels (``None`` if none were given).
        pair_id (torch.Tensor): ``[m]`` position of every pair in the list it was taken from (the
            global ``edge_label_index``; ``-1`` for pairs built from a rank's own list).
        index (torch.Tensor): ``[2, m]`` rows of :math:`[z \,\|\, z_{halo}]` (this rank's rows,
            then the exchanged ones) of every pair's source and target.
        plan (RankPlan): the exchange bringing the halo rows.
        num_pairs (int): pairs held by all ranks together.
        group (torch.distributed.ProcessGroup, optional): the exchange's process group.
            (default: :obj:`None`, the default group)

    Shapes:
        - **edge_label_index:** :math:`(2, m)`, **edge_label:** :math:`(m, *)`, **pair_id:** :math:`(m)`,
          **index:** :math:`(2, m)`, with :math:`m` the pairs this rank holds
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
        rows = self.rows(z)
        index = self.index.to(z.device)
        return rows.index_select(0, index[0]), rows.index_select(0, index[1])

    def rows(self, z: Tensor) -> Tensor:
        r""":math:`[z \,\|\, z_{halo}]`: this rank's rows, then the exchanged ones, which
        :attr:`index` addresses (a collective, as :meth:`gather`)."""
        if z.size(0) != self.plan.num_owned:
            raise ValueError(f"the pairs' gather: z has {z.size(0)} rows but this rank owns {self.plan.num_owned} "
                             f"nodes: pass the encoder's output on this rank's shard, model(local.x, local.adj)")
        return rows_with_halo(z, self.plan, self.group)

    def predicted_bytes(self, num_columns: int, element_size: int = 4) -> dict:
        """Bytes this rank sends and receives in one :meth:`gather` of ``num_columns`` wide rows
        (the backward moves as many the other way)."""
        return self.plan.predicted_bytes(num_columns, element_size)

    def to(self, device) -> "DistributedPairs":
        return replace(self, edge_label_index=self.edge_label_index.to(device), pair_id=self.pair_id.to(device),
                       edge_label=None if self.edge_label is None else self.edge_label.to(device),
                       index=self.index.to(device), plan=self.plan.to(device))


def distribute_pairs(edge_label_index: Tensor, edge_label: Tensor | None = None, part=None,
                     group: dist.ProcessGroup | None = None, edge_type: tuple[str, str, str] | None = None
                     ) -> Any:
    r"""This rank's share of the whole graph's supervision pairs: those whose *source* it owns.

    Every rank passes the same global ``edge_label_index`` (e.g. from PyG's ``RandomLinkSplit`` run
    on the whole graph); rank :math:`r` keeps pair :math:`k` iff :math:`\mathrm{part}(s_k) = r`, so
    every pair is scored exactly once over the ranks.  A collective (the plan's two exchanges, and
    one small all-reduce checking that every rank passed the same pairs).

    Args:
        edge_label_index (torch.Tensor): ``[2, num_pairs]`` global (source, target) ids.
        edge_label (torch.Tensor, optional): ``[num_pairs]`` labels (or anything per pair).
            (default: :obj:`None`)
        part (torch.Tensor or torch_geometric.data.Data, optional): the partition: the ``[N]`` part of
            every node (``data.part``), the partitioned graph (a ``Data`` carrying ``part``) or this rank's
            shard (then gathered from every rank's ``n_id``). (default: :obj:`None`, which raises: it is
            required)
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.
            (default: :obj:`None`, the default group)
        edge_type (tuple[str, str, str], optional): the pairs' relation ``(src, rel, dst)`` of a
            heterogeneous graph (then ``part`` is its partitioned ``HeteroData``, its shard or the
            ``{node type: part}``; see :mod:`~pyg_sparsecomm.link.hetero_pairs`). (default: :obj:`None`)

    Returns:
        DistributedPairs: the pairs, their labels and global positions, and their exchange plan
        (a :class:`~pyg_sparsecomm.link.hetero_pairs.HeteroPairs` for an ``edge_type``).

    Shapes:
        - **input:** edge_label_index :math:`(2, M)`, edge_label :math:`(M, *)` (the whole graph's pairs)
        - **output:** :class:`DistributedPairs` of the :math:`m \le M` pairs whose source this rank owns
    """
    if edge_type is not None:
        return distribute_hetero_pairs(edge_label_index, edge_type, edge_label, part, group)
    part_np = partition_vector(part, group)
    def check() -> None:  # bad pairs on one rank raise on every rank
        check_edge_index(edge_label_index, part_np.size, "edge_label_index")
        check_edge_label(edge_label, edge_label_index.size(1))
    raise_together(check, "distribute_pairs", group, flag_first=True)
    m = edge_label_index.size(1)
    check_same_pairs(edge_label_index, "distribute_pairs", group)
    rank = group_rank(group)
    mine = torch.from_numpy(np.flatnonzero(part_np[edge_label_index[0].cpu().numpy()] == rank))
    pairs = local_pairs(edge_label_index[:, mine.to(edge_label_index.device)], part_np,
                        None if edge_label is None else edge_label[mine.to(edge_label.device)], group)
    return replace(pairs, pair_id=mine, num_pairs=m)


def local_pairs(edge_label_index: Tensor, part, edge_label: Tensor | None = None,
                group: dist.ProcessGroup | None = None, edge_type: tuple[str, str, str] | None = None) -> Any:
    """:class:`DistributedPairs` of the pairs this rank holds, whatever their endpoints (e.g. the
    negatives it drew, :func:`~pyg_sparsecomm.link.negative_sampling`).  A collective: every rank
    calls it with its own pairs (possibly none).  With ``edge_type`` (and ``part`` as for
    :func:`distribute_pairs`), a :class:`~pyg_sparsecomm.link.hetero_pairs.HeteroPairs`.

    Args:
        edge_label_index (torch.Tensor): ``[2, m]`` global (source, target) ids of this rank's pairs.
        part (torch.Tensor or torch_geometric.data.Data): the partition, as for :func:`distribute_pairs`.
        edge_label (torch.Tensor, optional): ``[m]`` labels (or anything per pair). (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.
            (default: :obj:`None`, the default group)
        edge_type (tuple[str, str, str], optional): the pairs' relation ``(src, rel, dst)`` of a
            heterogeneous graph. (default: :obj:`None`)

    Shapes:
        - **input:** edge_label_index :math:`(2, m)`, edge_label :math:`(m, *)` (this rank's pairs)
        - **output:** :class:`DistributedPairs` of the same :math:`m` pairs (``pair_id`` all ``-1``)
    """
    if edge_type is not None:
        return local_hetero_pairs(edge_label_index, edge_type, part, edge_label, group)
    part_np = partition_vector(part, group)
    # this rank's own pairs: a bad one raises on every rank (its peers would wait in the plan's exchange)
    raise_together(lambda: check_edge_index(edge_label_index, part_np.size, "edge_label_index"), "local_pairs", group,
                   flag_first=True)
    plan, index = pair_plan(edge_label_index, part_np, group)
    num_pairs = global_count(int(edge_label_index.size(1)), group)  # a host integer (any backend)
    return DistributedPairs(edge_label_index, edge_label, torch.full((edge_label_index.size(1),), -1),
                            index, plan, num_pairs, group)


__all__ = ["DistributedPairs", "distribute_pairs", "local_pairs", "pair_plan", "endpoint_plan"]  # the last two:
# the plan's builders, in .pair_exchange, where the link loader and older code import them from
