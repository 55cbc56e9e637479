"""Sparsity-aware 1.5D SpMM (ICPP'24 Algorithm 2, §4.2)."""

import numpy as np
import torch
from torch import Tensor

from ..comm.collectives import ring_allreduce_nbytes, row_all_reduce
from ..comm.exchanger import HaloExchanger
from ..comm.grid import ProcessGrid
from ..plan.halo_adj import HaloAdj
from ..plan.homogeneous import RankPlan, restrict_counts
from .base import SpMMAlgorithm
from .cost import CostModel, Prediction, RankVolumes, RowBytes
from .sparse_1d import SparseAware1D, exchange_prediction


def restrict_to_blocks(adj: HaloAdj, blocks: list[int]) -> HaloAdj:
    """The part of a block row ``A_i`` whose columns lie in the block columns ``blocks``.

    The plan shrinks with it: halo rows are received only from the owners in
    ``blocks``, and rank ``i`` sends its rows only if ``i`` itself is one of
    ``blocks`` (every rank of a column group multiplies the same stage blocks).
    """
    plan, n = adj.plan, adj.num_owned
    in_stage = np.zeros(plan.world_size, dtype=bool)
    in_stage[blocks] = True
    keep_halo = torch.from_numpy(in_stage)[plan.halo_owner.cpu()].to(adj.device)
    owned_in_stage = bool(in_stage[plan.rank])
    # new halo column of every kept halo column (values at dropped ones are never read);
    # halos are ordered by owner, so the kept ones stay in order
    new_halo = torch.cumsum(keep_halo.long(), 0) - 1
    row, col = adj.coo()
    is_halo = col >= n
    keep = torch.where(is_halo, keep_halo[(col - n).clamp(min=0)] if adj.halo_size else is_halo,
                       torch.full_like(is_halo, owned_in_stage))
    new_col = col.clone()
    new_col[is_halo] = n + new_halo[col[is_halo] - n]
    send_counts, recv_counts = restrict_counts(plan.send_counts, plan.recv_counts, plan.rank, blocks)
    stage_plan = RankPlan(
        rank=plan.rank, world_size=plan.world_size, num_nodes=plan.num_nodes, n_id=plan.n_id,
        halo_n_id=plan.halo_n_id[keep_halo], halo_owner=plan.halo_owner[keep_halo],
        halo_remote_index=plan.halo_remote_index[keep_halo],
        send_index=plan.send_index if owned_in_stage else plan.send_index[:0],
        send_counts=send_counts, recv_counts=recv_counts, part_sizes=plan.part_sizes)
    value = None if adj.value is None else adj.value[keep]  # keeps learnable weights in the graph
    return HaloAdj.from_coo(row[keep], new_col[keep], value, stage_plan)


class SparseAware15D(SpMMAlgorithm):
    r"""1.5D SpMM on a :math:`(P/c) \times c` grid that moves only the rows it needs.

    Rank :math:`(i, j)` holds block row :math:`i` (replicated on the :math:`c` ranks of
    its grid row) and multiplies the :math:`P/c^2` block columns
    :math:`\mathcal S_j` = ``grid.stage_blocks()``:

    .. math::
        T_{ij} = \sum_{k \in \mathcal S_j} A_{ik} H_k[\mathrm{NnzCols}(A_{ik})], \qquad
        (A H)_i = \sum_{j=0}^{c-1} T_{ij}

    The rows :math:`H_k[\mathrm{NnzCols}(A_{ik})]` come from rank :math:`(k, j)` of the same
    column group; all stages are fused into one all-to-allv over the column group
    (the 1D exchange with a plan restricted to :math:`\mathcal S_j`), and the partial
    sums are all-reduced over the row group.  Backward: all-reduce of
    :math:`\partial (AH)_i` over the row group, then the reverse exchange, so it is
    exact for directed graphs.  Bytes per SpMM: the restricted halo volume plus a
    ring all-reduce of :math:`n_i f` over :math:`c` ranks.

    With ``staleness=1`` the column-group exchange is pipelined (the previous step's halo
    rows and gradients, :mod:`pyg_sparsecomm.comm.stale`); the row-group sums stay synchronous.

    Args:
        adj (HaloAdj): this rank's (normalised) block row of a partition into ``P / c`` parts.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (required). (default: :obj:`None`)
    """
    name = "1.5d"
    auto_candidate = True
    replicated = True
    #: the column-group halo exchange is compressed; the row-group all-reduce of partial sums stays
    #: exact (it sums, and rounding each addend would compound over the c ranks)
    supports_precision = True
    supports_staleness = True  # stale halos of the column group; row sums stay synchronous
    grid: ProcessGrid  # SpMMAlgorithm.__init__ refuses a replicated algorithm without one

    def __init__(self, adj: HaloAdj, exchanger: HaloExchanger | None = None,
                 grid: ProcessGrid | None = None) -> None:
        super().__init__(adj, exchanger, grid)
        # the stage's restricted plan, over the column group this exchanger was rebound to
        self.partial = SparseAware1D(restrict_to_blocks(adj, self.grid.stage_blocks()), self.exchanger)

    def __call__(self, x: Tensor) -> Tensor:
        return row_all_reduce(self.partial(x), self.grid.row_group)

    @classmethod
    def predict(cls, volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
        return exchange_prediction(volumes, model, row_bytes) + all_reduce_prediction(volumes, model, row_bytes)


def all_reduce_prediction(volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
    """The row-group all-reduce of the partial block row, forward and backward (exact rows)."""
    nbytes, c = volumes.num_owned * RowBytes.of(row_bytes).exact, volumes.replication
    return Prediction(2 * model.all_reduce(nbytes, c), 2 * ring_allreduce_nbytes(nbytes, c))
