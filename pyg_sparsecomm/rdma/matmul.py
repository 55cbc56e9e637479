"""``spmm`` / ``spgemm``: one entry point over the RDMA algorithms and the SUMMA baseline."""
from functools import partial
from typing import Callable

from .stationary import MatmulResult, stationary_a, stationary_c
from .stealing import work_stealing
from .summa import summa
from .tiled import DenseTiledMatrix, SparseTiledMatrix

#: algorithm name -> function ``(A, B, **kwargs) -> MatmulResult``
ALGORITHMS: dict[str, Callable[..., MatmulResult]] = {
    "stationary_c": stationary_c,
    "stationary_a": stationary_a,
    "ws_random": partial(work_stealing, victim="random"),
    "ws_locality": partial(work_stealing, victim="locality"),
    "summa": summa,
}
#: algorithms that support SpGEMM (sparse B)
SPGEMM_ALGORITHMS = ("stationary_c", "stationary_a", "summa")


def _lookup(algorithm: str, allowed) -> Callable[..., MatmulResult]:
    if algorithm not in allowed:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(allowed)}")
    return ALGORITHMS[algorithm]


def spmm(A: SparseTiledMatrix, B: DenseTiledMatrix, algorithm: str = "stationary_c", **kwargs) -> MatmulResult:
    """Distributed SpMM ``C = A B`` (sparse ``A``, dense ``B``); collective over ``A.backend``."""
    if not isinstance(B, DenseTiledMatrix):
        raise TypeError(f"spmm needs a DenseTiledMatrix B, got {type(B).__name__}; use spgemm for sparse B")
    return _lookup(algorithm, ALGORITHMS)(A, B, **kwargs)


def spgemm(A: SparseTiledMatrix, B: SparseTiledMatrix, algorithm: str = "stationary_c", **kwargs) -> MatmulResult:
    """Distributed SpGEMM ``C = A B`` (both CSR tiled); collective over ``A.backend``."""
    if not isinstance(B, SparseTiledMatrix):
        raise TypeError(f"spgemm needs a SparseTiledMatrix B, got {type(B).__name__}; use spmm for dense B")
    return _lookup(algorithm, SPGEMM_ALGORITHMS)(A, B, **kwargs)
