"""Sparsity-oblivious 1D SpMM: the CAGNET baseline that broadcasts whole block rows."""
from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from ..comm.collectives import broadcast_rows, reduce_rows
from ..comm.exchanger import HaloExchanger
from ..plan.halo_adj import HaloAdj, coo_to_csr, csr_mm, spmm, spmm_dtypes
from .base import SpMMAlgorithm
from .cost import CostModel, Prediction, RankVolumes, RowBytes

if TYPE_CHECKING:  # pragma: no cover
    from ..comm.grid import ProcessGrid


class _BlockBroadcastSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, algo: "Oblivious1D") -> Tensor:
        ctx.algo, ctx.x_dtype = algo, x.dtype
        plan, me = algo.adj.plan, algo.adj.plan.rank
        compute, result = spmm_dtypes(algo.value_dtype, x.dtype)
        out = x.new_zeros((plan.num_owned, x.size(1)), dtype=result)
        for j in algo.stage_ranks:  # stage j: rank j broadcasts H_j
            size = plan.part_sizes[j]
            buf = x.contiguous() if j == me else x.new_empty((size, x.size(1)))
            broadcast_rows(buf, j, algo.group)
            if algo.blocks[j] is not None:
                out += csr_mm(algo.block(j, compute), buf, result)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        algo = ctx.algo
        plan, me = algo.adj.plan, algo.adj.plan.rank
        grad_out = grad_out.contiguous()
        compute, x_dtype = spmm_dtypes(algo.value_dtype, ctx.x_dtype)[0], ctx.x_dtype
        grad_x = None
        for j in algo.stage_ranks:  # dH_j = sum_r A_rj^T dY_r, reduced on rank j
            size = plan.part_sizes[j]
            if algo.blocks[j] is not None:
                part = csr_mm(algo.block_t(j, compute), grad_out, x_dtype)
            else:
                part = grad_out.new_zeros((size, grad_out.size(1)), dtype=x_dtype)
            reduce_rows(part, j, algo.group)
            if j == me:
                grad_x = part
        if grad_x is None:  # 1.5D: this rank's block is multiplied in another column group
            grad_x = grad_out.new_zeros((plan.num_owned, grad_out.size(1)), dtype=x_dtype)
        return grad_x, None


class Oblivious1D(SpMMAlgorithm):
    r"""CAGNET's 1D algorithm: in stage :math:`j` rank :math:`j` broadcasts its whole block
    :math:`H_j`; every rank accumulates :math:`A_{rj} H_j` (P broadcasts and P SpMMs).

    Backward: :math:`\partial H_j = \sum_r A_{rj}^T \partial Y_r`, reduced onto rank
    :math:`j`, so it is exact for directed graphs.  Volume per SpMM: ``N (P - 1)``
    rows regardless of sparsity.  Kept to measure the sparsity-aware algorithm against.

    Args:
        adj (HaloAdj): this rank's (normalised) block row.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (not used by this 1D algorithm). (default: :obj:`None`)
    """
    name = "oblivious"
    auto_candidate = True
    differentiates_edge_weights = False

    def __init__(self, adj: HaloAdj, exchanger: HaloExchanger | None = None,
                 grid: Optional["ProcessGrid"] = None) -> None:
        super().__init__(adj, exchanger, grid)
        plan = adj.plan
        #: the block rows broadcast, in stage order (all of them in 1D; the grid column's stage blocks in 1.5D)
        self.stage_ranks: list[int] = (grid.stage_blocks() if grid is not None and self.replicated
                                       else list(range(plan.world_size)))
        row, col = adj.coo()
        owner, remote_col = plan.locate_columns(col)
        value = adj.values(torch.float64).detach()
        self.value_dtype = None if adj.value is None else adj.value.dtype  # of the result, spmm_dtypes
        self.blocks: list[tuple[Tensor, Tensor, Tensor, int] | None] = []
        for j, size in enumerate(plan.part_sizes):
            sel = owner == j  # A_rj, in the column numbering of rank j's rows
            self.blocks.append((row[sel], remote_col[sel], value[sel], size) if bool(sel.any()) else None)
        self._csr: dict[tuple[str, int, torch.dtype], Tensor] = {}

    def _coo(self, j: int) -> tuple[Tensor, Tensor, Tensor, int]:
        block = self.blocks[j]
        if block is None:
            raise ValueError(f"block A_{{r,{j}}} is empty (check blocks[{j}] before asking for it)")
        return block

    def block(self, j: int, dtype: torch.dtype) -> Tensor:
        key = ("A", j, dtype)
        if key not in self._csr:
            row, col, value, size = self._coo(j)
            self._csr[key] = coo_to_csr(row, col, value.to(dtype), (self.adj.num_owned, size))
        return self._csr[key]

    def block_t(self, j: int, dtype: torch.dtype) -> Tensor:
        key = ("At", j, dtype)
        if key not in self._csr:
            row, col, value, size = self._coo(j)
            self._csr[key] = coo_to_csr(col, row, value.to(dtype), (size, self.adj.num_owned))
        return self._csr[key]

    def __call__(self, x: Tensor) -> Tensor:
        if self.adj.plan.world_size == 1:  # nothing to broadcast: the same local kernel as "1d"
            return spmm(self.adj, x)
        return _BlockBroadcastSpMM.apply(x, self)

    @classmethod
    def predict(cls, volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
        return broadcast_prediction(volumes, model, RowBytes.of(row_bytes).exact)  # never compressed


def broadcast_prediction(volumes: RankVolumes, model: CostModel, row_bytes: int) -> Prediction:
    """One broadcast (forward) and one reduce (backward) per stage block, over the exchange group."""
    g, seconds, sent = volumes.num_block_rows, 0.0, 0
    if g == 1:
        return Prediction(0.0, 0)
    for k in volumes.stage_blocks:
        nbytes = int(volumes.block_rows[k]) * row_bytes
        seconds += 2 * model.broadcast(nbytes, g)
        # counted as in comm.collectives: the root sends its block to every peer; every
        # other rank sends its partial sum to the root
        sent += nbytes * (g - 1) if k == volumes.row else nbytes
    return Prediction(seconds, sent)
