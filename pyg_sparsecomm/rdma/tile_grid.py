"""Where a tiled matrix's tiles live: a ``rows x cols`` process grid and the block-cyclic
assignment of a matrix's ``grid_shape`` tiles to it (ICS'24 Section 3.1; see :mod:`.tiled`)."""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

TileIndex = tuple[int, int]


@dataclass(frozen=True)
class TileProcessGrid:
    """A ``rows x cols`` grid of ranks, rank ``r * cols + c`` at ``(r, c)``.

    Args:
        rows (int): process rows.
        cols (int): process columns.
    """
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
    """Regular tiling of an ``shape`` matrix into ``tile_shape`` tiles (last ones ragged).

    Args:
        shape (tuple[int, int]): the matrix's rows and columns.
        tile_shape (tuple[int, int]): a tile's rows and columns.
    """
    shape: tuple[int, int]
    tile_shape: tuple[int, int]

    def __post_init__(self) -> None:
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"matrix shape must be two positive sizes, got {self.shape}")
        if len(self.tile_shape) != 2 or min(self.tile_shape) < 1:
            raise ValueError(f"tile shape must be two positive sizes, got {self.tile_shape}")

    @property
    def grid_shape(self) -> tuple[int, int]:
        (m, n), (tm, tn) = self.shape, self.tile_shape
        return -(-m // tm), -(-n // tn)

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
