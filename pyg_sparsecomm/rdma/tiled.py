"""Distributed tiled dense and CSR matrices with one-sided tile access (ICS'24 Section 3.1, 5.2).

A matrix of shape ``(m, n)`` is cut into a regular grid of ``tile_shape =
(tm, tn)`` tiles, ``grid_shape = (ceil(m / tm), ceil(n / tn))``; the last tile
row/column is ragged when ``tm``/``tn`` does not divide ``m``/``n``.  Tiles are
assigned to a ``rows x cols`` :class:`TileProcessGrid` **block-cyclically**, as in
ScaLAPACK:

.. math::
    \\mathrm{owner}(i, j) = (i \\bmod p_r)\\, p_c + (j \\bmod p_c).

Each rank stores its tiles contiguously in backend regions (dense: one float64
region; CSR: float64 values, int64 row pointers, int64 column indices) and
holds a *directory* with, for every tile, the owner rank, the offsets into the
owner's regions and the tile's sizes — built collectively by one all-gather.
Any rank then reads any tile with one get (dense) or three gets (CSR) and no
action by the owner.  An *empty* CSR tile (``nnz == 0``) takes no storage at
all (not even its row pointers): its directory row has offsets ``-1`` and
reading it makes no get, so a rank's memory is its non-empty tiles plus the
``O(tiles)`` directory.  Values are float64; tiles are torch tensors (strided or
``sparse_csr``) on the backend's device, so the same code runs over the MPI (CPU)
and the symmetric-memory (CUDA) backend.  The directory is small host metadata.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..plan.halo_adj import coo_to_csr
from .backend import Future, RMABackend
from .kernels import Tile, csr_tile, zero_tile
from .tile_grid import TileGrid, TileIndex, TileProcessGrid


def _size_pair(sizes: Any, what: str) -> tuple[int, int]:
    """``sizes`` as two ints (the range checks are :class:`TileGrid`'s)."""
    pair = tuple(int(s) for s in sizes)
    if len(pair) != 2:
        raise ValueError(f"{what} must be two positive sizes, got {pair}")
    return pair[0], pair[1]


class TiledMatrix:
    """Common part of the dense and sparse tiled matrices: grid, owner map and directory."""
    #: directory columns; subclasses add their offsets and sizes
    FIELDS: tuple[str, ...] = ()

    def __init__(self, backend: RMABackend, tiles: TileGrid, pgrid: TileProcessGrid, directory: np.ndarray,
                 regions: tuple) -> None:
        self.backend, self.tiles, self.pgrid, self.directory, self.regions = backend, tiles, pgrid, directory, regions

    @property
    def shape(self) -> tuple[int, int]:
        return self.tiles.shape

    @property
    def tile_shape(self) -> tuple[int, int]:
        return self.tiles.tile_shape

    @property
    def grid_shape(self) -> tuple[int, int]:
        return self.tiles.grid_shape

    def owner(self, i: int, j: int) -> int:
        return int(self.directory[i, j, 0])

    def my_tiles(self) -> list[TileIndex]:
        """The tiles this rank owns, row-major."""
        return [(i, j) for i, j in self.tiles.indices() if self.owner(i, j) == self.backend.rank]

    def get_tile(self, i: int, j: int) -> Tile:
        """Blocking read of tile ``(i, j)`` (local tiles are returned without copying; do not modify)."""
        return self.async_get_tile(i, j).wait()

    def async_get_tile(self, i: int, j: int) -> Future:
        raise NotImplementedError

    def free(self) -> None:
        """Collectively releases the regions."""
        for region in self.regions:
            self.backend.free(region)
        self.regions = ()

    @staticmethod
    def _setup(backend: RMABackend, shape, tile_shape, pgrid: TileProcessGrid | None):
        pgrid = pgrid or TileProcessGrid.for_world(backend.world_size)
        pgrid.check_world(backend.world_size)
        tiles = TileGrid(_size_pair(shape, "matrix shape"), _size_pair(tile_shape, "tile shape"))
        mine = [(i, j) for i, j in tiles.indices() if pgrid.owner(i, j) == backend.rank]
        return tiles, pgrid, mine

    @staticmethod
    def _check_local_tiles(tiles: TileGrid, mine: list[TileIndex], given: dict[TileIndex, Any]) -> None:
        if set(given) != set(mine):
            raise ValueError(f"rank-local tiles must be exactly the owned tiles {sorted(mine)}, got {sorted(given)}")
        for ij in mine:
            if tuple(given[ij].shape) != tiles.dims(*ij):
                raise ValueError(f"tile {ij} has shape {tuple(given[ij].shape)}, expected {tiles.dims(*ij)}")

    @staticmethod
    def _directory(backend: RMABackend, tiles: TileGrid, entries: dict[TileIndex, tuple], width: int) -> np.ndarray:
        directory = np.full(tiles.grid_shape + (width,), -1, dtype=np.int64)
        for part in backend.allgather(entries):
            for (i, j), row in part.items():
                directory[i, j] = row
        return directory


class DenseTiledMatrix(TiledMatrix):
    """Dense tiled matrix; directory row ``(owner, offset, rows, cols)``; one get per tile.

    Made collectively by :meth:`from_local_tiles` (or its siblings), which build the arguments below.

    Args:
        backend (RMABackend): the one-sided backend holding the tiles.
        tiles (TileGrid): the tiling.
        pgrid (TileProcessGrid): the ranks owning the tiles.
        directory (numpy.ndarray): one row per tile (the columns of :attr:`FIELDS`), the same on every rank.
        regions (tuple): the backend regions holding the tiles' data.
    """
    FIELDS = ("owner", "offset", "rows", "cols")

    @classmethod
    def from_local_tiles(cls, backend: RMABackend, shape, tile_shape, tiles: dict[TileIndex, Any],
                         pgrid: TileProcessGrid | None = None) -> DenseTiledMatrix:
        """Collective: every rank passes exactly the tiles it owns (``pgrid.owner``); numpy or torch."""
        grid, pgrid, mine = cls._setup(backend, shape, tile_shape, pgrid)
        cls._check_local_tiles(grid, mine, tiles)
        offsets = np.cumsum([0] + [int(np.prod(grid.dims(*ij))) for ij in mine])
        region = backend.alloc(int(offsets[-1]), torch.float64)
        memory = backend.local(region)
        entries = {}
        for ij, off in zip(mine, offsets, strict=False):
            rows, cols = grid.dims(*ij)
            memory[off:off + rows * cols] = torch.as_tensor(tiles[ij]).to(memory).reshape(-1)
            entries[ij] = (backend.rank, int(off), rows, cols)
        directory = cls._directory(backend, grid, entries, len(cls.FIELDS))
        backend.barrier()  # local writes visible before anyone reads
        return cls(backend, grid, pgrid, directory, (region,))

    @classmethod
    def from_global(cls, backend: RMABackend, matrix: Any, tile_shape: tuple[int, int],
                    pgrid: TileProcessGrid | None = None) -> DenseTiledMatrix:
        """Collective: every rank passes the same global matrix (numpy or torch) and keeps its tiles."""
        matrix = torch.as_tensor(matrix.detach() if hasattr(matrix, "detach") else np.asarray(matrix))
        if matrix.dim() != 2:
            raise ValueError(f"a dense tiled matrix needs a 2-D matrix, got shape {tuple(matrix.shape)}")
        grid, pgrid, mine = cls._setup(backend, matrix.shape, tile_shape, pgrid)
        local = {}
        for ij in mine:
            r0, r1, c0, c1 = grid.bounds(*ij)
            local[ij] = matrix[r0:r1, c0:c1]
        return cls.from_local_tiles(backend, matrix.shape, tile_shape, local, pgrid)

    def local_tile(self, i: int, j: int) -> torch.Tensor:
        """Writable view of an owned tile (the paper's ``tile_ref``)."""
        owner, off, rows, cols = self.directory[i, j]
        if owner != self.backend.rank:
            raise ValueError(f"tile ({i}, {j}) is owned by rank {owner}, not {self.backend.rank}")
        return self.backend.local(self.regions[0])[off:off + rows * cols].reshape(rows, cols)

    def async_get_tile(self, i: int, j: int) -> Future:
        owner, off, rows, cols = (int(v) for v in self.directory[i, j])
        if owner == self.backend.rank:
            return Future.ready(self.local_tile(i, j))
        fut = self.backend.get_async(owner, self.regions[0], off, rows * cols)
        return Future.gather([fut], lambda flat: flat.reshape(rows, cols))

    def to_global(self) -> torch.Tensor:
        """The whole matrix on this rank (reads every tile; for checking and small matrices)."""
        out = torch.zeros(self.shape, dtype=torch.float64, device=self.backend.device)
        futures = {ij: self.async_get_tile(*ij) for ij in self.tiles.indices()}
        for ij, fut in futures.items():
            r0, r1, c0, c1 = self.tiles.bounds(*ij)
            out[r0:r1, c0:c1] = fut.wait()
        return out


def to_coo(matrix: Any) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """``(indices [2, nnz], float64 values, shape)``, coalesced (row-major, no duplicates, no explicit zeros)
    from torch (sparse or dense), scipy sparse or numpy input."""
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach()
        coo = (matrix if matrix.layout == torch.sparse_coo else matrix.to_sparse_coo()).coalesce()
    elif hasattr(matrix, "tocoo"):  # scipy sparse
        m = matrix.tocoo()
        idx = torch.from_numpy(np.stack([m.row, m.col]).astype(np.int64))
        coo = torch.sparse_coo_tensor(idx, torch.from_numpy(np.asarray(m.data, np.float64)), m.shape,
                                      check_invariants=False).coalesce()  # scipy's indices; torch's default, said
    else:
        coo = torch.as_tensor(np.asarray(matrix, np.float64)).to_sparse_coo().coalesce()
    if coo.dim() != 2:
        raise ValueError(f"a sparse tiled matrix needs a 2-D matrix, got shape {tuple(coo.shape)}")
    values = coo.values().to(torch.float64)
    keep = values != 0
    return coo.indices()[:, keep], values[keep], (int(coo.shape[0]), int(coo.shape[1]))


def is_empty_sparse(tile: Any) -> bool:
    """An all-zero sparse tile given without storage (torch sparse or scipy with nnz 0)."""
    if isinstance(tile, torch.Tensor):
        return tile.layout != torch.strided and tile._nnz() == 0
    return getattr(tile, "nnz", None) == 0


class SparseTiledMatrix(TiledMatrix):
    """CSR tiled matrix; directory row ``(owner, val_off, ptr_off, idx_off, rows, cols, nnz)``.

    Reading a remote tile issues three gets (values, row pointers, column
    indices), completed together by one future (paper Section 3.1.1).  Empty
    tiles are not stored (offsets ``-1``) and read without any get.

    Made collectively by :meth:`from_local_tiles` (or its siblings), which build the arguments below.

    Args:
        backend (RMABackend): the one-sided backend holding the tiles.
        tiles (TileGrid): the tiling.
        pgrid (TileProcessGrid): the ranks owning the tiles.
        directory (numpy.ndarray): one row per tile (the columns of :attr:`FIELDS`), the same on every rank.
        regions (tuple): the backend regions holding the tiles' data.
    """
    FIELDS = ("owner", "val_off", "ptr_off", "idx_off", "rows", "cols", "nnz")

    @classmethod
    def from_local_tiles(cls, backend: RMABackend, shape, tile_shape, tiles: dict[TileIndex, Any],
                         pgrid: TileProcessGrid | None = None) -> SparseTiledMatrix:
        """Collective: every rank passes exactly the tiles it owns (torch sparse/dense, scipy or numpy)."""
        grid, pgrid, mine = cls._setup(backend, shape, tile_shape, pgrid)
        cls._check_local_tiles(grid, mine, tiles)
        # empty sparse tiles (e.g. ``torch.sparse_coo_tensor(size=...)``, O(1) memory) are never converted
        coo = {ij: to_coo(tiles[ij]) for ij in mine if not is_empty_sparse(tiles[ij])}
        full = [ij for ij in mine if ij in coo and coo[ij][1].numel() > 0]  # explicit zeros dropped
        nnz = [int(coo[ij][1].numel()) for ij in full]
        val_offs = np.cumsum([0] + nnz)
        ptr_offs = np.cumsum([0] + [grid.dims(*ij)[0] + 1 for ij in full])
        values = backend.alloc(int(val_offs[-1]), torch.float64)
        indptr = backend.alloc(int(ptr_offs[-1]), torch.int64)
        indices = backend.alloc(int(val_offs[-1]), torch.int64)
        mem_v, mem_p, mem_i = backend.local(values), backend.local(indptr), backend.local(indices)
        entries = {ij: (backend.rank, -1, -1, -1, *grid.dims(*ij), 0) for ij in mine}
        for ij, vo, po, z in zip(full, val_offs, ptr_offs, nnz, strict=False):
            (idx, vals, _), (rows, cols) = coo[ij], grid.dims(*ij)
            t = coo_to_csr(idx[0].to(mem_p.device), idx[1].to(mem_p.device), vals.to(mem_v.device), (rows, cols),
                           is_sorted=True)
            mem_v[vo:vo + z], mem_i[vo:vo + z] = t.values(), t.col_indices()
            mem_p[po:po + rows + 1] = t.crow_indices()
            entries[ij] = (backend.rank, int(vo), int(po), int(vo), rows, cols, z)
        directory = cls._directory(backend, grid, entries, len(cls.FIELDS))
        backend.barrier()
        return cls(backend, grid, pgrid, directory, (values, indptr, indices))

    @classmethod
    def from_global(cls, backend: RMABackend, matrix: Any, tile_shape: tuple[int, int],
                    pgrid: TileProcessGrid | None = None) -> SparseTiledMatrix:
        """Collective: every rank passes the same global matrix (torch sparse/dense, scipy or numpy)
        and keeps the entries of its own tiles (split in one vectorised pass)."""
        idx, values, shape = to_coo(matrix)
        grid, pgrid, mine = cls._setup(backend, shape, tile_shape, pgrid)
        (tm, tn), G = grid.tile_shape, grid.grid_shape[1]
        ti, tj = idx[0] // tm, idx[1] // tn
        key = ti * G + tj
        keep = (ti % pgrid.rows) * pgrid.cols + tj % pgrid.cols == backend.rank
        key, idx, values = key[keep], idx[:, keep], values[keep]
        order = torch.argsort(key, stable=True)  # row-major order within every tile is kept
        key, idx, values = key[order], idx[:, order], values[order]
        counts = torch.bincount(key, minlength=grid.grid_shape[0] * G).tolist()
        starts = np.cumsum([0] + counts)
        local = {}
        for i, j in mine:
            s0, s1 = int(starts[i * G + j]), int(starts[i * G + j + 1])
            r0, _, c0, _ = grid.bounds(i, j)
            # row-major and duplicate-free already: marked coalesced, so it is not sorted again
            local[i, j] = torch.sparse_coo_tensor(idx[:, s0:s1] - torch.tensor([[r0], [c0]]), values[s0:s1],
                                                  grid.dims(i, j), is_coalesced=True, check_invariants=False)
        return cls.from_local_tiles(backend, shape, tile_shape, local, pgrid)

    def nnz(self, i: int, j: int) -> int:
        return int(self.directory[i, j, 6])

    def async_get_tile(self, i: int, j: int) -> Future:
        owner, vo, po, io, rows, cols, nnz = (int(v) for v in self.directory[i, j])
        values, indptr, indices = self.regions
        if nnz == 0:  # not stored anywhere: no get
            return Future.ready(zero_tile(rows, cols, True, self.backend.device))
        if owner == self.backend.rank:
            be = self.backend
            tile = csr_tile(be.local(values)[vo:vo + nnz], be.local(indptr)[po:po + rows + 1],
                            be.local(indices)[io:io + nnz], (rows, cols))
            return Future.ready(tile)
        gets = [self.backend.get_async(owner, values, vo, nnz), self.backend.get_async(owner, indptr, po, rows + 1),
                self.backend.get_async(owner, indices, io, nnz)]
        return Future.gather(gets, lambda v, p, c: csr_tile(v, p, c, (rows, cols)))

    def to_global(self) -> torch.Tensor:
        """The whole matrix on this rank as a torch CSR tensor (for checking)."""
        futures = {ij: self.async_get_tile(*ij) for ij in self.tiles.indices()}
        rows, cols, vals = [], [], []
        for ij, fut in futures.items():
            coo = fut.wait().to_sparse_coo()
            r0, _, c0, _ = self.tiles.bounds(*ij)
            rows.append(coo.indices()[0] + r0)
            cols.append(coo.indices()[1] + c0)
            vals.append(coo.values())
        idx = torch.stack([torch.cat(rows), torch.cat(cols)])
        whole = torch.sparse_coo_tensor(idx, torch.cat(vals), self.shape, check_invariants=False)
        return whole.coalesce().to_sparse_csr()


def check_operands(A: TiledMatrix, B: TiledMatrix) -> None:
    """Raises unless ``A @ B`` is defined tile by tile on one process grid.

    Args:
        A (TiledMatrix): the sparse left operand (TypeError if it is not a :class:`SparseTiledMatrix`).
        B (TiledMatrix): the dense or sparse right operand (ValueError on a shape, tiling, grid or backend mismatch).
    """
    if not isinstance(A, SparseTiledMatrix):
        raise TypeError(f"A must be a SparseTiledMatrix, got {type(A).__name__}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes {A.shape} and {B.shape} cannot be multiplied")
    if A.tile_shape[1] != B.tile_shape[0]:
        raise ValueError(f"A's tile columns ({A.tile_shape[1]}) must equal B's tile rows ({B.tile_shape[0]})")
    if A.pgrid != B.pgrid:
        raise ValueError(f"A and B must share one process grid, got {A.pgrid} and {B.pgrid}")
    if A.backend is not B.backend:
        raise ValueError("A and B must live on the same backend")
