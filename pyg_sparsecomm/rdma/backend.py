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

Regions, reads and writes are **torch tensors on the backend's** :attr:`RMABackend.device`
(host memory for MPI, CUDA memory for symmetric memory), and the tiled matrices and
tile kernels use only torch operations, so every algorithm of
:mod:`pyg_sparsecomm.rdma` is written once for both backends;
:func:`~pyg_sparsecomm.rdma.factory.make_backend` picks the backend from the device.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

MPI_INSTALL_HINT = 'pip install "pyg_sparsecomm[mpi]"'


@dataclass(frozen=True)
class Region:
    """Handle of a collectively allocated region (same ``id`` on every rank).

    Attributes:
        id (int): the region's id, the same on every rank.
        dtype (torch.dtype): the element type.
        lengths (tuple): elements held by every rank (``lengths[r]`` is rank ``r``'s size).
    """
    id: int
    dtype: torch.dtype
    lengths: tuple  # elements held by every rank (lengths[r] is rank r's size)


class Future:
    """A pending one-sided read; ``wait()`` (alias ``result()``) returns the value once.

    ``nbytes`` is the number of bytes the read moves, known before it completes
    (used for the roofline's arithmetic intensity).

    Args:
        finish (Callable[[], Any]): completes the read and returns its value (called once).
        nbytes (int, optional): the bytes the read moves. (default: :obj:`0`)
    """

    def __init__(self, finish: Callable[[], Any], nbytes: int = 0) -> None:
        self._finish: Callable[[], Any] | None = finish
        self._value: Any = None
        self._done, self.nbytes = False, nbytes

    def wait(self) -> Any:
        if not self._done:
            assert self._finish is not None  # dropped only once the value is in
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
    #: where regions live and where tiles are computed
    device: torch.device

    @abstractmethod
    def alloc(self, length: int, dtype: torch.dtype = torch.float64) -> Region:
        """Collectively allocates ``length`` zero-initialised elements on this rank."""

    @abstractmethod
    def local(self, region: Region) -> torch.Tensor:
        """A writable 1-D view of this rank's own part (see the module's memory-model rule)."""

    @abstractmethod
    def get_async(self, rank: int, region: Region, offset: int, count: int) -> Future:
        """Starts reading ``count`` elements at ``offset`` of ``rank``'s part (a future of a 1-D tensor)."""

    def get(self, rank: int, region: Region, offset: int, count: int) -> torch.Tensor:
        """Blocking read: ``region[rank][offset:offset + count]`` as a fresh tensor."""
        return self.get_async(rank, region, offset, count).wait()

    @abstractmethod
    def put(self, rank: int, region: Region, offset: int, data: torch.Tensor) -> None:
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

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract: a backend holding nothing keeps it
        """Collectively frees every region still allocated (called at exit)."""

    def can_communicate(self) -> bool:
        """Whether collectives still work (at exit the process group or MPI may be gone already)."""
        return True

    def grid_broadcast(self, rows: int, cols: int) -> tuple[Callable[[torch.Tensor, int], None],
                                                            Callable[[torch.Tensor, int], None], Callable[[], None]]:
        """Collective: ``(row_bcast, col_bcast, release)`` for a ``rows x cols`` grid of the ranks
        (rank ``r * cols + c`` at ``(r, c)``).  ``row_bcast(tensor, root)`` broadcasts in place
        within this rank's process row from the rank in column ``root``, ``col_bcast`` within its
        column from the rank in row ``root``; ``release()`` frees what was set up.  Used only by
        the bulk-synchronous SUMMA baseline."""
        raise NotImplementedError(f"{type(self).__name__} has no collective broadcasts (needed by summa)")

    def _check_range(self, rank: int, region: Region, offset: int, count: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} out of range for world size {self.world_size}")
        if offset < 0 or count < 0 or offset + count > region.lengths[rank]:
            raise ValueError(f"access [{offset}, {offset + count}) outside region {region.id} of rank {rank} "
                             f"({region.lengths[rank]} elements)")


#: region dtypes and their numpy twins (host buffers of the MPI backend)
NUMPY_DTYPES = {torch.float64: np.dtype(np.float64), torch.float32: np.dtype(np.float32),
                torch.int64: np.dtype(np.int64)}
DTYPES = tuple(NUMPY_DTYPES)


def as_dtype(dtype: Any | None) -> torch.dtype:
    """A region dtype: ``torch.float64`` (default), ``torch.float32`` or ``torch.int64``."""
    if dtype is None:
        return torch.float64
    if not isinstance(dtype, torch.dtype):
        dtype = {v: k for k, v in NUMPY_DTYPES.items()}.get(np.dtype(dtype), dtype)
    if dtype not in DTYPES:
        raise ValueError(f"unsupported region dtype {dtype}; use torch.float64, torch.float32 or torch.int64")
    return dtype
