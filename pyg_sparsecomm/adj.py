"""``HaloAdj``: a rank's block row of the adjacency, over ``[owned | halo]`` columns.

Row ``i`` is the owned node ``n_id[i]``; column ``c < num_owned`` is owned row
``c``, column ``num_owned + k`` is halo node ``plan.halo_n_id[k]``.  Stored as
CSR (``rowptr``, ``col``, optional ``value``) together with the
:class:`~pyg_sparsecomm.plan.RankPlan` that fills the halo columns, so one
compact SpMM over local and halo columns computes the rank's rows of ``A H``.
"""
import warnings
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from .plan import RankPlan


def make_csr(rowptr: Tensor, col: Tensor, value: Tensor, shape) -> Tensor:
    """A torch CSR tensor from trusted indices (built here, so invariant checks are skipped)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(rowptr, col, value, shape, check_invariants=False)


def sort_coo(row: Tensor, col: Tensor, value: Optional[Tensor], num_rows: int, num_cols: int):
    """Sorts COO entries by (row, col); returns ``(rowptr, col, value)`` of the CSR."""
    perm = torch.argsort(row * max(num_cols, 1) + col, stable=True)
    rowptr = torch.zeros(num_rows + 1, dtype=torch.long, device=row.device)
    torch.cumsum(torch.bincount(row, minlength=num_rows), 0, out=rowptr[1:])
    return rowptr, col[perm], None if value is None else value[perm]


class HaloAdj:
    def __init__(self, rowptr: Tensor, col: Tensor, value: Optional[Tensor], plan: RankPlan) -> None:
        self.rowptr, self.col, self.value, self.plan = rowptr, col, value, plan
        self._cache: Dict[tuple, object] = {}

    @classmethod
    def from_coo(cls, row: Tensor, col: Tensor, value: Optional[Tensor], plan: RankPlan) -> "HaloAdj":
        """Builds the CSR from (possibly unsorted) local ``row``/``col`` pairs."""
        rowptr, col, value = sort_coo(row, col, value, plan.num_owned, plan.num_owned + plan.halo_size)
        return cls(rowptr, col, value, plan)

    # shape ---------------------------------------------------------------
    @property
    def num_owned(self) -> int:
        return self.plan.num_owned

    @property
    def halo_size(self) -> int:
        return self.plan.halo_size

    @property
    def num_cols(self) -> int:
        return self.num_owned + self.halo_size

    @property
    def nnz(self) -> int:
        return int(self.col.numel())

    @property
    def device(self) -> torch.device:
        return self.col.device

    def row(self) -> Tensor:
        """Local row of every stored entry (COO view of the CSR)."""
        counts = self.rowptr[1:] - self.rowptr[:-1]
        return torch.repeat_interleave(torch.arange(self.num_owned, device=self.device), counts)

    def coo(self) -> Tuple[Tensor, Tensor]:
        return self.row(), self.col

    def with_value(self, value: Optional[Tensor]) -> "HaloAdj":
        if value is not None and value.numel() != self.nnz:
            raise ValueError(f"edge_weight has {value.numel()} entries but the local adjacency has "
                             f"{self.nnz} edges (pass weights in local.adj's edge order)")
        return HaloAdj(self.rowptr, self.col, value, self.plan)

    def to(self, device) -> "HaloAdj":
        value = None if self.value is None else self.value.to(device)
        return HaloAdj(self.rowptr.to(device), self.col.to(device), value, self.plan.to(device))

    # sparse tensors --------------------------------------------------------
    def _values(self, dtype: torch.dtype) -> Tensor:
        if self.value is None:
            return torch.ones(self.nnz, dtype=dtype, device=self.device)
        return self.value.to(dtype)

    def csr(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """``[num_owned, num_cols]`` torch CSR tensor (cached unless values carry autograd)."""
        if self.value is not None and self.value.requires_grad:
            return make_csr(self.rowptr, self.col, self._values(dtype), (self.num_owned, self.num_cols))
        key = ("csr", dtype)
        if key not in self._cache:
            self._cache[key] = make_csr(self.rowptr, self.col, self._values(dtype),
                                        (self.num_owned, self.num_cols))
        return self._cache[key]

    def csr_t(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The transpose ``[num_cols, num_owned]`` as CSR, for the backward SpMM (cached)."""
        key = ("csr_t", dtype)
        if key not in self._cache:
            row, col = self.coo()
            rowptr, t_col, t_value = sort_coo(col, row, self._values(dtype).detach(),
                                              self.num_cols, self.num_owned)
            self._cache[key] = make_csr(rowptr, t_col, t_value, (self.num_cols, self.num_owned))
        return self._cache[key]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def __repr__(self) -> str:
        return (f"HaloAdj(rank={self.plan.rank}/{self.plan.world_size}, owned={self.num_owned}, "
                f"halo={self.halo_size}, nnz={self.nnz})")


class _CSRSpMM(torch.autograd.Function):
    """``A @ X`` with the transposed CSR precomputed for ``dX = A^T dY``."""

    @staticmethod
    def forward(ctx, x: Tensor, adj: HaloAdj) -> Tensor:
        ctx.adj = adj
        return torch.sparse.mm(adj.csr(x.dtype), x)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        return torch.sparse.mm(ctx.adj.csr_t(grad_out.dtype), grad_out.contiguous()), None


def spmm(adj: HaloAdj, x: Tensor) -> Tensor:
    """``adj @ x`` for ``x`` of shape ``[num_cols, f]``; differentiable in ``x`` (and in learnable values)."""
    if x.size(0) != adj.num_cols:
        raise ValueError(f"spmm: x has {x.size(0)} rows, the adjacency has {adj.num_cols} columns")
    if adj.value is not None and adj.value.requires_grad:
        return torch.sparse.mm(adj.csr(x.dtype), x)  # torch differentiates the values too
    return _CSRSpMM.apply(x, adj)
