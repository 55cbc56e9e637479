"""``algorithm="rdma"``: the GCN SpMM through the one-sided stationary-C engine (issue #5 part 2, item 5).

The backend follows the adjacency's device (:func:`pyg_sparsecomm.rdma.make_backend`):
on CPU the MPI one-sided backend, which needs ``mpiexec`` *and* ``torch.distributed``
initialised with the same ranks (the layer's group); on CUDA PyTorch symmetric memory
over the default ``torch.distributed`` group (written to the API, not run here: no GPU).  The name is registered
when :mod:`pyg_sparsecomm.algorithms` is imported (it imports this module), so
``DistributedGCNConv(algorithm="rdma")`` works without importing anything else.

**Engine lifetime.**  Building the tiled adjacency (an *engine*) is collective,
and so is freeing it (its windows).  Engines are shared: identical adjacencies
(same values on every rank) get the same engine, handed out as a *lease*.  A
lease is held by every :class:`RDMAStationaryC` (released by its collective
:meth:`RDMAStationaryC.close`, or when the object is garbage-collected) and by
every autograd node of a forward pass (released when the graph is freed), so an
engine is never freed while a layer or a pending backward still uses it.  Leases
are counted locally at any time; engines are *freed* only at collective points —
when an engine is looked up (every rank builds an algorithm at the same point) and
in :func:`free_engines` — and only engines that are unreferenced on **every** rank
(their keys are all-gathered), so all ranks free the same engines in the same
order.  At most :data:`MAX_IDLE_ENGINES` unreferenced engines stay cached for reuse
(uncached layers rebuild their algorithm every forward).  :func:`free_engines`
(collective) frees every engine and is also registered with :mod:`atexit`,
together with closing the backend, so no window is left in use when MPI finalises.
"""
from __future__ import annotations

import atexit
import hashlib
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..adj import HaloAdj
from ..rdma.kernels import csr_tile, tile_product
from .base import SpMMAlgorithm

#: unreferenced engines kept cached (oldest freed first); referenced engines are never freed
MAX_IDLE_ENGINES = 4
#: engine key -> engine, least recently looked up first (identical keys and order on every rank)
_ENGINES: OrderedDict = OrderedDict()
_BACKEND = None
_LOCK = threading.Lock()  # lease counts may drop from a garbage-collecting thread


def _backend(device: torch.device | str | None = None):
    """The process's one-sided backend, created for ``device`` on first use (one device type per process)."""
    global _BACKEND
    if _BACKEND is None:
        from ..rdma import make_backend
        _BACKEND = make_backend(device if device is not None else "cpu")
        atexit.register(_shutdown)  # runs before mpi4py's MPI_Finalize (registered earlier, atexit is LIFO)
    elif device is not None and torch.device(device).type != _BACKEND.device.type:
        raise RuntimeError(f"algorithm='rdma' already runs on a {_BACKEND.device.type} backend in this process; "
                           f"got an adjacency on {torch.device(device)}")
    return _BACKEND


def set_backend(backend: Any) -> None:
    """Runs ``algorithm="rdma"`` in this process on ``backend`` (an
    :class:`~pyg_sparsecomm.rdma.RMABackend`, e.g. ``MPIBackend(heap_bytes=...)`` or a
    ``SymmetricMemoryBackend`` on a chosen group) instead of ``make_backend(device)``.

    Call on every rank before the first ``rdma`` layer is built; refused once engines exist.
    """
    global _BACKEND
    if _ENGINES:
        raise RuntimeError("set_backend must be called before the first algorithm='rdma' layer is built "
                           "(or after free_engines())")
    if _BACKEND is None:
        atexit.register(_shutdown)
    _BACKEND = backend


class _Lease:
    """One reference to an engine; ``release()`` (idempotent, also on garbage collection) drops it."""

    def __init__(self, engine: _TiledAdjacency) -> None:
        self.engine = engine
        with _LOCK:
            engine.users += 1
        self._finalizer = weakref.finalize(self, _TiledAdjacency._drop, engine)

    def release(self) -> None:
        self._finalizer()


class _TiledAdjacency:
    r"""``A`` and ``A^T`` as :class:`~pyg_sparsecomm.rdma.SparseTiledMatrix` on a ``P x 1`` process grid.

    Rank ``r``'s owned rows become padded global rows ``[r T, r T + n_r)`` with
    ``T = max_r n_r``, so tile row ``r`` (tile shape ``T x T``) is exactly rank
    ``r``'s block row ``A_{r,:}`` and ``H``'s tile ``r`` its owned rows.  Rank ``k``
    builds its tiles of ``A^T`` by *getting* ``A_{rk}`` from every rank ``r`` with a
    non-empty block.  Empty blocks take no storage (passed as O(1) empty COO tiles,
    not stored by :class:`~pyg_sparsecomm.rdma.SparseTiledMatrix`), so a rank holds
    its own non-zeros, the ``P x P`` directory and its ``H`` buffers — never ``O(N)``.

    ``H`` lives in two reused dense tiled buffers per feature width (see
    :meth:`multiply`); each product needs exactly one collective (a barrier).
    """

    def __init__(self, adj: HaloAdj) -> None:
        from ..rdma import SparseTiledMatrix, TileProcessGrid
        plan, be = adj.plan, _backend(adj.rowptr.device)
        P, me = plan.world_size, plan.rank
        self.users, self.freed = 0, False
        self.T = T = max(max(int(s) for s in plan.part_sizes), 1)
        self.n, self.pgrid = plan.num_owned, TileProcessGrid(P, 1)
        row, col = adj.coo()
        value = adj.values(torch.float64).detach()
        owner, remote = plan.locate_columns(col)
        tiles = {}
        for j in range(P):
            sel = owner == j
            tiles[me, j] = (torch.sparse_coo_tensor(torch.stack([row[sel], remote[sel]]), value[sel], (T, T))
                            if sel.any() else torch.sparse_coo_tensor(size=(T, T)))  # empty: O(1), not stored
        self.A = SparseTiledMatrix.from_local_tiles(be, (P * T, P * T), (T, T), tiles, self.pgrid)
        fetched = {r: self.A.async_get_tile(r, me) for r in range(P)}  # empty blocks: no get
        t_tiles = {}
        for r, fut in fetched.items():
            block = fut.wait()
            t_tiles[me, r] = (block.to_sparse_coo().t().coalesce() if block._nnz()
                              else torch.sparse_coo_tensor(size=(T, T)))
        self.AT = SparseTiledMatrix.from_local_tiles(be, (P * T, P * T), (T, T), t_tiles, self.pgrid)
        self.blocks = {id(self.A): self._blocks(self.A), id(self.AT): self._blocks(self.AT)}
        self._buffers: dict[int, list] = {}  # feature width -> [two DenseTiledMatrix, next index]

    def _blocks(self, M: Any) -> list[tuple[int, Tensor, int, int]]:
        """This rank's non-empty blocks ``(k, M_rk[:, lo:hi], lo, hi)`` in the paper's ``k = (r + t) mod P`` order.

        ``[lo, hi)`` is the range of columns the block uses, so a product fetches only
        rows ``lo..hi-1`` of ``H_k`` (one contiguous get), not the whole tile.
        """
        r, P = M.backend.rank, M.grid_shape[1]
        out = []
        for k in ((r + t) % P for t in range(P)):
            if M.nnz(r, k) == 0:
                continue
            tile = M.get_tile(r, k)  # owned: tile row r lives on rank r
            cols = tile.col_indices()
            lo, hi = int(cols.min()), int(cols.max()) + 1
            # rows >= n are padding (empty), so the first n + 1 row pointers describe the block
            out.append((k, csr_tile(tile.values(), tile.crow_indices()[:self.n + 1], cols - lo, (self.n, hi - lo)),
                        lo, hi))
        return out

    def _buffer(self, f: int):
        """The next of two ``(P T) x f`` dense tiled ``H`` buffers, allocated (collectively) on first use.

        Alternating two buffers makes one barrier per product enough: a rank writes
        buffer ``b`` only after the barrier of its previous product, which every rank
        entered after finishing the reads of the last product that used ``b``.
        """
        from ..rdma import DenseTiledMatrix
        be = _backend()
        if f not in self._buffers:
            zero = {(be.rank, 0): torch.zeros(self.T, f, dtype=torch.float64, device=be.device)}
            shape = (self.pgrid.rows * self.T, f)
            self._buffers[f] = [[DenseTiledMatrix.from_local_tiles(be, shape, (self.T, f), zero, self.pgrid)
                                 for _ in range(2)], 0]
        pair = self._buffers[f]
        H = pair[0][pair[1]]
        pair[1] ^= 1
        return H

    def multiply(self, M: Any, x: Tensor) -> Tensor:
        """Owned rows of ``M H`` where ``x`` holds this rank's rows of ``H`` (collective: one barrier).

        Stationary-C (ICS'24 Algorithm 2) with the ``A``-tile row local: for every
        non-empty block ``M_rk`` rank ``r`` gets rows ``[lo, hi)`` of ``H_k`` (the next
        get is issued before the current product) and accumulates ``M_rk H_k``.
        """
        if self.freed:
            raise RuntimeError("algorithm='rdma': this tiled adjacency was freed (free_engines() or exit); "
                               "build the layer's algorithm again")
        be = _backend()
        f = x.size(1)
        H = self._buffer(f)
        mine = H.local_tile(be.rank, 0)
        mine[:self.n] = x.detach().to(mine)
        be.barrier()  # every rank's H rows are written and visible
        region, out = H.regions[0], torch.zeros(self.n, f, dtype=torch.float64, device=be.device)
        blocks = self.blocks[id(M)]

        def fetch(b: tuple) -> Any:
            k, _, lo, hi = b
            if k == be.rank:
                return None
            return be.get_async(k, region, int(H.directory[k, 0, 1]) + lo * f, (hi - lo) * f)
        pending = fetch(blocks[0]) if blocks else None
        for n, (_k, tile, lo, hi) in enumerate(blocks):
            h = mine[lo:hi] if pending is None else pending.wait().reshape(hi - lo, f)
            pending = fetch(blocks[n + 1]) if n + 1 < len(blocks) else None
            out += tile_product(tile, h)
        return out.to(dtype=x.dtype, device=x.device)

    @staticmethod
    def _drop(engine: _TiledAdjacency) -> None:
        with _LOCK:
            engine.users -= 1

    def free(self) -> None:
        """Collectively frees ``A``, ``A^T`` and the ``H`` buffers (all ranks, same point)."""
        if self.freed:
            return
        self.freed = True
        for pair, _ in self._buffers.values():
            for H in pair:
                H.free()
        self._buffers.clear()
        self.A.free()
        self.AT.free()


def _fingerprint(adj: HaloAdj) -> str:
    h = hashlib.blake2b(digest_size=16)
    for t in (adj.rowptr, adj.col, adj.values(torch.float64).detach()):
        h.update(t.cpu().contiguous().numpy().tobytes())
    h.update(np.asarray(adj.plan.part_sizes, dtype=np.int64).tobytes())
    return h.hexdigest()


def _idle() -> list:
    with _LOCK:
        return [key for key, engine in _ENGINES.items() if engine.users <= 0]


def _evict(idle_everywhere: list, keep: int) -> None:
    """Frees the oldest engines of ``idle_everywhere`` (computed identically on every rank) beyond ``keep``."""
    victims = [key for key in _ENGINES if key in set(idle_everywhere)]
    for key in victims[:max(len(victims) - keep, 0)]:
        _ENGINES.pop(key).free()


def _lease(adj: HaloAdj) -> _Lease:
    """A lease on the tiled adjacency of ``adj``, built collectively once and shared by later layers and calls.

    Collective.  Every rank must take the same branch: the key is the all-gathered
    tuple of every rank's local fingerprint (two adjacencies can coincide on one rank
    and differ on another), and the engines freed are those unreferenced on every rank
    (all-gathered with the fingerprint), so the caches stay identical.
    """
    gathered = _backend().allgather((_fingerprint(adj), _idle()))
    key = tuple(fp for fp, _ in gathered)
    idle = set.intersection(*(set(part) for _, part in gathered)) - {key}
    if key in _ENGINES:
        _ENGINES.move_to_end(key)
    else:
        _ENGINES[key] = _TiledAdjacency(adj)
    lease = _Lease(_ENGINES[key])
    _evict([k for k in _ENGINES if k in idle], MAX_IDLE_ENGINES)
    return lease


class _RDMASpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, lease: _Lease) -> Tensor:
        ctx.lease = _Lease(lease.engine)  # the graph's own reference: released when the graph is freed
        return lease.engine.multiply(lease.engine.A, x)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor, None]:
        engine = ctx.lease.engine
        return engine.multiply(engine.AT, grad_out), None  # dH = A^T dY, exact for directed A


class RDMAStationaryC(SpMMAlgorithm):
    r"""Stationary-C SpMM over one-sided gets (ICS'24 Algorithm 2) on a ``P x 1`` process grid.

    .. math:: (A H)_r = \sum_{k} A_{r,k} H_k

    Rank ``r`` gets, for each non-empty block ``A_{rk}``, the contiguous range of
    ``H_k``'s rows between the smallest and largest column the block uses, prefetching
    the next range while multiplying.  **Volume**: this is the *oblivious* algorithm's
    volume restricted to non-empty blocks and trimmed to each block's column range —
    rows inside the range that the block does not use are fetched too (no
    sparsity-aware packing; use ``algorithm="1d"`` for the minimal volume).  Memory per
    rank: its non-zeros, two ``T x f`` ``H`` buffers per feature width (``T`` = largest
    part) and what it fetches.  One barrier per SpMM.  Backward: the same with the tiled
    ``A^T``.  Computed in float64 with the torch tile kernels on the adjacency's device;
    on CPU it must run under ``mpiexec`` with torch.distributed ranks equal to MPI ranks.

    The engine is shared through a lease (see the module docstring); :meth:`close`
    releases it collectively, and it is also released when this object is collected.
    """
    name = "rdma"
    differentiates_edge_weights = False

    def __init__(self, adj: HaloAdj, group: dist.ProcessGroup | None = None, grid: Any = None) -> None:
        super().__init__(adj, group, grid)
        be = _backend(adj.rowptr.device)
        if (be.world_size, be.rank) != (adj.plan.world_size, adj.plan.rank):
            raise RuntimeError(f"algorithm='rdma' needs MPI ranks equal to the shard's ranks: MPI rank "
                               f"{be.rank} of {be.world_size}, shard part {adj.plan.rank} of "
                               f"{adj.plan.world_size}; launch with mpiexec -n {adj.plan.world_size}")
        self._lease: _Lease | None = _lease(adj)

    @property
    def engine(self) -> _TiledAdjacency:
        if self._lease is None:
            raise RuntimeError("this RDMAStationaryC was closed")
        return self._lease.engine

    def __call__(self, x: Tensor) -> Tensor:
        if self._lease is None:
            raise RuntimeError("this RDMAStationaryC was closed")
        return _RDMASpMM.apply(x, self._lease)

    def close(self) -> None:
        """Collective: releases this layer's engine; unreferenced engines beyond the cache size are freed.

        Pending backward passes keep their own reference, so closing before ``backward``
        is safe.  Idempotent per object, but every rank must call it at the same point.
        """
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        collect()


def collect(keep: int = MAX_IDLE_ENGINES) -> None:
    """Collective: frees the engines unreferenced on every rank, oldest first, keeping ``keep`` of them."""
    if not _ENGINES and _BACKEND is None:
        return
    gathered = _backend().allgather(_idle())
    _evict(list(set.intersection(*(set(part) for part in gathered))), keep)


def free_engines() -> None:
    """Collectively frees every cached tiled adjacency, referenced or not (call on all ranks at the same point).

    A layer or a pending backward that still uses a freed engine then raises a clear
    RuntimeError instead of reading freed memory.  Registered with :mod:`atexit`.
    """
    while _ENGINES:
        _ENGINES.popitem(last=False)[1].free()


def _shutdown() -> None:
    """atexit: free every engine and close the backend's windows while MPI is still initialised."""
    global _BACKEND
    if _BACKEND is None:
        return
    try:
        MPI = getattr(_BACKEND, "MPI", None)
        if MPI is not None and (MPI.Is_finalized() or not MPI.Is_initialized()):
            return
        free_engines()
        _BACKEND.close()
    finally:
        _BACKEND = None
