"""One-sided (RDMA) distributed SpMM / SpGEMM engine after Brock, Buluç & Yelick, ICS'24.

Backends (:mod:`.backend`), chosen by :func:`make_backend` (:mod:`.factory`) from the device:
:class:`MPIBackend` (mpi4py one-sided RMA, CPU, run under ``mpiexec``) and
:class:`SymmetricMemoryBackend` (PyTorch symmetric memory, CUDA; never run on a GPU
here, tested over an emulated CPU heap).  Regions and tiles are torch tensors and the
tile kernels (:mod:`.kernels`) are torch operations, so every algorithm is written once
for both.  Data structures
(:mod:`.tiled`): :class:`DenseTiledMatrix`, :class:`SparseTiledMatrix` over a
block-cyclic :class:`TileProcessGrid`.  Algorithms: :func:`stationary_c`,
:func:`stationary_a`, :func:`work_stealing`, :func:`summa`, dispatched by
:func:`spmm` / :func:`spgemm`.  Measurements (Table 2, Figure 1, roofline) are benchmark
code: ``benchmarks/rdma_measure.py``.

Both backends are imported lazily, so ``import pyg_sparsecomm.rdma`` works
without mpi4py or Triton; creating an :class:`MPIBackend` without mpi4py raises an
ImportError that names ``pip install "pyg_sparsecomm[mpi]"``.
"""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .backend import Future, Region, RMABackend
from .factory import make_backend
from .kernels import Breakdown
from .matmul import ALGORITHMS, SPGEMM_ALGORITHMS, spgemm, spmm
from .queue import Outbox, RemoteQueue
from .stationary import MatmulResult, stationary_a, stationary_c
from .stealing import ReservationGrid, work_stealing
from .summa import summa
from .tile_grid import TileGrid, TileProcessGrid
from .tiled import DenseTiledMatrix, SparseTiledMatrix

if TYPE_CHECKING:  # pragma: no cover
    from .mpi_backend import MPIBackend
    from .symm_backend import SymmetricMemoryBackend


# lazy: importing mpi4py initialises MPI, which only launched processes should do
__getattr__, __dir__ = lazy_exports(__name__, {"MPIBackend": ".mpi_backend",
                                               "SymmetricMemoryBackend": ".symm_backend"})


__all__ = [
    "ALGORITHMS",
    "SPGEMM_ALGORITHMS",
    "Breakdown",
    "DenseTiledMatrix",
    "Future",
    "MPIBackend",
    "MatmulResult",
    "Outbox",
    "RMABackend",
    "Region",
    "RemoteQueue",
    "ReservationGrid",
    "SparseTiledMatrix",
    "SymmetricMemoryBackend",
    "TileGrid",
    "TileProcessGrid",
    "make_backend",
    "spgemm",
    "spmm",
    "stationary_a",
    "stationary_c",
    "summa",
    "work_stealing",
]
