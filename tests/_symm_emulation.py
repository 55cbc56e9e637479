"""A CPU stand-in for ``torch.distributed._symmetric_memory``, so that
:class:`~pyg_sparsecomm.rdma.symm_backend.SymmetricMemoryBackend` runs its real code without a GPU.

What is emulated, and how:

* ``empty(n, dtype=, device="cpu")`` maps a fresh file in a directory shared by the
  job's processes (``torch.from_file(..., shared=True)``): the "symmetric heap";
* ``rendezvous(tensor, group)`` all-gathers every rank's file name (collective, like
  the real one) and returns a handle whose ``get_buffer(peer, sizes, dtype, offset)``
  maps the peer's file and returns the requested range — a tensor that aliases the
  peer's memory, which is what the real handle returns over NVLink P2P;
* the remote atomic runs the backend's own Triton kernel in Triton's interpreter
  (``TRITON_INTERPRET=1``, set by :func:`emulated_backend`), under an ``fcntl`` lock,
  because the interpreter's atomic is not atomic *across processes* (on a GPU the
  hardware provides that).  The interpreter spends ~20 ms per call re-patching
  ``triton.language`` (measured: 51 of the 73 s of a rank of the P = 2 algorithm check,
  half of it peers waiting on the lock), so a check of what is *built on* the atomic
  (products of the tile algorithms, the GCN engine) may set ``interpret_atomics = False``:
  the same fetch-and-add on the same peer memory under the same lock, as one torch op.  The
  kernel itself stays checked where it is the subject (the queue, the work-stealing claims,
  ``test_fetch_add_kernel_returns_old_value``).

* the ordering of gets (on a GPU: copies on a side stream that the consumer's stream waits
  for, :class:`~pyg_sparsecomm.rdma.symm_backend.SideStreamGets`) by :class:`DeferredGets`:
  a get's buffer holds garbage (NaN, -1) until its future is waited for, when the copy lands,
  and every start and wait is logged in order — so a consumer that reads a get before waiting
  for it computes garbage, and a test can check that gets are started ahead of their use.

Everything else — region bookkeeping, offsets, dtypes, gets, puts, barriers,
all-gathers — is the production code of ``SymmetricMemoryBackend``.
"""
import fcntl
import itertools
import math
import os

import torch
import torch.distributed as dist

from pyg_sparsecomm.rdma.symm_backend import SymmetricMemoryBackend


class EmulatedSymmetricMemory:
    """``empty`` / ``rendezvous`` of the symmetric-memory API over shared files in ``workdir``."""

    def __init__(self, workdir: str, rank: int) -> None:
        self.workdir, self.rank, self._count = workdir, rank, itertools.count()
        self._files: dict[int, str] = {}  # data_ptr -> file of that allocation

    def empty(self, *size, dtype=None, device=None) -> torch.Tensor:
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        if torch.device(device).type != "cpu":
            raise ValueError("the emulated symmetric heap is host memory")
        path = os.path.join(self.workdir, f"rank{self.rank}_alloc{next(self._count)}")
        tensor = torch.from_file(path, shared=True, size=math.prod(size), dtype=dtype).view(size)
        self._files[tensor.data_ptr()] = path
        return tensor

    def rendezvous(self, tensor: torch.Tensor, group) -> "EmulatedHandle":
        peers = [None] * dist.get_world_size(group)
        dist.all_gather_object(peers, (self._files[tensor.data_ptr()], tensor.numel(), tensor.dtype), group=group)
        if len({(n, dt) for _, n, dt in peers}) != 1:
            raise ValueError(f"rendezvous needs identical allocations on every rank, got {peers}")
        return EmulatedHandle(peers)


class EmulatedHandle:
    """``get_buffer`` of a rendezvous: views of the peers' allocations (bounds-checked like the real one)."""

    def __init__(self, peers: list) -> None:
        self.peers, self._maps = peers, {}

    def get_buffer(self, rank: int, sizes, dtype: torch.dtype, storage_offset: int = 0) -> torch.Tensor:
        path, numel, alloc_dtype = self.peers[rank]
        if rank not in self._maps:
            self._maps[rank] = torch.from_file(path, shared=True, size=numel, dtype=alloc_dtype)
        buf = self._maps[rank].view(dtype)
        count = math.prod(sizes)
        if storage_offset < 0 or storage_offset + count > buf.numel():
            raise RuntimeError(f"get_buffer: [{storage_offset}, {storage_offset + count}) exceeds the buffer "
                               f"of {buf.numel()} elements")
        return buf[storage_offset:storage_offset + count].view(tuple(sizes))


class DeferredGets:
    """``SideStreamGets`` on the CPU: the copy happens when the consumer waits (``log``: the order)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        self._count = itertools.count()

    def start(self, src: torch.Tensor):
        n = next(self._count)
        garbage = float("nan") if src.is_floating_point() else -1
        self.log.append(("start", n))
        return torch.full(src.shape, garbage, dtype=src.dtype), (n, src)

    def finish(self, out: torch.Tensor, token) -> torch.Tensor:
        n, src = token
        out.copy_(src)
        self.log.append(("wait", n))
        return out


class EmulatedSymmetricMemoryBackend(SymmetricMemoryBackend):
    """The production backend on the emulated heap; only the atomic gets a cross-process lock."""

    def __init__(self, workdir: str, group=None) -> None:
        rank = dist.get_rank(group)
        super().__init__("cpu", group, symm_mem=EmulatedSymmetricMemory(workdir, rank), gets=DeferredGets())
        self._lock_path = os.path.join(workdir, "atomics.lock")
        self.interpret_atomics = True  # False: the atomic as one torch op (see the module's docstring)

    def _remote_fetch_add(self, target: torch.Tensor, value: int) -> int:
        with open(self._lock_path, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                if not self.interpret_atomics:
                    old = int(target[0])
                    target[0] += value
                    return old
                return super()._remote_fetch_add(target, value)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def emulated_backend(workdir: str) -> EmulatedSymmetricMemoryBackend:
    """Call in every rank of a gloo job (before anything imports the Triton kernel)."""
    os.environ["TRITON_INTERPRET"] = "1"
    return EmulatedSymmetricMemoryBackend(workdir)
