"""Work-stealing stationary-C SpMM with remote fetch-and-add reservations (ICS'24 Section 3.4, Algorithm 3).

Every product ``C_ij += A_ik B_kj`` is *reserved* before it is done, by a
remote atomic on a reservation grid stored at the owner of ``C_ij``:

* ``victim="random"`` — 2D grid, one counter per ``C`` tile:
  ``t = fetch_add(counter_ij, 1)`` hands out the ``t``-th non-empty ``k`` of
  the tile (in the ``i + j`` offset order) until ``t >= len(ks)``.  Thieves
  visit the other ranks' tiles in random order.
* ``victim="locality"`` — 3D grid, one flag per ``(i, j, k)``:
  ``fetch_add(flag_ijk, 1) == 0`` wins the product.  Thieves only steal
  products whose ``A_ik`` or ``B_kj`` they own, so a stolen product needs one
  remote tile instead of two.

Each rank first works through its own ``C`` tiles (accumulating locally), then
steals; a stolen partial is sent to the tile's owner through the remote queue
(:mod:`pyg_sparsecomm.rdma.queue`).  **Termination**: after its own phase the
owner knows how many of its products it did itself, hence exactly how many
remote updates to wait for.  A thief stops stealing when its outbox budget
(``steal_budget`` float64 words) is exhausted — the budget bounds memory, not
correctness, since every reserved product is done by whoever reserved it.
Implemented for SpMM (dense ``B``), where a partial's size is known before it
is reserved.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from .kernels import Breakdown, accumulate
from .queue import Outbox, RemoteQueue
from .stationary import (
    MatmulResult,
    c_layout,
    drain,
    drain_until,
    finish,
    k_order,
    pipelined_products,
    push_partial,
    zero_c_tiles,
)
from .tiled import SparseTiledMatrix, TileIndex, check_operands

VICTIMS = ("random", "locality")


class ReservationGrid:
    """2D (per ``C`` tile) counters or 3D (per ``(i, j, k)``) flags, each stored at the ``C_ij`` owner.

    Args:
        A (SparseTiledMatrix): the sparse left operand (its backend and process grid are used).
        B (TiledMatrix): the right operand.
        three_d (bool): one flag per product ``(i, j, k)`` instead of one counter per ``C`` tile.
    """

    def __init__(self, A: SparseTiledMatrix, B, three_d: bool) -> None:
        self.backend, self.three_d = A.backend, three_d
        _, _, (M, N), self.K = c_layout(A, B)
        self.owner = A.pgrid.owner
        counts: dict[int, int] = {}
        self.pos: dict[TileIndex, int] = {}
        for i in range(M):
            for j in range(N):
                r = self.owner(i, j)
                self.pos[i, j], counts[r] = counts.get(r, 0), counts.get(r, 0) + 1
        width = self.K if three_d else 1
        self.region = self.backend.alloc(counts.get(self.backend.rank, 0) * width, torch.int64)

    def next_index(self, i: int, j: int) -> int:
        """2D: reserves and returns the next ticket of tile ``(i, j)``."""
        return self.backend.fetch_add(self.owner(i, j), self.region, self.pos[i, j], 1)

    def reserve(self, i: int, j: int, k: int) -> bool:
        """3D: whether this call won product ``(i, j, k)``."""
        return self.backend.fetch_add(self.owner(i, j), self.region, self.pos[i, j] * self.K + k, 1) == 0

    def free(self) -> None:
        self.backend.free(self.region)


def work_stealing(A: SparseTiledMatrix, B, victim: str = "locality", seed: int = 0,
                  steal_budget: int | None = None, prefetch: bool = True,
                  work_hook: Callable[[int, int, int], None] | None = None) -> MatmulResult:
    """Stationary-C SpMM where idle ranks steal reserved products; see the module docstring.

    ``work_hook(i, j, k)`` is called before every local product (tests use it to
    slow one rank down).  ``result.claims`` lists the ``(i, j, k)`` this rank reserved.

    Args:
        A (SparseTiledMatrix): the sparse left operand.
        B (DenseTiledMatrix): the dense right operand, on ``A``'s process grid.
        victim (str, optional): how an idle rank picks whom to steal from (one of :data:`VICTIMS`).
            (default: :obj:`"locality"`)
        seed (int, optional): the random stream of victim choices. (default: :obj:`0`)
        steal_budget (int, optional): words of stolen partials a rank may hold.
            (default: about one rank's share of ``C``)
        prefetch (bool, optional): fetch the next pair of tiles before each product.
            (default: :obj:`True`)
        work_hook (Callable[[int, int, int], None], optional): called with ``(i, j, k)`` before
            every local product. (default: :obj:`None`)
    """
    if victim not in VICTIMS:
        raise ValueError(f"victim must be one of {VICTIMS}, got {victim!r}")
    check_operands(A, B)
    if isinstance(B, SparseTiledMatrix):
        raise TypeError("work_stealing is implemented for SpMM (dense B); use stationary_c/stationary_a for SpGEMM")
    be, bd, t_start = A.backend, Breakdown(), time.perf_counter()
    me = be.rank
    _, _, (M, N), _K = c_layout(A, B)
    owner = A.pgrid.owner
    c_tiles = zero_c_tiles(A, B)
    ks = {(i, j): k_order(A, B, i, j) for i in range(M) for j in range(N)}
    words = {(i, j): A.tiles.dims(i, 0)[0] * B.tiles.dims(0, j)[1] for i, j in ks}
    if steal_budget is None:  # stolen partials may take about one rank's share of C, and never more than exist
        others = sum(len(kk) * words[ij] for ij, kk in ks.items() if owner(*ij) != me)
        steal_budget = min(others, -(-sum(words.values()) // be.world_size) + max(words.values()))
    grid = ReservationGrid(A, B, three_d=victim == "locality")
    own_total = sum(len(ks[ij]) for ij in c_tiles)
    queue, outbox = RemoteQueue(be, own_total), Outbox(be, steal_budget)
    claims: list[tuple[int, int, int]] = []

    def next_index(i: int, j: int) -> int:
        with bd.timing("reserve"):
            return grid.next_index(i, j)

    def reserve(i: int, j: int, k: int) -> bool:
        with bd.timing("reserve"):
            return grid.reserve(i, j, k)

    def own_products() -> Iterator[tuple[int, int, int]]:
        for i, j in c_tiles:
            if grid.three_d:
                for k in ks[i, j]:
                    if reserve(i, j, k):
                        claims.append((i, j, k))
                        yield i, j, k
            else:
                t = next_index(i, j)
                while t < len(ks[i, j]):
                    claims.append((i, j, ks[i, j][t]))
                    yield i, j, ks[i, j][t]
                    t = next_index(i, j)

    def stolen_products() -> Iterator[tuple[int, int, int]]:
        rng, reserved = np.random.default_rng(seed + 7919 * me), 0
        if grid.three_d:
            candidates = [(i, j, k) for (i, j), kk in ks.items() if owner(i, j) != me for k in kk
                          if A.owner(i, k) == me or B.owner(k, j) == me]
            for n in rng.permutation(len(candidates)):
                i, j, k = candidates[n]
                if reserved + words[i, j] > steal_budget:
                    continue  # a smaller (ragged) tile further on may still fit
                if reserve(i, j, k):
                    reserved += words[i, j]
                    claims.append((i, j, k))
                    yield i, j, k
            return
        tiles = [ij for ij in ks if owner(*ij) != me and ks[ij]]
        for n in rng.permutation(len(tiles)):
            i, j = tiles[n]
            while reserved + words[i, j] <= steal_budget:
                t = next_index(i, j)
                if t >= len(ks[i, j]):
                    break
                reserved += words[i, j]
                claims.append((i, j, ks[i, j][t]))
                yield i, j, ks[i, j][t]

    received = done_own = 0
    for (i, j, _), partial in pipelined_products(A, B, own_products(), bd, prefetch, work_hook):
        with bd.timing("accumulate"):
            c_tiles[i, j] = accumulate(c_tiles[i, j], partial)
        done_own += 1
        received += drain(queue, outbox, c_tiles, B, A, bd)
    expected = own_total - done_own  # the owner's products that thieves reserved
    for (i, j, k), partial in pipelined_products(A, B, stolen_products(), bd, prefetch, work_hook):
        push_partial(queue, outbox, owner(i, j), i, j, k, partial, bd)
        bd.stolen += 1
        received += drain(queue, outbox, c_tiles, B, A, bd)
    drain_until(queue, outbox, c_tiles, B, A, bd, received, expected)
    result = finish(A, B, bd, c_tiles, t_start, claims)
    for resource in (queue, outbox, grid):
        resource.free()
    return result
