"""MPI-3 one-sided RMA backend (mpi4py), for CPU processes launched with ``mpiexec``.

Memory comes from a *symmetric heap*: one ``MPI.Win.Allocate`` window of
``heap_bytes`` per rank, created on first use and opened once with a
passive-target ``Lock_all(MODE_NOCHECK)`` epoch.  A region is a range at the
same byte offset on every rank (sized by the largest request), handed out by a
first-fit free list that evolves identically everywhere because allocation and
freeing are collective — the paper's "allocate most memory as shared memory and
use our own allocator" (Section 5.3), which avoids the cost of creating an MPI
window per region.  A request that does not fit gets a dedicated window.

The inner loops issue only ``Rget``/``Put``/``Fetch_and_op`` plus a ``Flush``
of the one target — never a fence or a barrier, and the target process does
not take part (ICS'24 Section 2.3).  Windows use ``disp_unit=1`` (byte
displacements).  Regions are host memory handed out as CPU torch tensors that
alias the window (``torch.from_numpy``, no copy); gets land in fresh tensors.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from .backend import MPI_INSTALL_HINT, NUMPY_DTYPES, Future, Region, RMABackend, as_dtype

ALIGN = 64
DEFAULT_HEAP_MB = 256


def find_mpiexec() -> str:
    """The ``mpiexec`` launcher: on ``PATH``, else beside this interpreter's installed scripts (where
    ``pip install mpich`` puts it, also when that folder is not on ``PATH``, e.g. ``pip install --user``)."""
    import shutil
    import sys
    import sysconfig
    from pathlib import Path

    found = shutil.which("mpiexec")
    if found:
        return found
    for scheme in (None, f"{os.name}_user"):
        try:
            folder = Path(sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts"))
        except KeyError:
            continue
        if (folder / "mpiexec").exists():
            return str(folder / "mpiexec")
    if (Path(sys.executable).parent / "mpiexec").exists():
        return str(Path(sys.executable).parent / "mpiexec")
    raise FileNotFoundError(f"mpiexec not found on PATH nor beside {sys.executable}: {MPI_INSTALL_HINT}")


def import_mpi() -> Any:
    """``mpi4py.MPI``, or an ImportError that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # also raised when sys.modules["mpi4py"] is None
        raise ImportError(f"the MPI RDMA backend needs mpi4py and an MPI library: {MPI_INSTALL_HINT} "
                          f"(installs the mpich and mpi4py wheels), then launch with mpiexec") from exc
    return MPI


class SymmetricHeap:
    """First-fit allocator over ``[0, size)`` bytes; identical on every rank when driven collectively."""

    def __init__(self, size: int) -> None:
        self.size, self.free_ranges = size, [(0, size)]  # sorted, coalesced (start, length)
        self.high_water = 0  # bytes below were handed out before (and are zero whenever free)

    def take(self, nbytes: int) -> int | None:
        nbytes = -(-max(nbytes, 1) // ALIGN) * ALIGN
        for n, (start, length) in enumerate(self.free_ranges):
            if length >= nbytes:
                self.free_ranges[n] = (start + nbytes, length - nbytes)
                if length == nbytes:
                    del self.free_ranges[n]
                return start
        return None

    def give(self, start: int, nbytes: int) -> None:
        nbytes = -(-max(nbytes, 1) // ALIGN) * ALIGN
        ranges = sorted(self.free_ranges + [(start, nbytes)])
        merged = [ranges[0]]
        for s, length in ranges[1:]:
            ps, pl = merged[-1]
            merged[-1:] = [(ps, pl + length)] if ps + pl == s else [(ps, pl), (s, length)]
        self.free_ranges = merged


class MPIBackend(RMABackend):
    """One-sided ``get``/``put``/``fetch_add`` over MPI windows of ``comm`` (default ``COMM_WORLD``).

    ``heap_bytes`` (default ``$PYG_SPARSECOMM_RDMA_HEAP_MB`` or 256 MiB per rank) sizes
    the symmetric heap; 0 gives every region its own window.

    Args:
        comm (mpi4py.MPI.Comm, optional): the communicator. (default: ``MPI.COMM_WORLD``)
        heap_bytes (int, optional): bytes of the symmetric heap per rank; ``0``: a window per region.
            (default: ``$PYG_SPARSECOMM_RDMA_HEAP_MB`` or 256 MiB)
    """
    device = torch.device("cpu")

    def __init__(self, comm: Any | None = None, heap_bytes: int | None = None) -> None:
        self.MPI = MPI = import_mpi()
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        if heap_bytes is None:
            heap_bytes = int(float(os.environ.get("PYG_SPARSECOMM_RDMA_HEAP_MB", DEFAULT_HEAP_MB)) * 2 ** 20)
        self._heap_bytes = heap_bytes
        self._heap_win: Any = None  # the heap's window and its bytes, made on first use
        self._heap_mem: np.ndarray | None = None
        self._heap: SymmetricHeap | None = None
        self._dedicated: dict[int, Any] = {}  # region id -> its own window
        self._where: dict[int, tuple] = {}  # region id -> (window, byte base, local view, symmetric bytes)
        self._next_id = 0
        self._mpi_type = {torch.float64: MPI.DOUBLE, torch.float32: MPI.FLOAT, torch.int64: MPI.INT64_T}

    def can_communicate(self) -> bool:
        return bool(self.MPI.Is_initialized() and not self.MPI.Is_finalized())

    def _window(self, nbytes: int, zero: bool = True):
        win = self.MPI.Win.Allocate(nbytes, 1, comm=self.comm)
        mem = np.frombuffer(win.tomemory(), dtype=np.uint8, count=nbytes) if nbytes else np.empty(0, np.uint8)
        if zero:
            mem[:] = 0
        win.Lock_all(self.MPI.MODE_NOCHECK)  # one passive-target epoch for the window's lifetime
        return win, mem

    def alloc(self, length: int, dtype: Any = torch.float64) -> Region:
        dtype = as_dtype(dtype)
        if length < 0:
            raise ValueError(f"region length must be >= 0, got {length}")
        # the one collective of an allocation; reused heap memory is zero because free() zeroes it
        lengths = tuple(int(n) for n in self.comm.allgather(int(length)))
        itemsize = dtype.itemsize
        nbytes = max(lengths) * itemsize
        if self._heap is None and self._heap_bytes > 0:
            # not zeroed here: pages are touched (and zeroed) only when first handed out
            self._heap_win, self._heap_mem = self._window(self._heap_bytes, zero=False)
            self._heap = SymmetricHeap(self._heap_bytes)
        base = self._heap.take(nbytes) if self._heap is not None else None
        if self._heap is not None and base is not None and base + nbytes > self._heap.high_water:
            # first use of these bytes (same decision on every rank): zero, then agree
            assert self._heap_mem is not None  # made together with the heap
            self._heap_mem[max(base, self._heap.high_water):base + nbytes] = 0
            self._heap.high_water = base + nbytes
            self._heap_win.Sync()
            self.comm.Barrier()
        region = Region(self._next_id, dtype, lengths)
        self._next_id += 1
        if base is None:  # no room in the heap: a dedicated window (collective, zeroed)
            win, mem = self._window(length * itemsize)
            self._dedicated[region.id] = win
            win.Sync()
            self.comm.Barrier()
            base = 0
        else:
            win, mem = self._heap_win, self._heap_mem
        view = torch.from_numpy(mem[base:base + length * itemsize].view(NUMPY_DTYPES[dtype]))  # aliases the window
        self._where[region.id] = (win, base, view, nbytes)
        return region

    def local(self, region: Region) -> torch.Tensor:
        return self._where[region.id][2]

    def _target(self, region: Region, offset: int, count: int):
        win, base = self._where[region.id][:2]
        return win, (base + offset * region.dtype.itemsize, count, self._mpi_type[region.dtype])

    def get_async(self, rank: int, region: Region, offset: int, count: int) -> Future:
        self._check_range(rank, region, offset, count)
        out = torch.empty(count, dtype=region.dtype)
        if count == 0:
            return Future.ready(out)
        win, target = self._target(region, offset, count)
        request = win.Rget([out.numpy(), self._mpi_type[region.dtype]], rank, target=target)

        def finish() -> torch.Tensor:
            request.Wait()  # completes the Rget at the origin: out holds the data
            return out
        return Future(finish, count * region.dtype.itemsize)

    def put(self, rank: int, region: Region, offset: int, data: Any) -> None:
        data = np.ascontiguousarray(torch.as_tensor(data).to(region.dtype).reshape(-1).numpy())
        self._check_range(rank, region, offset, data.size)
        if data.size:
            win, target = self._target(region, offset, data.size)
            win.Put([data, self._mpi_type[region.dtype]], rank, target=target)
            win.Flush(rank)  # remote completion: later operations of this rank see the data

    def fetch_add(self, rank: int, region: Region, offset: int, value: int) -> int:
        if region.dtype != torch.int64:
            raise ValueError(f"fetch_add needs an int64 region, region {region.id} is {region.dtype}")
        self._check_range(rank, region, offset, 1)
        origin, result = np.array([value], np.int64), np.zeros(1, np.int64)
        win, (disp, _, _) = self._target(region, offset, 1)
        op = self.MPI.NO_OP if value == 0 else self.MPI.SUM
        win.Fetch_and_op([origin, self.MPI.INT64_T], [result, self.MPI.INT64_T], rank, disp, op)
        win.Flush(rank)
        return int(result[0])

    def _windows(self) -> list:
        return ([self._heap_win] if self._heap_win is not None else []) + list(self._dedicated.values())

    def barrier(self) -> None:
        for win in self._windows():
            win.Sync()  # local stores -> public window copy before peers read it
        self.comm.Barrier()
        for win in self._windows():
            win.Sync()

    def allgather(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def grid_broadcast(self, rows: int, cols: int):
        r, c = divmod(self.rank, cols)
        row, col = self.comm.Split(r, c), self.comm.Split(c, r)  # rank in row = c, in col = r

        def bcast(comm: Any):
            return lambda tensor, root: comm.Bcast(tensor.numpy(), root=root)

        def release() -> None:
            row.Free()
            col.Free()
        return bcast(row), bcast(col), release

    def free(self, region: Region) -> None:
        win, base, view, nbytes = self._where.pop(region.id)
        if region.id in self._dedicated:
            self._dedicated.pop(region.id)
            win.Unlock_all()
            win.Free()  # collective, synchronising
            return
        self.comm.Barrier()  # nobody still reads or updates the range
        view[:] = 0  # so that the next allocation of this range starts zeroed
        win.Sync()
        assert self._heap is not None  # a region without its own window lives in the heap
        self._heap.give(base, nbytes)

    def close(self) -> None:
        """Frees every region and the heap (collective)."""
        for rid in sorted(self._where):
            self.free(Region(rid, torch.uint8, ()))
        if self._heap_win is not None:
            self._heap_win.Unlock_all()
            self._heap_win.Free()
            self._heap_win = self._heap_mem = self._heap = None
