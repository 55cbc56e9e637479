"""RDMA stationary-C and stationary-A multiplication ``C = A B`` (ICS'24 Section 3.2, Algorithms 1-2).

Both work for SpMM (dense tiled ``B``, dense ``C``) and SpGEMM (CSR tiled
``B``, CSR ``C``).  Tile products over an empty ``A_ik`` (or empty CSR
``B_kj``) are skipped: the directories tell every rank which tiles are empty,
so the skipped set is the same everywhere and update counts stay exact.
Nothing synchronises inside the product loops; the collective steps are the
allocations before them, the final barrier (whose wait is the load-imbalance
time) and the construction of the result's directory after it — with one
exception: **SpGEMM stationary-A** allocates its outbox collectively *after* the
local products (partial sizes are data-dependent), a global synchronisation
point in the middle of the algorithm; its wait is counted as load imbalance.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from .backend import Future
from .kernels import (
    Breakdown,
    SparseSum,
    Tile,
    accumulate,
    materialize,
    tile_flops,
    tile_product,
    zero_tile,
)
from .queue import Outbox, RemoteQueue
from .tiled import DenseTiledMatrix, SparseTiledMatrix, TiledMatrix, TileIndex, check_operands

POLL_SLEEP = 50e-6  # seconds between empty queue polls (ranks may share cores)


@dataclass
class MatmulResult:
    """``C`` (distributed like ``A``/``B``), this rank's breakdown and every rank's summary.

    Attributes:
        C (TiledMatrix): the product, distributed like ``A``/``B``.
        breakdown (Breakdown): this rank's times and counters.
        breakdowns (list[dict], optional): every rank's :meth:`Breakdown.summary`. (default: ``[]``)
        claims (list[tuple[int, int, int]], optional): the ``(i, j, k)`` products this rank reserved
            (work stealing only). (default: ``[]``)
    """
    C: TiledMatrix
    breakdown: Breakdown
    breakdowns: list[dict] = field(default_factory=list)
    #: (i, j, k) products this rank reserved (work stealing only)
    claims: list[tuple[int, int, int]] = field(default_factory=list)


def c_layout(A: SparseTiledMatrix, B: TiledMatrix) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], int]:
    """Shape, tile shape and tile-grid shape of ``C = A B`` and the inner tile count ``K``."""
    shape = (A.shape[0], B.shape[1])
    tile_shape = (A.tile_shape[0], B.tile_shape[1])
    return shape, tile_shape, (A.grid_shape[0], B.grid_shape[1]), A.grid_shape[1]


def my_c_tiles(A: SparseTiledMatrix, B: TiledMatrix) -> list[TileIndex]:
    _, _, (M, N), _ = c_layout(A, B)
    return [(i, j) for i in range(M) for j in range(N) if A.pgrid.owner(i, j) == A.backend.rank]


def nonempty(A: SparseTiledMatrix, B: TiledMatrix, i: int, k: int, j: int) -> bool:
    """Whether the product ``A_ik B_kj`` can be non-zero (decided from the directories only)."""
    return A.nnz(i, k) > 0 and (not isinstance(B, SparseTiledMatrix) or B.nnz(k, j) > 0)


def k_order(A: SparseTiledMatrix, B: TiledMatrix, i: int, j: int) -> list[int]:
    """Non-empty ``k`` of tile ``(i, j)`` in the paper's offset order ``k = (i + j + t) mod K``.

    The ``i + j`` offset spreads the ranks of one tile row/column over different
    owners in every step, and makes the first get usually local (Section 3.3).
    """
    K = A.grid_shape[1]
    return [k for k in ((i + j + t) % K for t in range(K)) if nonempty(A, B, i, k, j)]


def fetch_pair(A: TiledMatrix, B: TiledMatrix, i: int, k: int, j: int) -> tuple[Future, Future]:
    return A.async_get_tile(i, k), B.async_get_tile(k, j)


def pipelined_products(A: TiledMatrix, B: TiledMatrix, tasks: Iterable[tuple[int, int, int]], bd: Breakdown,
                       prefetch: bool = True, work_hook: Callable[[int, int, int], None] | None = None,
                       ) -> Iterator[tuple[tuple[int, int, int], Tile]]:
    """Yields ``((i, j, k), A_ik @ B_kj)`` for ``tasks``, prefetching the next pair before each product.

    ``tasks`` may be a lazy iterator (work stealing reserves the next task when
    it is drawn), so the one-ahead prefetch never reserves work it does not do.
    """
    tasks = iter(tasks)
    current = next(tasks, None)
    pending = fetch_pair(A, B, current[0], current[2], current[1]) if current and prefetch else None
    while current is not None:
        i, j, k = current
        with bd.timing("comm"):
            a_fut, b_fut = pending if pending is not None else fetch_pair(A, B, i, k, j)  # None: no prefetch
            a, b = a_fut.wait(), b_fut.wait()
        fetched = a_fut.nbytes + b_fut.nbytes
        nxt = next(tasks, None)
        if nxt is not None and prefetch:
            pending = fetch_pair(A, B, nxt[0], nxt[2], nxt[1])
        if work_hook is not None:
            work_hook(i, j, k)
        with bd.timing("compute"):
            partial = tile_product(a, b)
        flops = tile_flops(a, b)
        bd.flops, bd.bytes_fetched, bd.products = bd.flops + flops, bd.bytes_fetched + fetched, bd.products + 1
        bd.iterations.append((flops, fetched))
        yield current, partial
        current = nxt


def finish(A: SparseTiledMatrix, B: TiledMatrix, bd: Breakdown, c_tiles: dict[TileIndex, Tile | SparseSum],
           t_start: float, claims: list[tuple[int, int, int]] | None = None) -> MatmulResult:
    """Sparse sums reduced, final barrier (timed as load imbalance), then ``C`` built collectively."""
    with bd.timing("accumulate"):  # SpGEMM: every SparseSum is reduced here, once
        tiles = {ij: materialize(t) for ij, t in c_tiles.items()}
    with bd.timing("imbalance"):
        A.backend.barrier()
    bd.total = time.perf_counter() - t_start
    shape, tile_shape, _, _ = c_layout(A, B)
    cls = SparseTiledMatrix if isinstance(B, SparseTiledMatrix) else DenseTiledMatrix
    C = cls.from_local_tiles(A.backend, shape, tile_shape, tiles, A.pgrid)
    return MatmulResult(C, bd, A.backend.allgather(bd.summary()), claims or [])


def zero_c_tiles(A: SparseTiledMatrix, B: TiledMatrix) -> dict[TileIndex, Tile | SparseSum]:
    """This rank's ``C`` tiles: dense zeros, or empty :class:`SparseSum` accumulators for SpGEMM."""
    dims = {(i, j): (A.tiles.dims(i, 0)[0], B.tiles.dims(0, j)[1]) for i, j in my_c_tiles(A, B)}
    if isinstance(B, SparseTiledMatrix):
        return {ij: SparseSum(*d, A.backend.device) for ij, d in dims.items()}
    return {ij: zero_tile(*d, False, A.backend.device) for ij, d in dims.items()}


def stationary_c(A: SparseTiledMatrix, B: TiledMatrix, prefetch: bool = True) -> MatmulResult:
    """Stationary-C (Algorithm 2): the owner of ``C_ij`` computes ``sum_k A_ik B_kj``.

    .. math:: C_{ij} = \\sum_{t=0}^{K-1} A_{i,k_t} B_{k_t,j},\\quad k_t = (i + j + t) \\bmod K

    with the next ``A``/``B`` tiles fetched by ``async_get_tile`` before the
    current local product, so communication overlaps computation.

    Args:
        A (SparseTiledMatrix): the sparse left operand.
        B (TiledMatrix): the right operand (dense: SpMM, sparse: SpGEMM), on ``A``'s process grid.
        prefetch (bool, optional): fetch the next pair of tiles before each product.
            (default: :obj:`True`)
    """
    check_operands(A, B)
    bd, t_start = Breakdown(), time.perf_counter()
    c_tiles = zero_c_tiles(A, B)
    tasks = ((i, j, k) for i, j in c_tiles for k in k_order(A, B, i, j))
    for (i, j, _), partial in pipelined_products(A, B, tasks, bd, prefetch):
        with bd.timing("accumulate"):
            c_tiles[i, j] = accumulate(c_tiles[i, j], partial)
    return finish(A, B, bd, c_tiles, t_start)


def drain(queue: RemoteQueue, outbox: Outbox, c_tiles: dict[TileIndex, Tile | SparseSum], B: TiledMatrix,
          A: SparseTiledMatrix, bd: Breakdown, limit: int = -1) -> int:
    """Dequeues ready handles (at most ``limit`` if >= 0), fetches the partials and accumulates them."""
    done = 0
    while limit < 0 or done < limit:
        handle = queue.pop()
        if handle is None:
            break
        src, f_off, i_off, i, j, nnz, _k = handle
        rows, cols = A.tiles.dims(i, 0)[0], B.tiles.dims(0, j)[1]
        with bd.timing("comm"):
            partial = outbox.fetch(src, f_off, i_off, nnz, rows, cols)
        with bd.timing("accumulate"):
            c_tiles[i, j] = accumulate(c_tiles[i, j], partial)
        done += 1
    return done


def drain_until(queue: RemoteQueue, outbox: Outbox, c_tiles: dict[TileIndex, Tile | SparseSum],
                B: TiledMatrix, A: SparseTiledMatrix, bd: Breakdown, received: int, expected: int) -> int:
    """Blocks until ``expected`` remote updates were applied; waiting counts as load imbalance."""
    while received < expected:
        got = drain(queue, outbox, c_tiles, B, A, bd)
        received += got
        if not got:
            with bd.timing("imbalance"):
                time.sleep(POLL_SLEEP)
    return received


def push_partial(queue: RemoteQueue, outbox: Outbox, owner: int, i: int, j: int, k: int, partial: Tile,
                 bd: Breakdown) -> None:
    with bd.timing("comm"):
        f_off, i_off, nnz = outbox.store(partial)
        queue.push(owner, (queue.backend.rank, f_off, i_off, i, j, nnz, k))


def stationary_a_tasks(A: SparseTiledMatrix, B: TiledMatrix, combine: bool) -> list[tuple[int, int, int]]:
    """This rank's products ``(i, j, k)`` over its non-empty ``A_ik``.

    Per tile (``combine=False``, Algorithm 1): for each ``A_ik``, ``j = (i + k + t) mod N``.
    Combined: for each tile row ``i`` and ``j = (i + k_0 + t) mod N``, all of this rank's
    ``k`` in a row, so the partials of one ``C_ij`` are consecutive and can be summed.
    """
    N = B.grid_shape[1]
    my_a = [(i, k) for i, k in A.my_tiles() if A.nnz(i, k) > 0]
    if not combine:
        return [(i, (i + k + t) % N, k) for i, k in my_a for t in range(N) if nonempty(A, B, i, k, (i + k + t) % N)]
    rows: dict = {}
    for i, k in my_a:
        rows.setdefault(i, []).append(k)
    return [(i, (i + ks[0] + t) % N, k) for i, ks in rows.items() for t in range(N) for k in ks
            if nonempty(A, B, i, k, (i + ks[0] + t) % N)]


def stationary_a(A: SparseTiledMatrix, B: TiledMatrix, prefetch: bool = True, combine: bool = True) -> MatmulResult:
    """Stationary-A (Algorithm 1): the owner of ``A_ik`` computes ``A_ik B_kj`` for all ``j``.

    A partial for a ``C_ij`` owned elsewhere goes to the producer's
    :class:`Outbox` and its handle to the owner's :class:`RemoteQueue` (one
    fetch-and-add + put); owners poll their queue between products.  With
    ``combine=True`` a rank first sums its own partials of one ``C_ij`` (its
    ``A_ik`` for several ``k``) and pushes that sum once; ``combine=False`` pushes
    every product as in the paper.  **Termination**: the owner of ``C_ij`` expects
    exactly one remote update per non-empty ``(i, j, k)`` (combined: per other
    rank holding a non-empty ``A_ik``) — counts every rank derives from the
    directories — and drains until it has applied that many.

    SpMM partial sizes are known in advance, so the outbox is allocated before
    the loop and updates stream out while computing.  SpGEMM partials have
    data-dependent sizes: they are kept locally, the outbox is allocated once the
    local products are done, then the handles are pushed.  That allocation is
    **collective** (an all-gather of the sizes): every rank waits there for the
    slowest one to finish its local products, so SpGEMM stationary-A is not free of
    global synchronisation — the wait is counted as ``imbalance`` in the breakdown,
    and no remote update is sent before it.

    Args:
        A (SparseTiledMatrix): the sparse left operand.
        B (TiledMatrix): the right operand (dense: SpMM, sparse: SpGEMM), on ``A``'s process grid.
        prefetch (bool, optional): fetch the next pair of tiles before each product.
            (default: :obj:`True`)
        combine (bool, optional): sum a rank's own partials of one ``C_ij`` before pushing them.
            (default: :obj:`True`)
    """
    check_operands(A, B)
    be, bd, t_start = A.backend, Breakdown(), time.perf_counter()
    me, sparse_out = be.rank, isinstance(B, SparseTiledMatrix)
    K = A.grid_shape[1]
    owner = A.pgrid.owner
    c_tiles = zero_c_tiles(A, B)
    tasks = stationary_a_tasks(A, B, combine)
    # the producer-side update units: (i, j, k) per product, or (i, j, rank) per producer when combined
    unit = (lambda i, j, k: (i, j, A.owner(i, k))) if combine else (lambda i, j, k: (i, j, k))
    expected = len({unit(i, j, k) for i, j in c_tiles for k in range(K) if nonempty(A, B, i, k, j)
                    and A.owner(i, k) != me})
    last = {unit(i, j, k): n for n, (i, j, k) in enumerate(tasks)}  # the product that completes a unit
    queue = RemoteQueue(be, expected)
    remote_floats = sum(A.tiles.dims(u[0], 0)[0] * B.tiles.dims(0, u[1])[1] for u in last if owner(u[0], u[1]) != me)
    outbox = None if sparse_out else Outbox(be, remote_floats)
    deferred: list[tuple[int, int, int, Tile]] = []
    received = 0
    running: Tile | SparseSum | None = None  # this rank's partials of one remote C_ij, summed
    for n, ((i, j, k), partial) in enumerate(pipelined_products(A, B, tasks, bd, prefetch)):
        if owner(i, j) == me:
            with bd.timing("accumulate"):
                c_tiles[i, j] = accumulate(c_tiles[i, j], partial)
            continue
        with bd.timing("accumulate"):
            running = partial if running is None else accumulate(running, partial)
        if last[unit(i, j, k)] != n:
            continue  # more of this rank's partials of C_ij follow
        with bd.timing("accumulate"):
            update = materialize(running)
        if outbox is not None:
            push_partial(queue, outbox, owner(i, j), i, j, k, update, bd)
            received += drain(queue, outbox, c_tiles, B, A, bd)
        else:
            deferred.append((i, j, k, update))
        running = None
    if outbox is None:  # SpGEMM (sparse_out)
        with bd.timing("imbalance"):  # collective: waits for the slowest rank's local products
            sizes = [Outbox.sizes(p) for *_, p in deferred]
            outbox = Outbox(be, sum(f for f, _ in sizes), sum(n for _, n in sizes))
        for i, j, k, partial in deferred:
            push_partial(queue, outbox, owner(i, j), i, j, k, partial, bd)
    drain_until(queue, outbox, c_tiles, B, A, bd, received, expected)
    result = finish(A, B, bd, c_tiles, t_start)  # its barrier: nobody reads our outbox any more
    queue.free()
    outbox.free()
    return result
