"""``algorithm="rdma"``: the GCN SpMM through the one-sided stationary-C engine (issue #5 part 2, item 5).

The backend follows the adjacency's device (:func:`pyg_sparsecomm.rdma.make_backend`):
on CPU the MPI one-sided backend, which needs ``mpiexec`` *and* ``torch.distributed``
initialised with the same ranks (the layer's group); on CUDA PyTorch symmetric memory
over the default ``torch.distributed`` group (written to the API, not run here: no GPU).  The name is declared
when :mod:`pyg_sparsecomm.algorithms` is imported and this module (with the engine) imported at the
first lookup of the class, so ``DistributedGCNConv(algorithm="rdma")`` works without importing
anything else and code that never uses it never loads the engine.

The tiled adjacency (the *engine*) is built collectively, shared between layers with
identical adjacencies and freed collectively by :mod:`pyg_sparsecomm.rdma.engine_cache`
(leases, eviction, :func:`free_engines` at exit); :func:`set_backend`,
:func:`free_engines`, :func:`collect` and :data:`MAX_IDLE_ENGINES` are re-exported here.

**Counted bytes.**  Every product records in
:func:`~pyg_sparsecomm.comm.counters.comm_counter` the rows it gets from each peer as
received and the rows each peer gets from this rank as sent (kinds ``"rdma"`` forward,
``"rdma_grad"`` backward; float64, 8 bytes per element), and building ``A^T`` records
the tiles of ``A`` it gets (``"rdma_setup"``).  :meth:`RDMAStationaryC.predict` gives
the same per-product figure from the partition (:attr:`~pyg_sparsecomm.plan.homogeneous.CommPattern.spans`).
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.counters import comm_counter
from ..comm.exchanger import HaloExchanger
from ..plan.halo_adj import HaloAdj
from ..rdma import engine_cache
from ..rdma.engine_cache import MAX_IDLE_ENGINES, Lease, collect, free_engines, set_backend
from ..rdma.kernels import csr_tile, tile_product
from ..rdma.tile_grid import TileProcessGrid
from ..rdma.tiled import DenseTiledMatrix, SparseTiledMatrix
from .base import SpMMAlgorithm
from .cost import CostModel, Prediction, RankVolumes, RowBytes

__all__ = ["RDMAStationaryC", "MAX_IDLE_ENGINES", "set_backend", "free_engines", "collect"]


def _row_span(tile: Tensor) -> int:
    """Rows from the first to the last non-empty row of a CSR tile (0 if it is empty)."""
    rows = torch.nonzero(torch.diff(tile.crow_indices())).flatten()
    return int(rows[-1] - rows[0]) + 1 if rows.numel() else 0


def _empty_tile(T: int) -> Tensor:
    """An all-zero ``T x T`` sparse tile without storage (O(1) memory)."""
    # torch's stubs lack the size-only overload of sparse_coo_tensor that the runtime accepts
    return torch.sparse_coo_tensor(size=(T, T), check_invariants=False)  # type: ignore[call-arg]


def _tile_nbytes(M: SparseTiledMatrix, i: int, j: int) -> int:
    """Bytes one get of CSR tile ``(i, j)`` moves: values, row pointers and column indices."""
    rows, nnz = int(M.directory[i, j, 4]), M.nnz(i, j)
    values, indptr, indices = (region.dtype.itemsize for region in M.regions)
    return 0 if nnz == 0 else nnz * (values + indices) + (rows + 1) * indptr


class TiledAdjacency:
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
    Entries whose value is exactly zero are not stored (so not fetched for).
    """

    def __init__(self, adj: HaloAdj) -> None:
        plan, be = adj.plan, engine_cache.backend(adj.rowptr.device)
        self.users, self.freed = 0, False
        self.T = max(max(int(s) for s in plan.part_sizes), 1)
        self.n, self.pgrid = plan.num_owned, TileProcessGrid(plan.world_size, 1)
        shape, tile = (plan.world_size * self.T,) * 2, (self.T, self.T)
        self.A = SparseTiledMatrix.from_local_tiles(be, shape, tile, self._local_tiles(adj), self.pgrid)
        self.AT = SparseTiledMatrix.from_local_tiles(be, shape, tile, self._transposed_tiles(), self.pgrid)
        self.blocks = {id(self.A): self._blocks(self.A), id(self.AT): self._blocks(self.AT)}
        #: rows (served to, fetched from) every peer by one product with A / A^T
        self.traffic = {id(self.A): self._traffic(self.A, self.AT), id(self.AT): self._traffic(self.AT, self.A)}
        self._buffers: dict[int, list] = {}  # feature width -> [two DenseTiledMatrix, next index]

    def _local_tiles(self, adj: HaloAdj) -> dict:
        """This rank's tiles ``A_{me, j}``: its block row split by the owner of every column."""
        plan, T = adj.plan, self.T
        row, col = adj.coo()
        owner, remote = plan.locate_columns(col)
        value = adj.values(torch.float64).detach()
        tiles = {}
        for j in range(plan.world_size):
            sel = owner == j
            # the shard's own indices: no invariant check (said explicitly, else torch warns once per process)
            tiles[plan.rank, j] = (torch.sparse_coo_tensor(torch.stack([row[sel], remote[sel]]), value[sel], (T, T),
                                                           check_invariants=False)
                                   if sel.any() else _empty_tile(T))
        return tiles

    def _transposed_tiles(self) -> dict:
        """This rank's tiles of ``A^T``, ``(A^T)_{me, r} = A_{r, me}^T``, got from every rank ``r``
        (counted as ``"rdma_setup"``: the tiles got, and this rank's tiles the others get)."""
        A, me, P = self.A, self.A.backend.rank, self.pgrid.rows
        fetched = {r: A.async_get_tile(r, me) for r in range(P)}  # empty blocks: no get
        t_tiles = {}
        for r, fut in fetched.items():
            block = fut.wait()
            t_tiles[me, r] = (block.to_sparse_coo().t().coalesce() if block._nnz()
                              else _empty_tile(self.T))
        remote = [r for r in range(P) if r != me]
        sent, received = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
        sent[remote] = [_tile_nbytes(A, me, r) for r in remote]
        received[remote] = [_tile_nbytes(A, r, me) for r in remote]
        comm_counter().record("rdma_setup", sent, received)
        return t_tiles

    def _blocks(self, M: SparseTiledMatrix) -> list[tuple[int, Tensor, int, int]]:
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

    def _traffic(self, M: SparseTiledMatrix, Mt: SparseTiledMatrix) -> tuple[np.ndarray, np.ndarray]:
        r"""Rows ``(served, fetched)`` per peer in one product with ``M`` (``Mt`` its transpose).

        Rank ``k`` fetches from this rank ``me`` the column range of ``M_{k,me}``, which is
        the row range of ``Mt_{me,k}`` (``Mt = M^T``, stored here); this rank fetches
        ``hi - lo`` rows for each of its remote blocks (:meth:`_blocks`).
        """
        me, P = M.backend.rank, self.pgrid.rows
        served, fetched = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
        for k in range(P):
            if k != me and Mt.nnz(me, k):
                served[k] = _row_span(Mt.get_tile(me, k))
        for k, _, lo, hi in self.blocks[id(M)]:
            fetched[k] = 0 if k == me else hi - lo
        return served, fetched

    def _buffer(self, f: int) -> DenseTiledMatrix:
        """The next of two ``(P T) x f`` dense tiled ``H`` buffers, allocated (collectively) on first use.

        Alternating two buffers makes one barrier per product enough: a rank writes
        buffer ``b`` only after the barrier of its previous product, which every rank
        entered after finishing the reads of the last product that used ``b``.
        """
        be = engine_cache.backend()
        if f not in self._buffers:
            zero = {(be.rank, 0): torch.zeros(self.T, f, dtype=torch.float64, device=be.device)}
            shape = (self.pgrid.rows * self.T, f)
            self._buffers[f] = [[DenseTiledMatrix.from_local_tiles(be, shape, (self.T, f), zero, self.pgrid)
                                 for _ in range(2)], 0]
        pair = self._buffers[f]
        H = pair[0][pair[1]]
        pair[1] ^= 1
        return H

    def multiply(self, M: SparseTiledMatrix, x: Tensor, group: dist.ProcessGroup | None = None,
                 kind: str = "rdma") -> Tensor:
        """Owned rows of ``M H`` where ``x`` holds this rank's rows of ``H`` (collective: one barrier).

        Stationary-C (ICS'24 Algorithm 2) with the ``A``-tile row local: for every
        non-empty block ``M_rk`` rank ``r`` gets rows ``[lo, hi)`` of ``H_k`` (the next
        get is issued before the current product) and accumulates ``M_rk H_k``.  The
        rows moved are recorded as ``kind`` (per peer of ``group``, whose ranks are the
        backend's); the barrier and the waits for gets are timed as communication.
        """
        if self.freed:
            raise RuntimeError("algorithm='rdma': this tiled adjacency was freed (free_engines() or exit); "
                               "build the layer's algorithm again")
        be, counter, f = engine_cache.backend(), comm_counter(), x.size(1)
        H = self._buffer(f)
        mine = H.local_tile(be.rank, 0)
        mine[:self.n] = x.detach().to(mine)
        served, fetched = self.traffic[id(M)]
        counter.record(kind, served * f * mine.element_size(), fetched * f * mine.element_size(), group)
        with counter.timed(be.device):
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
            with counter.timed(be.device):
                h = mine[lo:hi] if pending is None else pending.wait().reshape(hi - lo, f)
            pending = fetch(blocks[n + 1]) if n + 1 < len(blocks) else None
            out += tile_product(tile, h)
        return out.to(dtype=x.dtype, device=x.device)

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


class _RDMASpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, lease: Lease, group: dist.ProcessGroup | None) -> Tensor:
        ctx.lease, ctx.group = Lease(lease.engine), group  # the graph's own reference: released with the graph
        return lease.engine.multiply(lease.engine.A, x, group, "rdma")

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor, None, None]:
        engine = ctx.lease.engine
        return engine.multiply(engine.AT, grad_out, ctx.group, "rdma_grad"), None, None  # dH = A^T dY, exact


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

    The engine is shared through a lease (see :mod:`pyg_sparsecomm.rdma.engine_cache`);
    :meth:`close` releases it collectively, and it is also released when this object is
    collected.

    Args:
        adj (HaloAdj): this rank's (normalised) block row.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (not used by this 1D algorithm). (default: :obj:`None`)
    """
    name = "rdma"
    supports_minibatches = False  # engines and symmetric buffers are set up per graph
    differentiates_edge_weights = False
    wire_element_size = 8  # H travels as float64 whatever the layer's dtype

    def __init__(self, adj: HaloAdj, exchanger: HaloExchanger | None = None, grid: Any = None) -> None:
        super().__init__(adj, exchanger, grid)
        be = engine_cache.backend(adj.rowptr.device)
        if (be.world_size, be.rank) != (adj.plan.world_size, adj.plan.rank):
            raise RuntimeError(f"algorithm='rdma' needs MPI ranks equal to the shard's ranks: MPI rank "
                               f"{be.rank} of {be.world_size}, shard part {adj.plan.rank} of "
                               f"{adj.plan.world_size}; launch with mpiexec -n {adj.plan.world_size}")
        self._lease: Lease | None = engine_cache.lease(_fingerprint(adj), lambda: TiledAdjacency(adj))

    @property
    def engine(self) -> TiledAdjacency:
        if self._lease is None:
            raise RuntimeError("this RDMAStationaryC was closed")
        return self._lease.engine

    def __call__(self, x: Tensor) -> Tensor:
        if self._lease is None:
            raise RuntimeError("this RDMAStationaryC was closed")
        return _RDMASpMM.apply(x, self._lease, self.group)

    def close(self) -> None:
        """Collective: releases this layer's engine; unreferenced engines beyond the cache size are freed.

        Pending backward passes keep their own reference, so closing before ``backward``
        is safe.  Idempotent per object, but every rank must call it at the same point.
        """
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        collect()

    @classmethod
    def predict(cls, volumes: RankVolumes, model: CostModel, row_bytes: int | RowBytes) -> Prediction:
        r"""One barrier and one get per remote block, forward (``A``) and backward (``A^T``).

        .. math::
            t = \sum_{d \in \{A, A^T\}} \Big(\lceil \log_2 P \rceil \alpha
                + \sum_{k : F_{dk} > 0} (\alpha + \beta F_{dk} b)\Big), \qquad
            \text{sent} = b \sum_{d, k} S_{dk}

        with ``F = volumes.fetch_rows``, ``S = volumes.serve_rows`` (rows got from / by each
        block row) and ``b = row_bytes`` (float64 rows: :meth:`row_bytes`).  ValueError
        when ``volumes`` lacks them (they need the whole edge list, not one rank's plan).
        """
        if volumes.fetch_rows is None or volumes.serve_rows is None:
            raise ValueError("algorithm='rdma' reads column ranges known only from the whole edge list: pass "
                             "RankVolumes with fetch_rows/serve_rows, e.g. volumes_of_all_ranks(..., "
                             "spans=comm_pattern(...).spans)")
        g, seconds, row_bytes = volumes.num_block_rows, 0.0, RowBytes.of(row_bytes).exact  # never compressed
        for rows in volumes.fetch_rows:  # forward, backward
            seconds += model.barrier(g) + sum(model.get(int(n) * row_bytes) for n in rows if n > 0)
        return Prediction(seconds, int(volumes.serve_rows.sum()) * row_bytes)
