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
buffers without a separate size message.  Needs the MPI backend (mpi4py
collectives over host buffers; the tiles themselves are torch tensors as
everywhere else).
"""
import time
from typing import Any

import torch

from .kernels import Breakdown, Tile, accumulate, check_operands, csr_tile, tile_flops, tile_product, zero_tile
from .stationary import MatmulResult, finish, nonempty, zero_c_tiles
from .tiled import SparseTiledMatrix, TiledMatrix, TileIndex


def bcast_tiles(comm: Any, root: int, M: TiledMatrix, tiles: list[TileIndex]) -> dict[TileIndex, Tile]:
    """Broadcasts the listed tiles (all owned by ``root``) packed into one to three buffers."""
    if not tiles:
        return {}
    mine = comm.Get_rank() == root
    dims = [M.tiles.dims(*ij) for ij in tiles]
    if not isinstance(M, SparseTiledMatrix):
        sizes = [r * c for r, c in dims]
        buf = (torch.cat([M.get_tile(*ij).reshape(-1) for ij in tiles]) if mine
               else torch.empty(sum(sizes), dtype=torch.float64))
        comm.Bcast(buf.numpy(), root=root)
        return {ij: part.reshape(d) for ij, part, d in zip(tiles, torch.split(buf, sizes), dims)}
    nnz = [M.nnz(*ij) for ij in tiles]
    if not sum(nnz):  # every rank knows this from the directory: nothing to send
        return {ij: zero_tile(*d, True) for ij, d in zip(tiles, dims)}
    local = [M.get_tile(*ij) for ij in tiles] if mine else []
    values = (torch.cat([t.values() for t in local]).to(torch.float64) if mine
              else torch.empty(sum(nnz), dtype=torch.float64))
    ints = (torch.cat([torch.cat([t.crow_indices(), t.col_indices()]) for t in local]) if mine
            else torch.empty(sum(r + 1 + z for (r, _), z in zip(dims, nnz)), dtype=torch.int64))
    comm.Bcast(values.numpy(), root=root)
    comm.Bcast(ints.numpy(), root=root)
    out, vo, io = {}, 0, 0
    for ij, (rows, cols), z in zip(tiles, dims, nnz):
        out[ij] = csr_tile(values[vo:vo + z], ints[io:io + rows + 1], ints[io + rows + 1:io + rows + 1 + z],
                           (rows, cols))
        vo, io = vo + z, io + rows + 1 + z
    return out


def summa(A: SparseTiledMatrix, B: TiledMatrix) -> MatmulResult:
    """``C = A B`` by SUMMA over the row/column communicators of ``A``'s process grid."""
    check_operands(A, B)
    be = A.backend
    comm = getattr(be, "comm", None)
    if comm is None or be.device.type != "cpu":
        raise ValueError("summa needs the MPI backend (collective broadcasts over row/column communicators)")
    bd, t_start = Breakdown(), time.perf_counter()
    pr, pc = A.pgrid.rows, A.pgrid.cols
    r, c = A.pgrid.coords(be.rank)
    row_comm, col_comm = comm.Split(r, c), comm.Split(c, r)  # rank in row_comm = c, in col_comm = r
    c_tiles = zero_c_tiles(A, B)
    M, K, N = A.grid_shape[0], A.grid_shape[1], B.grid_shape[1]
    my_rows, my_cols = range(r, M, pr), range(c, N, pc)
    try:
        for k in range(K):
            with bd.timing("comm"):
                a = bcast_tiles(row_comm, k % pc, A, [(i, k) for i in my_rows])
                b = bcast_tiles(col_comm, k % pr, B, [(k, j) for j in my_cols])
            for i, j in c_tiles:
                if not nonempty(A, B, i, k, j):
                    continue
                with bd.timing("compute"):
                    partial = tile_product(a[i, k], b[k, j])
                bd.flops, bd.products = bd.flops + tile_flops(a[i, k], b[k, j]), bd.products + 1
                with bd.timing("accumulate"):
                    c_tiles[i, j] = accumulate(c_tiles[i, j], partial)
    finally:
        row_comm.Free()
        col_comm.Free()
    return finish(A, B, bd, c_tiles, t_start)
