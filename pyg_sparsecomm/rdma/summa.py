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
buffers without a separate size message.  Needs the MPI backend.
"""
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .kernels import Breakdown, Tile, accumulate, check_operands, tile_flops, tile_product
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
        buf = np.concatenate([M.get_tile(*ij).ravel() for ij in tiles]) if mine else np.empty(sum(sizes))
        comm.Bcast(buf, root=root)
        parts = np.split(buf, np.cumsum(sizes)[:-1])
        return {ij: part.reshape(d) for ij, part, d in zip(tiles, parts, dims)}
    nnz = [M.nnz(*ij) for ij in tiles]
    if not sum(nnz):  # every rank knows this from the directory: nothing to send
        return {ij: sp.csr_matrix(d) for ij, d in zip(tiles, dims)}
    local = [M.get_tile(*ij) for ij in tiles] if mine else []
    values = np.concatenate([t.data for t in local]).astype(np.float64) if mine else np.empty(sum(nnz))
    ints = (np.concatenate([np.concatenate([t.indptr, t.indices]) for t in local]).astype(np.int64) if mine
            else np.empty(sum(r + 1 + z for (r, _), z in zip(dims, nnz)), np.int64))
    comm.Bcast(values, root=root)
    comm.Bcast(ints, root=root)
    out, vo, io = {}, 0, 0
    for ij, (rows, cols), z in zip(tiles, dims, nnz):
        indptr, indices = ints[io:io + rows + 1], ints[io + rows + 1:io + rows + 1 + z]
        out[ij] = sp.csr_matrix((values[vo:vo + z], indices, indptr), shape=(rows, cols))
        vo, io = vo + z, io + rows + 1 + z
    return out


def summa(A: SparseTiledMatrix, B: TiledMatrix) -> MatmulResult:
    """``C = A B`` by SUMMA over the row/column communicators of ``A``'s process grid."""
    check_operands(A, B)
    be = A.backend
    comm = getattr(be, "comm", None)
    if comm is None:
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
