"""Sparsity-aware 1D SpMM with the halo exchange overlapped by the local SpMM (VLDB'23 Alg. 1-2)."""
from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from ..comm.counters import comm_counter
from ..comm.exchanger import HaloExchanger
from ..comm.halo import encode_together, start_all_to_all_rows, start_p2p_rows
from ..comm.quantize import decode_rows
from ..comm.stale import stale_halo_exchange
from ..plan.halo_adj import HaloAdj, coo_to_csr, csr_mm, spmm, spmm_dtypes
from .base import SpMMAlgorithm
from .cost import CostModel, Prediction, RankVolumes, RowBytes
from .sparse_1d import exchange_prediction

if TYPE_CHECKING:  # pragma: no cover
    from ..comm.grid import ProcessGrid


class _OverlappedSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, algo: "Overlap1D") -> Tensor:
        ctx.algo, ctx.x_dtype = algo, x.dtype
        plan, precision = algo.adj.plan, algo.options.precision
        compute, result = spmm_dtypes(algo.value_dtype, x.dtype)
        send = encode_together(x, precision, algo.group, plan.send_index)
        with comm_counter().timed(x.device):  # posting is communication time too (p2p posts one op per peer)
            recv, work = algo.start_exchange(send, plan.send_counts, plan.recv_counts, algo.group, "halo")
        out = csr_mm(algo.block("own", compute), x, result)  # while the halo rows travel
        with comm_counter().timed(x.device):
            work.wait()
        return out + csr_mm(algo.block("halo", compute), decode_rows(recv, x, precision), result)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        algo, grad_out = ctx.algo, grad_out.contiguous()
        plan, precision = algo.adj.plan, algo.options.grad_precision
        compute, x_dtype = spmm_dtypes(algo.value_dtype, ctx.x_dtype)[0], ctx.x_dtype
        grad_halo = csr_mm(algo.block("halo_t", compute), grad_out, x_dtype)
        with comm_counter().timed(grad_out.device):
            back, work = algo.start_exchange(encode_together(grad_halo, precision, algo.group), plan.recv_counts,
                                             plan.send_counts, algo.group, "halo_grad")
        grad_x = csr_mm(algo.block("own_t", compute), grad_out, x_dtype)  # overlapped
        with comm_counter().timed(grad_out.device):
            work.wait()
        return grad_x.index_add_(0, plan.send_index, decode_rows(back, grad_halo, precision)), None


class Overlap1D(SpMMAlgorithm):
    r"""The sparsity-aware 1D exchange, with communication hidden behind computation.

    The block row is split by columns, :math:`A_r = [A_r^{own} \; A_r^{halo}]`.
    Forward: start the non-blocking all-to-allv of the halo rows, compute
    :math:`A_r^{own} H_r`, wait, add :math:`A_r^{halo} H_{halo}`.  Backward: compute
    :math:`(A_r^{halo})^T G_r` first and send it back to the owners non-blocking, then
    :math:`(A_r^{own})^T G_r`, wait, and accumulate.  Same bytes as ``"1d"``; the
    counter's time is posting the exchange plus the wait, i.e. the communication that
    was *not* hidden.

    With ``staleness=1`` (training calls) the halo rows are the previous step's, already at
    hand: the block row multiplies ``[x | stale halo]`` at once, and this step's rows start
    (the same way: all-to-allv, or point-to-point) to arrive while the rest of the step runs
    (:mod:`pyg_sparsecomm.comm.stale`).

    Args:
        adj (HaloAdj): this rank's (normalised) block row.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (not used by this 1D algorithm). (default: :obj:`None`)
    """
    name = "1d_overlap"
    differentiates_edge_weights = False
    supports_precision = True  # rows are encoded before the exchange starts, decoded after the wait
    supports_staleness = True
    #: how the exchange is started: one non-blocking all-to-allv with split sizes
    start_exchange = staticmethod(start_all_to_all_rows)

    def __init__(self, adj: HaloAdj, exchanger: HaloExchanger | None = None,
                 grid: Optional["ProcessGrid"] = None) -> None:
        super().__init__(adj, exchanger, grid)
        row, col = adj.coo()
        n = adj.num_owned
        own = col < n
        value = adj.values(torch.float64).detach()
        self.value_dtype = None if adj.value is None else adj.value.dtype  # of the result, spmm_dtypes
        self._coo = {"own": (row[own], col[own], value[own], (n, n)),
                     "halo": (row[~own], col[~own] - n, value[~own], (n, adj.halo_size))}
        self._csr: dict[tuple[str, torch.dtype], Tensor] = {}

    def block(self, kind: str, dtype: torch.dtype) -> Tensor:
        """``"own"``/``"halo"`` column blocks of the block row, ``"_t"``: transposed (cached)."""
        key = (kind, dtype)
        if key not in self._csr:
            row, col, value, (rows, cols) = self._coo[kind.removesuffix("_t")]
            if kind.endswith("_t"):
                row, col, rows, cols = col, row, cols, rows
            self._csr[key] = coo_to_csr(row, col, value.to(dtype), (rows, cols))
        return self._csr[key]

    def __call__(self, x: Tensor) -> Tensor:
        if self.adj.plan.world_size == 1:
            return spmm(self.adj, x)
        if self.options.staleness and self.exchanger.training:
            # the previous step's halo rows are at hand: nothing to overlap within this step,
            # this step's rows travel (started the same way) while the rest of the step computes
            halo = stale_halo_exchange(x, self.exchanger, "x", self.start_exchange)
            return spmm(self.adj, torch.cat([x, halo], dim=0))
        return _OverlappedSpMM.apply(x, self)

    @classmethod
    def predict(cls, volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
        """The two exchanges of ``"1d"``: the same bytes; the time ignores the overlap (an upper bound)."""
        return exchange_prediction(volumes, model, row_bytes)


class Overlap1DP2P(Overlap1D):
    """``"1d_overlap"`` with the exchange posted as ``batch_isend_irecv`` to the peers that have
    rows only (no message, not even an empty one, to the others).

    Args:
        adj (HaloAdj): this rank's (normalised) block row.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (not used by this 1D algorithm). (default: :obj:`None`)
    """
    name = "1d_overlap_p2p"
    start_exchange = staticmethod(start_p2p_rows)
