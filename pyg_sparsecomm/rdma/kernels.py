"""Local tile kernels (torch: the same code on CPU and CUDA), flop counts and the time breakdown.

A tile is a 2-D torch tensor: strided (dense) or ``torch.sparse_csr`` with int64
indices, float64 values, on the backend's device.  Products go through
``torch.sparse.mm`` (MKL / cuSPARSE), so the tile kernels are the only place that
touches local arithmetic and they are device-agnostic.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ..plan.halo_adj import coo_to_csr, make_csr

Tile = torch.Tensor


def is_sparse(tile: Tile) -> bool:
    return tile.layout == torch.sparse_csr


def csr_tile(values: torch.Tensor, crow: torch.Tensor, col: torch.Tensor, shape: tuple[int, int]) -> Tile:
    """A CSR tile over the given (not copied) buffers; invariants are guaranteed by the writer."""
    return make_csr(crow, col, values, shape)  # without torch's beta warning: the user asked for no CSR


def tile_nnz(tile: Tile) -> int:
    return int(tile._nnz()) if is_sparse(tile) else tile.numel()


def tile_product(a: Tile, b: Tile) -> Tile:
    """``a @ b``: SpMM (dense ``b``, dense result) or SpGEMM (CSR ``b``, CSR result)."""
    return torch.sparse.mm(a, b)


def tile_flops(a: Tile, b: Tile) -> int:
    """Multiply-add flops of ``a @ b``: ``2 nnz(a) n`` for SpMM, ``2 sum_{a_rc != 0} nnz(b_c,:)`` for SpGEMM."""
    if is_sparse(b):
        if not a._nnz():
            return 0
        return 2 * int(torch.diff(b.crow_indices())[a.col_indices()].sum())
    return 2 * int(a._nnz()) * b.shape[1]


class SparseSum:
    """A sum of CSR tiles kept as pending summands and reduced in one pass when read.

    torch's pairwise CSR addition costs 2.5-8x scipy's on the SpGEMM tiles measured
    here; instead every summand contributes its ``row * cols + col`` keys and values,
    and :meth:`result` reduces them with one ``unique`` + ``index_add_`` (one sort of
    the pending entries, any device).  Pending entries are compacted whenever they
    exceed twice the compacted sum (and 64 Ki), so memory stays O(result + recent
    summands) and every entry takes part in O(log) compactions.
    """

    def __init__(self, rows: int, cols: int, device: torch.device | str = "cpu") -> None:
        self.shape, self.device = (rows, cols), torch.device(device)
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._pending = self._compacted = 0

    def add(self, tile: Tile) -> SparseSum:
        if tuple(tile.shape) != self.shape:
            raise ValueError(f"cannot add a {tuple(tile.shape)} tile to a {self.shape} sum")
        crow = tile.crow_indices()
        rows = torch.repeat_interleave(torch.arange(self.shape[0], device=crow.device), torch.diff(crow))
        self._keys.append(rows * self.shape[1] + tile.col_indices())
        self._values.append(tile.values().to(torch.float64))
        self._pending += int(tile._nnz())
        if self._pending > max(2 * self._compacted, 1 << 16):
            self._compact()
        return self

    def _compact(self) -> None:
        if len(self._keys) > 1:
            keys, inverse = torch.unique(torch.cat(self._keys), sorted=True, return_inverse=True)
            values = torch.zeros(keys.numel(), dtype=torch.float64, device=keys.device)
            values.index_add_(0, inverse, torch.cat(self._values))
            self._keys, self._values = [keys], [values]
        self._compacted, self._pending = (self._keys[0].numel() if self._keys else 0), 0

    def result(self) -> Tile:
        """The sum as a CSR tile (sorted column indices, no duplicates)."""
        if not self._keys:
            return zero_tile(*self.shape, True, self.device)
        self._compact()
        keys, cols = self._keys[0], self.shape[1]
        return coo_to_csr(keys // cols, keys % cols, self._values[0], self.shape, is_sorted=True)


def accumulate(c: Tile | SparseSum, partial: Tile) -> Tile | SparseSum:
    """``c + partial``: in place for dense ``c``; a sparse ``c`` becomes (or stays) a :class:`SparseSum`."""
    if isinstance(c, SparseSum):
        return c.add(partial)
    if is_sparse(c):
        rows, cols = c.shape
        return SparseSum(rows, cols, c.device).add(c).add(partial)
    c += partial
    return c


def materialize(c: Tile | SparseSum) -> Tile:
    """The tile an accumulator stands for (a :class:`SparseSum` is reduced once)."""
    return c.result() if isinstance(c, SparseSum) else c


def zero_tile(rows: int, cols: int, sparse: bool, device: torch.device | str = "cpu") -> Tile:
    if sparse:
        empty_i = torch.zeros(0, dtype=torch.int64, device=device)
        return csr_tile(torch.zeros(0, dtype=torch.float64, device=device),
                        torch.zeros(rows + 1, dtype=torch.int64, device=device), empty_i, (rows, cols))
    return torch.zeros(rows, cols, dtype=torch.float64, device=device)


@dataclass
class Breakdown:
    """Per-rank seconds split as in the paper's Table 2, plus work counters.

    ``comm``: waiting for gets / broadcasts; ``compute``: local tile products;
    ``accumulate``: adding partials into C (and dequeuing remote updates);
    ``imbalance``: idle time in the final barrier (load imbalance); ``reserve``: remote
    fetch-and-add reservations of work stealing.

    Attributes:
        compute (float, optional): seconds of local tile products. (default: :obj:`0.0`)
        comm (float, optional): seconds waiting for gets and broadcasts. (default: :obj:`0.0`)
        accumulate (float, optional): seconds adding partials into ``C``. (default: :obj:`0.0`)
        imbalance (float, optional): seconds idle in the final barrier. (default: :obj:`0.0`)
        reserve (float, optional): seconds of work stealing's reservations. (default: :obj:`0.0`)
        total (float, optional): seconds of the whole multiplication. (default: :obj:`0.0`)
        flops (int, optional): multiply-add flops of the local products. (default: :obj:`0`)
        bytes_fetched (int, optional): bytes read from other ranks. (default: :obj:`0`)
        products (int, optional): tile products computed. (default: :obj:`0`)
        stolen (int, optional): products stolen from other ranks. (default: :obj:`0`)
        iterations (list[tuple[int, int]], optional): ``(flops, bytes fetched)`` of every
            stationary-C iteration, for the roofline. (default: ``[]``)
    """
    compute: float = 0.0
    comm: float = 0.0
    accumulate: float = 0.0
    imbalance: float = 0.0
    reserve: float = 0.0
    total: float = 0.0
    flops: int = 0
    bytes_fetched: int = 0
    products: int = 0
    stolen: int = 0
    #: (flops, bytes fetched) of every stationary-C iteration, for the roofline
    iterations: list[tuple[int, int]] = field(default_factory=list)

    @contextmanager
    def timing(self, part: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, part, getattr(self, part) + time.perf_counter() - t0)

    def summary(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in ("compute", "comm", "accumulate", "imbalance", "reserve", "total", "flops",
                                                "bytes_fetched", "products", "stolen")}
