"""Sparsity-oblivious 1.5D SpMM: CAGNET's replicated algorithm (ICPP'24 Algorithm 2 without NnzCols)."""
from torch import Tensor

from ..comm.collectives import row_all_reduce
from ..comm.grid import ProcessGrid
from .cost import CostModel, Prediction, RankVolumes, RowBytes
from .oblivious_1d import Oblivious1D, broadcast_prediction
from .sparse_15d import all_reduce_prediction


class Oblivious15D(Oblivious1D):
    r"""1.5D with whole block rows: in stage :math:`k \in \mathcal S_j` rank :math:`(k, j)`
    broadcasts all of :math:`H_k` to its column group; every rank accumulates
    :math:`A_{ik} H_k`; the row group all-reduces the partial sums.

    .. math::
        (A H)_i = \sum_{j=0}^{c-1} \sum_{k \in \mathcal S_j} A_{ik} H_k

    Backward: all-reduce of the output gradient over the row group, then for each
    stage the partial gradients :math:`A_{ik}^T \partial T_{ij}` are reduced onto rank
    :math:`(k, j)`.  Per SpMM each rank receives :math:`P/c^2` whole block rows
    instead of :math:`P` (1D oblivious): the communication-avoiding baseline.

    Args:
        adj (HaloAdj): this rank's (normalised) block row of a partition into ``P / c`` parts.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (required). (default: :obj:`None`)
    """
    name = "1.5d_oblivious"
    auto_candidate = True
    replicated = True
    grid: ProcessGrid  # SpMMAlgorithm.__init__ refuses a replicated algorithm without one

    def __call__(self, x: Tensor) -> Tensor:
        return row_all_reduce(super().__call__(x), self.grid.row_group)

    @classmethod
    def predict(cls, volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
        exact = RowBytes.of(row_bytes).exact  # never compressed
        return broadcast_prediction(volumes, model, exact) + all_reduce_prediction(volumes, model, exact)
