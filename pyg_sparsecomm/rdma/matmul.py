"""``spmm`` / ``spgemm``: one entry point over the RDMA algorithms and the SUMMA baseline."""
import inspect
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

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


def options(algorithm: str) -> tuple[str, ...]:
    """The keyword options ``algorithm`` accepts (beyond ``A`` and ``B``)."""
    fn = ALGORITHMS[algorithm]
    fixed = set(fn.keywords) if isinstance(fn, partial) else set()
    params = inspect.signature(fn.func if isinstance(fn, partial) else fn).parameters
    return tuple(name for name in list(params)[2:] if name not in fixed)


def _lookup(algorithm: str, allowed: Iterable[str], kwargs: dict[str, Any]) -> Callable[..., MatmulResult]:
    if algorithm not in allowed:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(allowed)}")
    unknown = sorted(set(kwargs) - set(options(algorithm)))
    if unknown:
        raise ValueError(f"algorithm {algorithm!r} does not take option(s) {unknown}; it accepts "
                         f"{list(options(algorithm)) or 'no options'}")
    return ALGORITHMS[algorithm]


def spmm(A: SparseTiledMatrix, B: DenseTiledMatrix, algorithm: str = "stationary_c", **kwargs: Any) -> MatmulResult:
    """Distributed SpMM ``C = A B`` (sparse ``A``, dense ``B``); collective over ``A.backend``.

    ``kwargs`` are the algorithm's options (:func:`options`); others raise ValueError.

    Args:
        A (SparseTiledMatrix): the sparse left operand.
        B (DenseTiledMatrix): the dense right operand, on ``A``'s process grid.
        algorithm (str, optional): a key of :data:`ALGORITHMS`. (default: :obj:`"stationary_c"`)
        **kwargs (optional): the algorithm's options.
    """
    if not isinstance(B, DenseTiledMatrix):
        raise TypeError(f"spmm needs a DenseTiledMatrix B, got {type(B).__name__}; use spgemm for sparse B")
    return _lookup(algorithm, ALGORITHMS, kwargs)(A, B, **kwargs)


def spgemm(A: SparseTiledMatrix, B: SparseTiledMatrix, algorithm: str = "stationary_c",
           **kwargs: Any) -> MatmulResult:
    """Distributed SpGEMM ``C = A B`` (both CSR tiled); collective over ``A.backend``.

    ``kwargs`` are the algorithm's options (:func:`options`); others raise ValueError.

    Args:
        A (SparseTiledMatrix): the sparse left operand.
        B (SparseTiledMatrix): the sparse right operand, on ``A``'s process grid.
        algorithm (str, optional): a key of :data:`SPGEMM_ALGORITHMS`. (default: :obj:`"stationary_c"`)
        **kwargs (optional): the algorithm's options.
    """
    if not isinstance(B, SparseTiledMatrix):
        raise TypeError(f"spgemm needs a SparseTiledMatrix B, got {type(B).__name__}; use spmm for dense B")
    return _lookup(algorithm, SPGEMM_ALGORITHMS, kwargs)(A, B, **kwargs)
