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
``O(tiles)`` directory.  Values are float64; tiles are numpy arrays / scipy CSR
computed on the host — the tiled matrices need a backend with host-memory
regions (:attr:`RMABackend.host_kernels`), i.e. the MPI backend.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from .backend import Future, RMABackend

TileIndex = tuple[int, int]


@dataclass(frozen=True)
class TileProcessGrid:
    """A ``rows x cols`` grid of ranks, rank ``r * cols + c`` at ``(r, c)``."""
    rows: int
    cols: int

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"process grid must be at least 1x1, got {self.rows}x{self.cols}")

    @property
    def size(self) -> int:
        return self.rows * self.cols

    @staticmethod
    def for_world(world_size: int) -> TileProcessGrid:
        """The most square grid with ``rows <= cols`` (P=2: 1x2, P=4: 2x2, P=6: 2x3)."""
        if world_size < 1:
            raise ValueError(f"world size must be >= 1, got {world_size}")
        rows = max(r for r in range(1, math.isqrt(world_size) + 1) if world_size % r == 0)
        return TileProcessGrid(rows, world_size // rows)

    def owner(self, i: int, j: int) -> int:
        """Block-cyclic owner of tile ``(i, j)``."""
        return (i % self.rows) * self.cols + (j % self.cols)

    def coords(self, rank: int) -> tuple[int, int]:
        return divmod(rank, self.cols)

    def check_world(self, world_size: int) -> None:
        if self.size != world_size:
            raise ValueError(f"process grid {self.rows}x{self.cols} has {self.size} ranks but the backend "
                             f"has world size {world_size}")


@dataclass(frozen=True)
class TileGrid:
    """Regular tiling of an ``shape`` matrix into ``tile_shape`` tiles (last ones ragged)."""
    shape: tuple[int, int]
    tile_shape: tuple[int, int]

    def __post_init__(self) -> None:
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"matrix shape must be two positive sizes, got {self.shape}")
        if len(self.tile_shape) != 2 or min(self.tile_shape) < 1:
            raise ValueError(f"tile shape must be two positive sizes, got {self.tile_shape}")

    @property
    def grid_shape(self) -> tuple[int, int]:
        return tuple(-(-s // t) for s, t in zip(self.shape, self.tile_shape))

    def bounds(self, i: int, j: int) -> tuple[int, int, int, int]:
        """``(row0, row1, col0, col1)`` of tile ``(i, j)``."""
        (m, n), (tm, tn) = self.shape, self.tile_shape
        if not (0 <= i < self.grid_shape[0] and 0 <= j < self.grid_shape[1]):
            raise IndexError(f"tile ({i}, {j}) outside the {self.grid_shape} tile grid")
        return i * tm, min((i + 1) * tm, m), j * tn, min((j + 1) * tn, n)

    def dims(self, i: int, j: int) -> tuple[int, int]:
        r0, r1, c0, c1 = self.bounds(i, j)
        return r1 - r0, c1 - c0

    def indices(self) -> Iterator[TileIndex]:
        rows, cols = self.grid_shape
        return ((i, j) for i in range(rows) for j in range(cols))


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

    def get_tile(self, i: int, j: int) -> np.ndarray | sp.csr_matrix:
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
        if not getattr(backend, "host_kernels", False):
            raise NotImplementedError(f"{type(backend).__name__} cannot hold tiled matrices: the tile kernels are "
                                      f"numpy/scipy host code; use the MPI backend (make_backend('cpu'))")
        pgrid = pgrid or TileProcessGrid.for_world(backend.world_size)
        pgrid.check_world(backend.world_size)
        tiles = TileGrid(tuple(int(s) for s in shape), tuple(int(t) for t in tile_shape))
        mine = [(i, j) for i, j in tiles.indices() if pgrid.owner(i, j) == backend.rank]
        return tiles, pgrid, mine

    @classmethod
    def _from_sliceable(cls, backend: RMABackend, matrix: Any, tile_shape: tuple[int, int],
                        pgrid: TileProcessGrid | None):
        """``from_global`` once the matrix supports 2-D slicing: each rank keeps its own tiles."""
        grid, pgrid, mine = cls._setup(backend, matrix.shape, tile_shape, pgrid)
        local = {}
        for ij in mine:
            r0, r1, c0, c1 = grid.bounds(*ij)
            local[ij] = matrix[r0:r1, c0:c1]
        return cls.from_local_tiles(backend, matrix.shape, tile_shape, local, pgrid)

    @staticmethod
    def _check_local_tiles(tiles: TileGrid, mine: list[TileIndex], given: dict[TileIndex, object]) -> None:
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
    """Dense tiled matrix; directory row ``(owner, offset, rows, cols)``; one get per tile."""
    FIELDS = ("owner", "offset", "rows", "cols")

    @classmethod
    def from_local_tiles(cls, backend: RMABackend, shape, tile_shape, tiles: dict[TileIndex, np.ndarray],
                         pgrid: TileProcessGrid | None = None) -> DenseTiledMatrix:
        """Collective: every rank passes exactly the tiles it owns (``pgrid.owner``)."""
        grid, pgrid, mine = cls._setup(backend, shape, tile_shape, pgrid)
        cls._check_local_tiles(grid, mine, tiles)
        offsets = np.cumsum([0] + [tiles[ij].size for ij in mine])
        region = backend.alloc(int(offsets[-1]), np.float64)
        memory = backend.local(region)
        entries = {}
        for ij, off in zip(mine, offsets):
            rows, cols = grid.dims(*ij)
            memory[off:off + rows * cols] = np.asarray(tiles[ij], dtype=np.float64).ravel()
            entries[ij] = (backend.rank, int(off), rows, cols)
        directory = cls._directory(backend, grid, entries, len(cls.FIELDS))
        backend.barrier()  # local writes visible before anyone reads
        return cls(backend, grid, pgrid, directory, (region,))

    @classmethod
    def from_global(cls, backend: RMABackend, matrix: Any, tile_shape: tuple[int, int],
                    pgrid: TileProcessGrid | None = None) -> DenseTiledMatrix:
        """Collective: every rank passes the same global matrix (numpy or torch) and keeps its tiles."""
        matrix = np.asarray(matrix.detach().cpu().numpy() if hasattr(matrix, "detach") else matrix, np.float64)
        if matrix.ndim != 2:
            raise ValueError(f"a dense tiled matrix needs a 2-D matrix, got shape {matrix.shape}")
        return cls._from_sliceable(backend, matrix, tile_shape, pgrid)

    def local_tile(self, i: int, j: int) -> np.ndarray:
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

    def to_global(self) -> np.ndarray:
        """The whole matrix on this rank (reads every tile; for checking and small matrices)."""
        out = np.zeros(self.shape)
        futures = {ij: self.async_get_tile(*ij) for ij in self.tiles.indices()}
        for ij, fut in futures.items():
            r0, r1, c0, c1 = self.tiles.bounds(*ij)
            out[r0:r1, c0:c1] = fut.wait()
        return out


def to_scipy_csr(matrix) -> sp.csr_matrix:
    """scipy CSR (float64, int64 indices, sorted) from scipy, torch sparse/dense or numpy input."""
    if hasattr(matrix, "layout"):  # torch tensor
        import torch
        matrix = matrix.detach().cpu()
        if matrix.layout != torch.strided:
            coo = matrix.to_sparse_coo().coalesce()
            idx = coo.indices().numpy()
            matrix = sp.coo_matrix((coo.values().numpy(), (idx[0], idx[1])), shape=tuple(coo.shape))
        else:
            matrix = matrix.numpy()
    csr = sp.csr_matrix(matrix, dtype=np.float64)
    csr.sum_duplicates()
    csr.sort_indices()
    return csr


class SparseTiledMatrix(TiledMatrix):
    """CSR tiled matrix; directory row ``(owner, val_off, ptr_off, idx_off, rows, cols, nnz)``.

    Reading a remote tile issues three gets (values, row pointers, column
    indices), completed together by one future (paper Section 3.1.1).  Empty
    tiles are not stored (offsets ``-1``) and read without any get.
    """
    FIELDS = ("owner", "val_off", "ptr_off", "idx_off", "rows", "cols", "nnz")

    @classmethod
    def from_local_tiles(cls, backend: RMABackend, shape, tile_shape, tiles: dict[TileIndex, sp.spmatrix],
                         pgrid: TileProcessGrid | None = None) -> SparseTiledMatrix:
        """Collective: every rank passes exactly the (scipy) tiles it owns."""
        grid, pgrid, mine = cls._setup(backend, shape, tile_shape, pgrid)
        cls._check_local_tiles(grid, mine, tiles)
        # empty tiles (e.g. ``sp.coo_matrix((rows, cols))``, O(1) memory) are never converted nor stored
        full = [ij for ij in mine if not (sp.issparse(tiles[ij]) and tiles[ij].nnz == 0)]
        csr = {ij: to_scipy_csr(tiles[ij]) for ij in full}
        full = [ij for ij in full if csr[ij].nnz > 0]  # explicit zeros summed away
        nnz = [csr[ij].nnz for ij in full]
        val_offs = np.cumsum([0] + nnz)
        ptr_offs = np.cumsum([0] + [csr[ij].shape[0] + 1 for ij in full])
        values = backend.alloc(int(val_offs[-1]), np.float64)
        indptr = backend.alloc(int(ptr_offs[-1]), np.int64)
        indices = backend.alloc(int(val_offs[-1]), np.int64)
        mem_v, mem_p, mem_i = backend.local(values), backend.local(indptr), backend.local(indices)
        entries = {ij: (backend.rank, -1, -1, -1, *grid.dims(*ij), 0) for ij in mine}
        for ij, vo, po in zip(full, val_offs, ptr_offs):
            t = csr[ij]
            mem_v[vo:vo + t.nnz], mem_i[vo:vo + t.nnz] = t.data, t.indices
            mem_p[po:po + t.shape[0] + 1] = t.indptr
            entries[ij] = (backend.rank, int(vo), int(po), int(vo), t.shape[0], t.shape[1], t.nnz)
        directory = cls._directory(backend, grid, entries, len(cls.FIELDS))
        backend.barrier()
        return cls(backend, grid, pgrid, directory, (values, indptr, indices))

    @classmethod
    def from_global(cls, backend: RMABackend, matrix: Any, tile_shape: tuple[int, int],
                    pgrid: TileProcessGrid | None = None) -> SparseTiledMatrix:
        """Collective: every rank passes the same global matrix (scipy, torch sparse or dense)."""
        matrix = to_scipy_csr(matrix)
        return cls._from_sliceable(backend, matrix, tile_shape, pgrid)

    def nnz(self, i: int, j: int) -> int:
        return int(self.directory[i, j, 6])

    def async_get_tile(self, i: int, j: int) -> Future:
        owner, vo, po, io, rows, cols, nnz = (int(v) for v in self.directory[i, j])
        values, indptr, indices = self.regions
        if nnz == 0:  # not stored anywhere: no get
            return Future.ready(sp.csr_matrix((rows, cols)))
        if owner == self.backend.rank:
            be = self.backend
            tile = sp.csr_matrix((be.local(values)[vo:vo + nnz], be.local(indices)[io:io + nnz],
                                  be.local(indptr)[po:po + rows + 1]), shape=(rows, cols), copy=False)
            return Future.ready(tile)
        gets = [self.backend.get_async(owner, values, vo, nnz), self.backend.get_async(owner, indptr, po, rows + 1),
                self.backend.get_async(owner, indices, io, nnz)]
        return Future.gather(gets, lambda v, p, c: sp.csr_matrix((v, c, p), shape=(rows, cols), copy=False))

    def to_global(self) -> sp.csr_matrix:
        """The whole matrix on this rank as scipy CSR (for checking)."""
        futures = {ij: self.async_get_tile(*ij) for ij in self.tiles.indices()}
        rows = []
        for i in range(self.grid_shape[0]):
            rows.append(sp.hstack([futures[i, j].wait() for j in range(self.grid_shape[1])], format="csr"))
        return sp.vstack(rows, format="csr")
