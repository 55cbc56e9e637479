"""Sparsity-aware 1D SpMM (ICPP'24 Algorithm 1)."""
import torch
from torch import Tensor

from ..plan.halo_adj import spmm
from .base import SpMMAlgorithm
from .cost import CostModel, Prediction, RankVolumes, RowBytes


class SparseAware1D(SpMMAlgorithm):
    r"""One all-to-allv brings exactly the rows ``H[NnzCols(r, s)]`` from every peer ``s``.

    .. math::
        (A H)_r = A_r \begin{bmatrix} H_r \\ H[\mathrm{halo}_r] \end{bmatrix}

    computed as one compact CSR SpMM over ``[owned | halo]`` columns.  Volume
    per SpMM: the partition's connectivity-1 metric.  Backward: the reverse
    exchange of the halo gradients (see :mod:`pyg_sparsecomm.comm.halo`).

    Args:
        adj (HaloAdj): this rank's (normalised) block row.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (not used by this 1D algorithm). (default: :obj:`None`)
    """
    name = "1d"
    auto_candidate = True
    supports_precision = True
    supports_staleness = True
    multiplies_given_halo = True

    def __call__(self, x: Tensor) -> Tensor:
        return self.multiply(x, self.exchanger.halo_of(x))

    def multiply(self, x: Tensor, halo: Tensor) -> Tensor:
        """The block row times ``[x | halo]``, given halo rows already fetched (or reused)."""
        # Always concatenate, even an empty halo: the exchange must stay in the autograd
        # graph so that every rank joins the backward all-to-all its peers are waiting in.
        return spmm(self.adj, torch.cat([x, halo], dim=0))

    @classmethod
    def predict(cls, volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
        """One all-to-allv forward and its reverse backward, over the rank's exchange group."""
        return exchange_prediction(volumes, model, row_bytes)


def exchange_prediction(volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
    """The halo all-to-allv and its reverse over the ``P / c`` ranks of an exchange group; with
    compressed halos (:class:`~pyg_sparsecomm.algorithms.cost.RowBytes`) each direction in its own row size.
    All of it is ``pipelined``: ``staleness=1`` posts both exchanges at one step and waits at the next."""
    if isinstance(row_bytes, int):
        sent, received = int(volumes.send_rows.sum()) * row_bytes, int(volumes.recv_rows.sum()) * row_bytes
        seconds = 2 * model.all_to_all(sent, received, volumes.num_block_rows)
        # the backward sends what the forward received
        return Prediction(seconds, sent + received, pipelined=seconds)
    send_rows, recv_rows = int(volumes.send_rows.sum()), int(volumes.recv_rows.sum())
    forward, backward = row_bytes.forward, row_bytes.backward
    seconds = model.all_to_all(send_rows * forward, recv_rows * forward, volumes.num_block_rows) + \
        model.all_to_all(recv_rows * backward, send_rows * backward, volumes.num_block_rows)
    return Prediction(seconds, send_rows * forward + recv_rows * backward, pipelined=seconds)
