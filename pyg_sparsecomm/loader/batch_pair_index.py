r"""The pair indices of a link batch: PyG's batch positions, where a target may live on another rank.

PyG's ``LinkNeighborLoader`` gives a batch's pairs as positions in the batch's rows:
``batch.edge_label_index`` (binary; ``batch[edge_type].edge_label_index`` on ``HeteroData``) or
``batch.src_index``, ``batch.dst_pos_index`` and ``batch.dst_neg_index`` (triplet; on ``HeteroData``
``batch[src].src_index``, ``batch[dst].dst_pos_index``, ...), scored with ``z[edge_label_index[0]]``
and ``z[edge_label_index[1]]`` (``z_dict[src]`` and ``z_dict[dst]`` on ``HeteroData``).  In a distributed
batch a rank holds the pairs whose source it owns, so a source is one of its own rows and its
position is a plain tensor; a target may be another rank's row.  A :class:`TargetIndex` then indexes
``z`` (this rank's batch rows of the targets' type) through the batch's sparsity-aware exchange:
``z[index]`` is every target's row, those owned elsewhere brought from their owners (each once
per rank; differentiable: their gradients travel back).  The indices of one batch and end type share
one exchange: the first to index a ``z`` brings the rows, the others reuse them while they index the
same, unmodified ``z``.  Indexing is a collective: every rank indexes, also one holding no pairs.
"""
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ..link.pair_exchange import rows_with_halo
from ..link.two_row_index import SharedEndRows, TwoRowIndex
from ..plan.homogeneous import RankPlan


class TargetRows:
    r""":math:`[z_{dst} \,\|\, z_{dst, halo}]` of one batch's targets: one exchange shared by its views.

    Args:
        plan (RankPlan): the exchange bringing the targets this rank does not own (over its batch rows).
        node_type (str or None): the targets' node type (:obj:`None` on a homogeneous graph).
        num_views (int): the :class:`TargetIndex` objects reading it.
        group (torch.distributed.ProcessGroup, optional): the process group. (default: :obj:`None`)
    """

    def __init__(self, plan: RankPlan, node_type: str | None, num_views: int,
                 group: dist.ProcessGroup | None = None) -> None:
        self.plan, self.node_type, self.num_views, self.group = plan, node_type, num_views, group
        self._shared = SharedEndRows(num_views)

    def rows(self, z: Tensor, view: int) -> Tensor:
        """``[z | halo]`` for ``view``: exchanged unless another view of the same ``z`` did (a collective)."""
        if z.size(0) != self.plan.num_owned:
            if self.node_type is None:
                raise ValueError(f"a link batch's target index: z has {z.size(0)} rows but this rank's batch holds "
                                 f"{self.plan.num_owned} rows: index the encoder's output on the batch, "
                                 f"z = model(batch.x, batch.edge_index)")
            raise ValueError(f"a link batch's target index: z of node type {self.node_type!r} has {z.size(0)} rows "
                             f"but this rank's batch holds {self.plan.num_owned} {self.node_type!r} rows: index "
                             f"the encoder's output on the batch, z_dict = model(batch.x_dict, batch.adj_dict)")
        return self._shared.rows(z, view, self._exchange)

    def _exchange(self, z: Tensor) -> Tensor:
        if self.plan.n_id.device != z.device:
            self.plan = self.plan.to(z.device)
        return rows_with_halo(z, self.plan, self.group)


class TargetIndex:
    """Positions of a batch's targets in ``z`` (``z_dict[dst]`` on ``HeteroData``): ``z[index]`` (see the module doc).

    Args:
        rows (TargetRows): the exchange it shares.
        view (int): its number among the views of ``rows``.
        column (torch.Tensor): the row of every target in :math:`[z_{dst} \\,\\|\\, z_{dst, halo}]`
            (any shape: ``z_dst[index]`` has its shape plus the embedding's).
        global_ids (torch.Tensor): the targets' global ids, shaped as ``column``.
    """

    def __init__(self, rows: TargetRows, view: int, column: Tensor, global_ids: Tensor) -> None:
        self.target_rows, self.view, self.column, self.global_ids = rows, view, column, global_ids

    def gather(self, z: Tensor) -> Tensor:
        """Every target's row of ``z`` (this rank's batch rows of the targets' type); a collective.

        Args:
            z (torch.Tensor): the encoder's output on the batch (of the targets' type).
        """
        rows = self.target_rows.rows(z, self.view)
        return rows[self.column.to(z.device)]

    def size(self, dim: int | None = None) -> Any:
        return self.column.size() if dim is None else self.column.size(dim)

    @property
    def shape(self) -> torch.Size:
        return self.column.shape

    def dim(self) -> int:
        return self.column.dim()

    def numel(self) -> int:
        return self.column.numel()

    def __len__(self) -> int:
        return self.column.size(0)

    def to(self, *args: Any, **kwargs: Any) -> "TargetIndex":
        """Itself: the rows come on ``z``'s device."""
        return self

    def cpu(self) -> "TargetIndex":
        return self

    def __repr__(self) -> str:
        of = "" if self.target_rows.node_type is None else f"{self.target_rows.node_type!r} "
        return f"TargetIndex({of}targets, shape={list(self.column.shape)})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is Tensor.__getitem__ and len(args) == 2 and isinstance(args[1], TargetIndex):
            return args[1].gather(args[0])
        raise TypeError(_refusal(f"torch.{getattr(func, '__name__', func)}"))


class BatchPairIndex(TwoRowIndex):
    """A link batch's ``edge_label_index``: ``[0]`` the sources' batch rows (a tensor),
    ``[1]`` the targets' :class:`TargetIndex`; ``global_ids`` the ``[2, m]`` pairs in global ids.

    Args:
        source (torch.Tensor): ``[m]`` every pair's source row in this rank's batch rows (of ``src``).
        target (TargetIndex): every pair's target.
        global_ids (torch.Tensor): ``[2, m]`` the pairs' global ids.
    """

    def __init__(self, source: Tensor, target: TargetIndex, global_ids: Tensor) -> None:
        self.source, self.target, self.global_ids = source, target, global_ids

    # tensor habits (TwoRowIndex): [0] the sources' rows, [1] the targets' index, row, col = ..., size()
    def _end_of(self, end: int) -> Any:
        return self.source if end == 0 else self.target

    def _refusal_of(self, what: str) -> str:
        return _refusal(what)

    def __repr__(self) -> str:
        return f"BatchPairIndex(pairs={self.global_ids.size(1)} held by this rank)"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise TypeError(_refusal(f"torch.{getattr(func, '__name__', func)}"))


def _refusal(what: str) -> str:
    return (f"{what} on a distributed link batch's pair index: its targets may be rows of other ranks; it "
            f"supports z[edge_label_index[0]], z[edge_label_index[1]] (z_dict[src], z_dict[dst] on HeteroData), "
            f"z[src_index], z[dst_pos_index], z[dst_neg_index], size(); the pairs' global ids are .global_ids")
