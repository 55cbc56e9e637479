"""PyTorch symmetric-memory backend (CUDA tensors, NVLink P2P / NVSHMEM), the paper's GPU setting.

Written against ``torch.distributed._symmetric_memory`` (alpha API):
``symm_mem.empty(n, dtype=, device=)`` allocates from the symmetric heap,
``symm_mem.rendezvous(tensor, group)`` exchanges the handles collectively, and
``handle.get_buffer(peer, sizes, dtype, storage_offset)`` returns a CUDA tensor
aliasing ``peer``'s allocation, so a one-sided get/put is a device copy from/to
that view (no action by the peer).

**Status: an untested transport sketch, not a usable backend.**  It was
written to the PyTorch spec and has never been run (the development machine has
no GPU; nothing CUDA is exercised by the tests).  It cannot run any algorithm:
the tiled matrices and tile kernels (:mod:`pyg_sparsecomm.rdma.tiled`,
:mod:`pyg_sparsecomm.rdma.kernels`) are numpy/scipy host code and refuse a
backend without ``host_kernels`` (this one has ``host_kernels = False``), and
``fetch_add`` needs a remote atomic, which the Python symmetric-memory API does
not expose, so it raises ``NotImplementedError`` rather than emulate an atomic
with a racy get+put.  For that reason it is not exported from
:mod:`pyg_sparsecomm.rdma` and ``make_backend("cuda")`` raises
``NotImplementedError``; it is importable from this module only for experiments
with the raw ``alloc``/``get``/``put``/``barrier`` primitives.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .backend import Future, Region, RMABackend, as_dtype


def check_symmetric_memory_available(device: Any) -> None:
    """Raises RuntimeError naming what is missing for the symmetric-memory backend."""
    import torch
    import torch.distributed as dist
    if torch.device(device).type != "cuda":
        raise RuntimeError(f"SymmetricMemoryBackend needs a CUDA device, got {device!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("SymmetricMemoryBackend needs CUDA, but torch.cuda.is_available() is False "
                           "(CPU-only build or no GPU); use make_backend('cpu') for the MPI backend")
    try:
        import torch.distributed._symmetric_memory
    except ImportError as exc:
        raise RuntimeError("this PyTorch build has no torch.distributed._symmetric_memory") from exc
    if not dist.is_initialized():
        raise RuntimeError("SymmetricMemoryBackend needs torch.distributed.init_process_group(...) first")


class SymmetricMemoryBackend(RMABackend):
    """``get``/``put`` through peer-mapped symmetric-memory tensors of ``group`` (default world).

    Untested sketch (no GPU here); cannot run any algorithm, see the module docstring.
    """
    host_kernels = False

    def __init__(self, device: Any = "cuda", group: Any | None = None) -> None:
        check_symmetric_memory_available(device)
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem
        self.torch, self.dist, self.symm_mem = torch, dist, symm_mem
        self.device = torch.device(device)
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self._tensors: dict[int, Any] = {}
        self._handles: dict[int, Any] = {}
        self._next_id = 0

    def _torch_dtype(self, dtype: np.dtype):
        return {np.dtype(np.float64): self.torch.float64, np.dtype(np.float32): self.torch.float32,
                np.dtype(np.int64): self.torch.int64}[dtype]

    def alloc(self, length: int, dtype: Any = np.float64) -> Region:
        dtype = as_dtype(dtype)
        lengths = tuple(int(n) for n in self.allgather(int(length)))
        # symmetric heaps need identical sizes on every rank: round up to the largest request
        tensor = self.symm_mem.empty(max(max(lengths), 1), dtype=self._torch_dtype(dtype), device=self.device)
        tensor.zero_()
        handle = self.symm_mem.rendezvous(tensor, self.group)
        region = Region(self._next_id, dtype, lengths)
        self._next_id += 1
        self._tensors[region.id], self._handles[region.id] = tensor, handle
        handle.barrier()
        return region

    def local(self, region: Region) -> Any:
        return self._tensors[region.id][:region.lengths[self.rank]]

    def _peer(self, rank: int, region: Region, offset: int, count: int):
        return self._handles[region.id].get_buffer(rank, (count,), self._torch_dtype(region.dtype), offset)

    def get_async(self, rank: int, region: Region, offset: int, count: int) -> Future:
        self._check_range(rank, region, offset, count)
        out = self.torch.empty(count, dtype=self._torch_dtype(region.dtype), device=self.device)
        if count:
            out.copy_(self._peer(rank, region, offset, count), non_blocking=True)
        done = self.torch.cuda.Event()
        done.record()

        def finish() -> Any:
            done.synchronize()
            return out
        return Future(finish, out.numel() * out.element_size())

    def put(self, rank: int, region: Region, offset: int, data: Any) -> None:
        data = self.torch.as_tensor(data, dtype=self._torch_dtype(region.dtype), device=self.device).reshape(-1)
        self._check_range(rank, region, offset, data.numel())
        if data.numel():
            self._peer(rank, region, offset, data.numel()).copy_(data)
            self.torch.cuda.current_stream().synchronize()

    def fetch_add(self, rank: int, region: Region, offset: int, value: int) -> int:
        raise NotImplementedError("SymmetricMemoryBackend.fetch_add: torch.distributed._symmetric_memory has no "
                                  "Python remote atomic fetch-and-add; stationary-A queues and work stealing "
                                  "need the MPI backend (or an NVSHMEM atomic binding)")

    def barrier(self) -> None:
        self.torch.cuda.synchronize(self.device)
        self.dist.barrier(group=self.group)

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.dist.get_world_size(self.group)
        self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def free(self, region: Region) -> None:
        self.barrier()  # no peer may still be reading the allocation
        self._handles.pop(region.id)
        self._tensors.pop(region.id)
