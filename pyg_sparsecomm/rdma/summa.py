"""Bulk-synchronous SUMMA baseline with collective broadcasts (ICS'24 Section 2.2 and 5.4).

With the block-cyclic owner map, tile ``A_ik`` lives in process row
``i mod p_r`` and ``B_kj`` in process column ``j mod p_c``, like ``C_ij``.  In
step ``k`` the owner of column ``k`` of ``A`` in every process row broadcasts
its tiles ``{A_ik : i = r mod p_r}`` over the row communicator, the owner of row
``k`` of ``B`` in every process column broadcasts ``{B_kj}`` over the column
communicator, and every rank adds ``A_ik B_kj`` into its ``C_ij``:

.. math:: C_{ij} = \\sum_{k} A_{ik} B_{kj}.

All ranks advance in lock step: the broadcast time includes waiting for the
slowest rank of the step (the per-stage imbalance of the paper's Figure 1).
Tile sizes and nnz are known from the directories, so receivers size their
buffers without a separate size message.  The broadcasts come from the
backend (:meth:`RMABackend.grid_broadcast`: MPI ``Bcast`` over split
communicators, or ``torch.distributed.broadcast`` over row/column groups for the
symmetric-memory backend), so SUMMA, too, is written once.
"""
import time
from collections.abc import Callable

import torch

from .kernels import Breakdown, Tile, accumulate, csr_tile, tile_flops, tile_product, zero_tile
from .stationary import MatmulResult, finish, nonempty, zero_c_tiles
from .tiled import SparseTiledMatrix, TiledMatrix, TileIndex, check_operands

Bcast = Callable[[torch.Tensor, int], None]


def bcast_tiles(bcast: Bcast, mine: bool, root: int, M: TiledMatrix, tiles: list[TileIndex]) -> dict[TileIndex, Tile]:
    """Broadcasts the listed tiles (all owned by ``root``; ``mine``: this rank is it) in one to three buffers."""
    if not tiles:
        return {}
    device = M.backend.device
    dims = [M.tiles.dims(*ij) for ij in tiles]
    if not isinstance(M, SparseTiledMatrix):
        sizes = [r * c for r, c in dims]
        buf = (torch.cat([M.get_tile(*ij).reshape(-1) for ij in tiles]) if mine
               else torch.empty(sum(sizes), dtype=torch.float64, device=device))
        bcast(buf, root)
        return {ij: part.reshape(d) for ij, part, d in zip(tiles, torch.split(buf, sizes), dims, strict=False)}
    nnz = [M.nnz(*ij) for ij in tiles]
    if not sum(nnz):  # every rank knows this from the directory: nothing to send
        return {ij: zero_tile(*d, True, device) for ij, d in zip(tiles, dims, strict=False)}
    local = [M.get_tile(*ij) for ij in tiles] if mine else []
    values = (torch.cat([t.values() for t in local]).to(torch.float64) if mine
              else torch.empty(sum(nnz), dtype=torch.float64, device=device))
    num_ints = sum(r + 1 + z for (r, _), z in zip(dims, nnz, strict=False))
    ints = (torch.cat([torch.cat([t.crow_indices(), t.col_indices()]) for t in local]) if mine
            else torch.empty(num_ints, dtype=torch.int64, device=device))
    bcast(values, root)
    bcast(ints, root)
    out, vo, io = {}, 0, 0
    for ij, (rows, cols), z in zip(tiles, dims, nnz, strict=False):
        out[ij] = csr_tile(values[vo:vo + z], ints[io:io + rows + 1], ints[io + rows + 1:io + rows + 1 + z],
                           (rows, cols))
        vo, io = vo + z, io + rows + 1 + z
    return out


def summa(A: SparseTiledMatrix, B: TiledMatrix) -> MatmulResult:
    """``C = A B`` by SUMMA over the process rows/columns of ``A``'s process grid (collective).

    Args:
        A (SparseTiledMatrix): the sparse left operand.
        B (TiledMatrix): the right operand (dense: SpMM, sparse: SpGEMM), on ``A``'s process grid.
    """
    check_operands(A, B)
    be = A.backend
    bd, t_start = Breakdown(), time.perf_counter()
    pr, pc = A.pgrid.rows, A.pgrid.cols
    r, c = A.pgrid.coords(be.rank)
    # root of a row broadcast = its column index c, of a column broadcast = its row index r
    row_bcast, col_bcast, release = be.grid_broadcast(pr, pc)
    c_tiles = zero_c_tiles(A, B)
    M, K, N = A.grid_shape[0], A.grid_shape[1], B.grid_shape[1]
    my_rows, my_cols = range(r, M, pr), range(c, N, pc)
    try:
        for k in range(K):
            with bd.timing("comm"):
                a = bcast_tiles(row_bcast, c == k % pc, k % pc, A, [(i, k) for i in my_rows])
                b = bcast_tiles(col_bcast, r == k % pr, k % pr, B, [(k, j) for j in my_cols])
            for i, j in c_tiles:
                if not nonempty(A, B, i, k, j):
                    continue
                with bd.timing("compute"):
                    partial = tile_product(a[i, k], b[k, j])
                bd.flops, bd.products = bd.flops + tile_flops(a[i, k], b[k, j]), bd.products + 1
                with bd.timing("accumulate"):
                    c_tiles[i, j] = accumulate(c_tiles[i, j], partial)
    finally:
        release()
    return finish(A, B, bd, c_tiles, t_start)
