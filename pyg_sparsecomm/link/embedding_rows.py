r"""The rows of a node embedding table a rank owns: global ids to its local rows, and the union over
the ranks of node ids named by any of them.

A model whose input is an embedding of every node (PyG's ``LightGCN``: ``Embedding(num_nodes, d)``)
keeps, on a shard, only the rows of the nodes its rank owns (:attr:`EmbeddingRows.n_id`, the
shard's local order), so the table costs :math:`N_r\, d` per rank instead of :math:`N d`.
:meth:`EmbeddingRows.owned_rows` finds, for global node ids, the local rows of those this rank owns:
a term over *distinct* nodes (the :math:`\lambda \lVert x^{(0)}_{V} \rVert^2` of a BPR loss) is then
the sum over ranks of each rank's owned rows, each node counted once, by its owner.
"""
import zlib

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.group import host_all_gather, host_all_reduce, raise_together
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..comm.halo import all_to_all_rows
from ..graph.sorted_lookup import lookup_sorted
from .partition_vector import gathered_partition


class EmbeddingRows:
    r"""The global ids of a rank's rows of a node table, and where a global id lives.

    Args:
        n_id (torch.Tensor): ``[N_r]`` global ids of the owned rows, in local order (a shard's
            ``n_id``, its plan's ``n_id``).
        num_nodes (int): :math:`N`, the nodes of the whole graph.
        group (torch.distributed.ProcessGroup, optional): the ranks the table is sharded over.
            (default: :obj:`None`)
    """

    def __init__(self, n_id: Tensor, num_nodes: int, group: dist.ProcessGroup | None = None) -> None:
        self.n_id, self.num_nodes, self.group = n_id.detach().cpu().long(), int(num_nodes), group
        self.sorted_ids, self.order = self.n_id.sort()
        self._part: np.ndarray | None = None

    @property
    def part(self) -> np.ndarray:
        """``[N]`` owner of every node, gathered from every rank's ``n_id`` at first use (a collective)."""
        if self._part is None:
            self._part = gathered_partition(self.n_id, self.num_nodes, self.group)
        return self._part

    def matches(self, n_id: Tensor) -> bool:
        """Whether ``n_id`` names the same rows in the same order."""
        return n_id is self.n_id or torch.equal(n_id.detach().cpu().long(), self.n_id)

    def local_rows(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(found, rows)``: which of the global ``ids`` this rank owns (a bool mask) and, for those,
        their local rows."""
        ids = ids.detach().cpu().long()
        if not self.n_id.numel():
            return torch.zeros(ids.numel(), dtype=torch.bool), ids[:0]
        at, found = lookup_sorted(self.sorted_ids, ids)
        return found, self.order[at[found]]

    def owned_rows(self, node_id: Tensor, kind: str = "node_ids") -> Tensor:
        r"""The local rows of the distinct nodes of :math:`\bigcup_r` ``node_id``:sub:`r` that this
        rank owns, ascending by global id (a collective).

        When every rank passes the same ids (e.g. ``edge_label_index.unique()`` of a global pair
        list), each keeps its own: one host all-reduce of four integers. Otherwise every id travels
        to its owner once per rank naming it (one all-to-all, counted as ``kind``).

        Args:
            node_id (torch.Tensor): global node ids named by this rank (repeats allowed).
            kind (str, optional): the all-to-all's kind in :func:`~pyg_sparsecomm.comm_counter`.
                (default: :obj:`"node_ids"`)
        """
        ids = node_id.detach().cpu().long().reshape(-1).unique()
        raise_together(lambda: self._check_ids(node_id, ids), "node_id", self.group, flag_first=True)  # may differ
        if group_world_size(self.group) > 1 and not same_everywhere(ids, self.group):
            ids = self._at_owners(ids, kind)
        return self.local_rows(ids)[1]

    def _check_ids(self, node_id: Tensor, ids: Tensor) -> None:
        if node_id.is_floating_point() or node_id.dtype == torch.bool:
            raise ValueError(f"node_id must hold integer global node ids, got {node_id.dtype}: pass e.g. "
                             f"edge_label_index.unique()")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"node_id names node {bad} of a graph of {self.num_nodes} nodes: pass global node ids "
                             f"in 0..{self.num_nodes - 1}")

    def _at_owners(self, ids: Tensor, kind: str) -> Tensor:
        """The distinct ids any rank named that this rank owns: each rank sends its ids to their owners."""
        P, me = group_world_size(self.group), group_rank(self.group)
        owner = torch.from_numpy(self.part[ids.numpy()])
        by_owner = owner.argsort(stable=True)
        send_counts = torch.bincount(owner, minlength=P).tolist()
        counts = host_all_gather(send_counts, self.group)
        recv_counts = [counts[q][me] for q in range(P)]
        received = all_to_all_rows(ids[by_owner], send_counts, recv_counts, self.group, kind)
        return received.cpu().unique()


def same_everywhere(ids: Tensor, group: dist.ProcessGroup | None = None) -> bool:
    """Whether every rank holds the same ``ids`` (their count and CRC-32 of their bytes, compared in one host
    all-reduce; a collective).

    Args:
        ids (torch.Tensor): this rank's tensor (any dtype; copied to the host).
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: all)
    """
    code, count = zlib.crc32(ids.detach().cpu().contiguous().numpy().tobytes()), ids.numel()
    largest, minus_smallest, most, minus_fewest = host_all_reduce([code, -code, count, -count], dist.ReduceOp.MAX,
                                                                  group)
    return largest == -minus_smallest and most == -minus_fewest
