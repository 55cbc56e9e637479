"""The exchange plan of node pairs: which endpoint rows a rank needs from which owner, and the
rows themselves (:func:`rows_with_halo`); see :mod:`~pyg_sparsecomm.link.pairs`."""
import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..comm.halo import halo_exchange
from ..comm.ids import exchange_ids
from ..plan.homogeneous import RankPlan, owner_rows


def rows_with_halo(z: Tensor, plan: RankPlan, group: dist.ProcessGroup | None = None) -> Tensor:
    """``[z | halo]``: ``z``'s rows, then the rows ``plan`` brings from their owners (differentiable)."""
    halo = halo_exchange(z, plan, group)
    return torch.cat([z, halo])  # also when empty: the halo's backward is a collective every rank joins


def pair_plan(edge_label_index: Tensor, part: np.ndarray, group: dist.ProcessGroup | None = None
              ) -> tuple[RankPlan, Tensor]:
    r"""The exchange plan of the pairs this rank holds, and every endpoint's row.

    Rank :math:`r`'s halo is the set of endpoints it does not own, ordered by (owner, global id);
    each owner learns which of its rows :math:`r` needs from one exchange of counts and one of
    rows (:func:`~pyg_sparsecomm.comm.ids.exchange_ids`, counted as ``"pair_plan"``).

    Args:
        edge_label_index (torch.Tensor): ``[2, m]`` global ids of this rank's pairs.
        part (numpy.ndarray): ``[N]`` owner of every node.
        group (torch.distributed.ProcessGroup, optional): the process group. (default: :obj:`None`, the
            default group)

    Returns:
        ``(plan, index)``: the :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` and the ``[2, m]`` rows of
        ``[owned | halo]`` of every pair's source and target.

    Shapes:
        - **input:** edge_label_index :math:`(2, m)`, part :math:`(N)`
        - **output:** index :math:`(2, m)`
    """
    plan, column = ends_plan(edge_label_index.cpu().numpy().reshape(-1).astype(np.int64), part, group)
    return plan, column.view(2, -1)


def ends_plan(ends: np.ndarray, part: np.ndarray, group: dist.ProcessGroup | None = None
              ) -> tuple[RankPlan, Tensor]:
    """The exchange bringing the rows of the endpoints ``ends`` (ids of the node space ``part``
    partitions) this rank does not own, and every endpoint's row of ``[z | halo]``."""
    rank, P = group_rank(group), group_world_size(group)
    part_sizes, local_index = owner_rows(part, P)
    if part_sizes.size > P:
        raise ValueError(f"the partition has {part_sizes.size} parts but the world size is {P}: partition into "
                         f"num_parts={P}")
    n_id = torch.from_numpy(np.flatnonzero(part == rank))
    return endpoint_plan(ends, part[ends], local_index[ends], n_id, part.size, part_sizes.tolist(), group)


def endpoint_plan(ends: np.ndarray, owner: np.ndarray, row: np.ndarray, n_id: Tensor, num_nodes: int,
                  part_sizes: list[int], group: dist.ProcessGroup | None = None) -> tuple[RankPlan, Tensor]:
    """The exchange bringing the rows of the endpoints ``ends`` (global ids) this rank does not own.

    Args:
        ends (numpy.ndarray): ``[k]`` global ids; ``owner[i]`` holds ``ends[i]`` at row ``row[i]`` of its
            ``z``.
        owner (numpy.ndarray): ``[k]`` the rank owning every endpoint.
        row (numpy.ndarray): ``[k]`` every endpoint's row of its owner's ``z``.
        n_id (torch.Tensor): ``[num_owned]`` global ids of this rank's rows of ``z``.
        num_nodes (int): the graph's nodes (recorded in the plan).
        part_sizes (list[int]): every rank's rows (recorded in the plan).
        group (torch.distributed.ProcessGroup, optional): the process group. (default: :obj:`None`, the
            default group)

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
