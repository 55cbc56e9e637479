"""The one-sided communication interface every RDMA algorithm is written against.

A backend exposes *regions*: one typed array per rank, allocated collectively
(each rank may ask for a different length; backends that need truly symmetric
allocations round up to the largest).  Any rank can then read (``get``), write
(``put``) or atomically update (``fetch_add``) any rank's region without the
target taking part (ICS'24 paper, Section 2.3 and Section 5.3).

Memory-model rule used throughout :mod:`pyg_sparsecomm.rdma`: a rank may write
its *own* region through :meth:`RMABackend.local` only before a
:meth:`RMABackend.barrier`; afterwards every access — also to its own region —
goes through ``get``/``put``/``fetch_add``, which are ordered and atomic as the
backend documents.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

MPI_INSTALL_HINT = 'pip install "pyg_sparsecomm[mpi]"'


@dataclass(frozen=True)
class Region:
    """Handle of a collectively allocated region (same ``id`` on every rank)."""
    id: int
    dtype: np.dtype
    lengths: tuple  # elements held by every rank (lengths[r] is rank r's size)


class Future:
    """A pending one-sided read; ``wait()`` (alias ``result()``) returns the value once.

    ``nbytes`` is the number of bytes the read moves, known before it completes
    (used for the roofline's arithmetic intensity).
    """

    def __init__(self, finish: Callable[[], Any], nbytes: int = 0) -> None:
        self._finish, self._value, self._done, self.nbytes = finish, None, False, nbytes

    def wait(self) -> Any:
        if not self._done:
            self._value, self._done, self._finish = self._finish(), True, None
        return self._value

    result = wait

    @staticmethod
    def ready(value: Any, nbytes: int = 0) -> Future:
        fut = Future(lambda: value, nbytes)
        fut.wait()
        return fut

    @staticmethod
    def gather(futures: Sequence[Future], combine: Callable[..., Any]) -> Future:
        """One future over several reads (a CSR tile's three gets)."""
        return Future(lambda: combine(*(f.wait() for f in futures)), sum(f.nbytes for f in futures))


class RMABackend(ABC):
    """Abstract one-sided backend: ``alloc``, ``get``, ``put``, ``fetch_add``, ``barrier``, ``free``."""

    rank: int
    world_size: int
    #: whether regions are host (numpy) memory the package's numpy/scipy tile kernels can use;
    #: the tiled matrices and every algorithm require it
    host_kernels: bool = False

    @abstractmethod
    def alloc(self, length: int, dtype: Any = np.float64) -> Region:
        """Collectively allocates ``length`` zero-initialised elements on this rank."""

    @abstractmethod
    def local(self, region: Region) -> np.ndarray:
        """A writable view of this rank's own part (see the module's memory-model rule)."""

    @abstractmethod
    def get_async(self, rank: int, region: Region, offset: int, count: int) -> Future:
        """Starts reading ``count`` elements at ``offset`` of ``rank``'s part."""

    def get(self, rank: int, region: Region, offset: int, count: int) -> np.ndarray:
        """Blocking read: ``region[rank][offset:offset + count]`` as a fresh array."""
        return self.get_async(rank, region, offset, count).wait()

    @abstractmethod
    def put(self, rank: int, region: Region, offset: int, data: np.ndarray) -> None:
        """Writes ``data`` to ``region[rank][offset:]``; complete (remotely visible) on return."""

    @abstractmethod
    def fetch_add(self, rank: int, region: Region, offset: int, value: int) -> int:
        """Atomically adds ``value`` to an integer element and returns its old value.

        ``value=0`` is an atomic read.
        """

    @abstractmethod
    def barrier(self) -> None:
        """Collective barrier that also makes earlier local writes visible."""

    @abstractmethod
    def allgather(self, obj: Any) -> list[Any]:
        """Small-object all-gather (directories, timings); not used in inner loops."""

    @abstractmethod
    def free(self, region: Region) -> None:
        """Collectively releases a region."""

    def _check_range(self, rank: int, region: Region, offset: int, count: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} out of range for world size {self.world_size}")
        if offset < 0 or count < 0 or offset + count > region.lengths[rank]:
            raise ValueError(f"access [{offset}, {offset + count}) outside region {region.id} of rank {rank} "
                             f"({region.lengths[rank]} elements)")


CUDA_UNSUPPORTED = (
    "the RDMA algorithms have no CUDA backend: the tiled matrices and the tile kernels are numpy/scipy host code, "
    "and PyTorch symmetric memory has no Python remote fetch-and-add (needed by stationary-A queues and work "
    "stealing).  Supported: make_backend('cpu') (MPI one-sided RMA, under mpiexec) for every algorithm.  "
    "pyg_sparsecomm.rdma.symm_backend.SymmetricMemoryBackend is an untested transport sketch (alloc/get/put/"
    "barrier only, never run: no GPU was available) and cannot run any algorithm")


def make_backend(device: Any = "cpu", **kwargs: Any) -> RMABackend:
    """The backend for ``device``: MPI one-sided RMA for CPU (the only device the algorithms run on).

    ``"cuda"`` raises NotImplementedError saying what is and is not supported
    (see :data:`CUDA_UNSUPPORTED`); other device types raise ValueError.
    """
    import torch
    device = torch.device(device)
    if device.type == "cpu":
        from .mpi_backend import MPIBackend
        return MPIBackend(**kwargs)
    if device.type == "cuda":
        raise NotImplementedError(CUDA_UNSUPPORTED)
    raise ValueError(f"no RDMA backend for device type {device.type!r}; use 'cpu' (MPI one-sided RMA)")


def as_dtype(dtype: Any | None) -> np.dtype:
    dt = np.dtype(dtype if dtype is not None else np.float64)
    if dt not in (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.int64)):
        raise ValueError(f"unsupported region dtype {dt}; use float64, float32 or int64")
    return dt
