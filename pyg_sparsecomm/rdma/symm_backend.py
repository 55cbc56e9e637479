"""PyTorch symmetric-memory backend (CUDA tensors over NVLink P2P / NVSHMEM): the paper's GPU setting.

Written against ``torch.distributed._symmetric_memory``:

* ``symm_mem.empty(n, dtype=, device=)`` allocates from the symmetric heap (every
  rank the same size: requests are rounded up to the largest, as the API requires);
* ``symm_mem.rendezvous(tensor, group)`` exchanges the handles collectively;
* ``handle.get_buffer(peer, sizes, dtype, storage_offset)`` is a CUDA tensor that
  aliases ``peer``'s allocation, so a one-sided **get** / **put** is a device copy
  from / to that view — the peer takes no part (ICS'24 Section 2.3);
* **fetch-and-add** is a one-thread Triton kernel doing ``tl.atomic_add`` with
  system scope and acquire-release semantics on the peer's address
  (:func:`pyg_sparsecomm.rdma.atomics.fetch_add`): peer-mapped memory supports
  hardware atomics over NVLink, and ``atomic_add`` returns the old value.

Ordering (CUDA stream semantics): a get is a copy enqueued on a *side* stream
(:class:`SideStreamGets`), so it runs while the compute stream works on the previous
tile — the prefetch of :class:`~pyg_sparsecomm.algorithms.rdma.TiledAdjacency`; its
future's ``wait()`` makes the *consumer's* current stream wait for the copy's event
(``wait_event``) instead of blocking the host, and records the buffer's use on that stream
for the caching allocator.  ``put`` and ``fetch_add`` synchronise the stream before
returning (complete and visible on return, as the interface requires); ``barrier``
synchronises the device and the group.

**Status.**  Written to the PyTorch API and never run on a GPU (the development and CI
machines have none).  Its code — allocation, rendezvous, offsets, gets, puts, the
Triton fetch-and-add — runs in the test suite over an *emulated* symmetric heap on
CPU (``tests/_symm_emulation.py``: shared-memory files instead of NVLink mappings,
Triton's interpreter instead of the GPU) in real multi-process jobs, with every
algorithm of :mod:`pyg_sparsecomm.rdma` checked against ``torch.sparse``.
"""
from __future__ import annotations

from typing import Any

import torch

from ..comm.device_check import check_devices
from ..comm.group import is_alive
from ..compat import symmetric_memory_module
from .atomics import fetch_add as atomic_fetch_add
from .backend import Future, Region, RMABackend, as_dtype


def check_symmetric_memory_available(device: Any) -> None:
    """Raises RuntimeError naming what is missing for the symmetric-memory backend."""
    import torch.distributed as dist
    if torch.device(device).type != "cuda":
        raise RuntimeError(f"SymmetricMemoryBackend needs a CUDA device, got {device!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("SymmetricMemoryBackend needs CUDA, but torch.cuda.is_available() is False "
                           "(CPU-only build or no GPU); use make_backend('cpu') for the MPI backend")
    try:
        symmetric_memory_module()
    except ImportError as exc:
        raise RuntimeError("this PyTorch build has no torch.distributed._symmetric_memory") from exc
    if not dist.is_initialized():
        raise RuntimeError("SymmetricMemoryBackend needs torch.distributed.init_process_group(...) first")


class SideStreamGets:
    """Gets on a CUDA side stream, consumed by the current stream without a host synchronisation.

    ``start(src, out_like)`` enqueues the copy of ``src`` (a peer-mapped view) into a fresh
    buffer on the side stream and returns ``(buffer, event)``; ``finish(buffer, event)`` makes
    the caller's current stream wait for ``event`` and records the buffer's use there (the
    buffer was allocated on the side stream).  The emulation's stand-in
    (``tests/_symm_emulation.py``) logs these steps to check their order without a GPU.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.side = torch.cuda.Stream(device)

    def start(self, src: torch.Tensor) -> tuple[torch.Tensor, Any]:
        with torch.cuda.stream(self.side):
            out = torch.empty(src.shape, dtype=src.dtype, device=self.device)
            out.copy_(src, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.side)
        return out, done

    def finish(self, out: torch.Tensor, done: Any) -> torch.Tensor:
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(done)  # the consumer's later kernels run after the copy; the host goes on
        out.record_stream(consumer)
        return out


class SymmetricMemoryBackend(RMABackend):
    """``get``/``put``/``fetch_add`` through peer-mapped symmetric-memory tensors of ``group`` (default world).

    ``symm_mem`` replaces ``torch.distributed._symmetric_memory`` (the tests pass a CPU
    emulation); with the default the device must be CUDA.  ``gets`` orders the gets
    (default: :class:`SideStreamGets` on CUDA, ready at once on the CPU).

    Args:
        device (torch.device or str, optional): the device of the regions. (default: :obj:`"cuda"`)
        group (torch.distributed.ProcessGroup, optional): the ranks sharing the memory.
            (default: the default group)
        symm_mem (module, optional): a stand-in for ``torch.distributed._symmetric_memory``.
            (default: :obj:`None`)
        gets (SideStreamGets, optional): orders the gets. (default: :class:`SideStreamGets` on CUDA,
            ready at once on the CPU)
    """

    def __init__(self, device: Any = "cuda", group: Any | None = None, symm_mem: Any | None = None,
                 gets: Any | None = None) -> None:
        import torch.distributed as dist
        if symm_mem is None:
            check_symmetric_memory_available(device)
            symm_mem = symmetric_memory_module()
        self.dist = dist
        self.symm_mem: Any = symm_mem  # the module, or a stand-in with its API
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self._tensors: dict[int, torch.Tensor] = {}
        self._handles: dict[int, Any] = {}
        self._grid_groups: dict[tuple[int, int], tuple[list, list]] = {}
        self._next_id = 0
        self.gets = gets if gets is not None or self.device.type != "cuda" else SideStreamGets(self.device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # every stream: the gets' side stream too

    def alloc(self, length: int, dtype: Any = torch.float64) -> Region:
        dtype = as_dtype(dtype)
        if length < 0:
            raise ValueError(f"region length must be >= 0, got {length}")
        lengths = self._all_lengths(length)
        # symmetric allocations must have the same size everywhere: round up to the largest request
        tensor = self.symm_mem.empty(max(max(lengths), 1), dtype=dtype, device=self.device)
        tensor.zero_()
        self._sync()  # zeroed before any peer can read it
        # collective (every rank's handle is exchanged), so it returns only once every rank zeroed its memory:
        # no barrier needed after it
        handle = self.symm_mem.rendezvous(tensor, self.group)
        region = Region(self._next_id, dtype, lengths)
        self._next_id += 1
        self._tensors[region.id], self._handles[region.id] = tensor, handle
        return region

    def _all_lengths(self, length: int) -> tuple[int, ...]:
        """Every rank's requested length: one tensor all-gather (``allgather`` pickles: two collectives)."""
        mine = torch.tensor([int(length)], dtype=torch.int64, device=self.device)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        self.dist.all_gather(out, mine, group=self.group)
        return tuple(int(n) for n in torch.cat(out).tolist())

    def local(self, region: Region) -> torch.Tensor:
        return self._tensors[region.id][:region.lengths[self.rank]]

    def _peer(self, rank: int, region: Region, offset: int, count: int) -> torch.Tensor:
        """``count`` elements at ``offset`` of ``rank``'s allocation, as a tensor aliasing the peer's memory."""
        return self._handles[region.id].get_buffer(rank, (count,), region.dtype, offset)

    def get_async(self, rank: int, region: Region, offset: int, count: int) -> Future:
        self._check_range(rank, region, offset, count)
        nbytes = count * region.dtype.itemsize
        if count == 0 or self.gets is None:
            out = torch.empty(count, dtype=region.dtype, device=self.device)
            if count:
                out.copy_(self._peer(rank, region, offset, count))
            return Future.ready(out, nbytes)
        gets = self.gets
        out, done = gets.start(self._peer(rank, region, offset, count))
        return Future(lambda: gets.finish(out, done), nbytes)

    def put(self, rank: int, region: Region, offset: int, data: Any) -> None:
        data = torch.as_tensor(data).to(dtype=region.dtype, device=self.device).reshape(-1)
        self._check_range(rank, region, offset, data.numel())
        if data.numel():
            self._peer(rank, region, offset, data.numel()).copy_(data)
            self._sync()  # remotely complete on return

    def fetch_add(self, rank: int, region: Region, offset: int, value: int) -> int:
        if region.dtype != torch.int64:
            raise ValueError(f"fetch_add needs an int64 region, region {region.id} is {region.dtype}")
        self._check_range(rank, region, offset, 1)
        return self._remote_fetch_add(self._peer(rank, region, offset, 1), int(value))

    def _remote_fetch_add(self, target: torch.Tensor, value: int) -> int:
        """One hardware atomic on a peer-mapped int64 (the emulation adds a lock around it)."""
        return atomic_fetch_add(target, value)

    def can_communicate(self) -> bool:
        """False once the group (or the default group) was destroyed, e.g. by ``distributed_job``."""
        return is_alive(self.group)

    def barrier(self) -> None:
        self._sync()
        self.dist.barrier(group=self.group)

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def grid_broadcast(self, rows: int, cols: int):
        """Row and column process groups (created once per grid shape, cached) and
        ``torch.distributed.broadcast`` over them; ``new_group`` is collective over the default
        group, so every rank of the job must call SUMMA, as it does with the default ``group``."""
        members = self.dist.get_process_group_ranks(self.group)  # global ranks, in group-rank order
        if (rows, cols) not in self._grid_groups:
            self._grid_groups[rows, cols] = (
                [self.dist.new_group([members[r * cols + c] for c in range(cols)]) for r in range(rows)],
                [self.dist.new_group([members[r * cols + c] for r in range(rows)]) for c in range(cols)])
        row_groups, col_groups = self._grid_groups[rows, cols]
        r, c = divmod(self.rank, cols)

        def bcast(group: Any, ranks: list[int]):
            def broadcast(tensor: torch.Tensor, root: int) -> None:
                check_devices("grid_broadcast", group, tensor)
                self.dist.broadcast(tensor, src=ranks[root], group=group)
            return broadcast
        return (bcast(row_groups[r], [members[r * cols + j] for j in range(cols)]),
                bcast(col_groups[c], [members[i * cols + c] for i in range(rows)]), lambda: None)

    def free(self, region: Region) -> None:
        self.barrier()  # no peer still reads or updates the allocation
        self._handles.pop(region.id)
        self._tensors.pop(region.id)

    def close(self) -> None:
        """Frees every region (collective)."""
        for rid in sorted(self._tensors):
            self.free(Region(rid, torch.uint8, ()))
