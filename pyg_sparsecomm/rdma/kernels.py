"""Local tile kernels, flop counts, per-rank time breakdown and operand checks."""
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Union

import numpy as np
import scipy.sparse as sp

Tile = Union[np.ndarray, sp.csr_matrix]


def tile_product(a: sp.csr_matrix, b: Tile) -> Tile:
    """``a @ b``: SpMM (dense ``b``, dense result) or SpGEMM (CSR ``b``, CSR result)."""
    out = a @ b
    return out.tocsr() if sp.issparse(out) else np.asarray(out)


def tile_flops(a: sp.csr_matrix, b: Tile) -> int:
    """Multiply-add flops of ``a @ b``: ``2 nnz(a) n`` for SpMM, ``2 sum_{a_rc != 0} nnz(b_c,:)`` for SpGEMM."""
    if sp.issparse(b):
        return 2 * int(np.diff(b.indptr)[a.indices].sum()) if a.nnz else 0
    return 2 * a.nnz * b.shape[1]


def tile_nbytes(tile: Tile) -> int:
    if sp.issparse(tile):
        return tile.data.nbytes + tile.indices.nbytes + tile.indptr.nbytes
    return tile.nbytes


def accumulate(c: Tile, partial: Tile) -> Tile:
    """``c + partial`` (in place for dense ``c``; sparse sums build a new CSR)."""
    if sp.issparse(c):
        return (c + partial).tocsr()
    c += partial
    return c


def zero_tile(rows: int, cols: int, sparse: bool) -> Tile:
    return sp.csr_matrix((rows, cols)) if sparse else np.zeros((rows, cols))


@dataclass
class Breakdown:
    """Per-rank seconds split as in the paper's Table 2, plus work counters.

    ``comm``: waiting for gets / broadcasts; ``compute``: local tile products;
    ``accumulate``: adding partials into C (and dequeuing remote updates);
    ``imbalance``: idle time in the final barrier (load imbalance); ``reserve``: remote
    fetch-and-add reservations of work stealing.
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


def check_operands(A, B) -> None:
    """ValueError unless ``A @ B`` is defined tile by tile on one process grid."""
    from .tiled import SparseTiledMatrix
    if not isinstance(A, SparseTiledMatrix):
        raise TypeError(f"A must be a SparseTiledMatrix, got {type(A).__name__}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes {A.shape} and {B.shape} cannot be multiplied")
    if A.tile_shape[1] != B.tile_shape[0]:
        raise ValueError(f"A's tile columns ({A.tile_shape[1]}) must equal B's tile rows ({B.tile_shape[0]})")
    if A.pgrid != B.pgrid:
        raise ValueError(f"A and B must share one process grid, got {A.pgrid} and {B.pgrid}")
    if A.backend is not B.backend:
        raise ValueError("A and B must live on the same backend")
