"""``ProcessGrid``: the (P/c) × c process grid of the 1.5D algorithms (ICPP'24 §4.2).

Rank ``r`` sits at ``(row, col) = (r // c, r % c)``.  The ``c`` ranks of a grid row
hold the same block row of ``A`` and ``H`` (replication ``c``) and all-reduce their
partial sums (``row_group``); the ``P / c`` ranks of a grid column (``col_group``)
exchange the blocks of ``H`` between block rows.  Each rank computes ``P / c²`` of
the block products, so ``c²`` must divide ``P``.
"""

import torch.distributed as dist

from .group import is_distributed, register_group_cache


def check_grid(world_size: int, replication: int) -> None:
    """Raises ``ValueError`` unless ``c = replication`` divides ``P`` and ``c²`` divides ``P``."""
    if not isinstance(replication, int) or replication < 1:
        raise ValueError(f"replication must be a positive integer, got {replication!r}")
    if world_size % replication:
        raise ValueError(f"replication c={replication} does not divide the world size P={world_size}")
    if (world_size // replication) % replication:
        raise ValueError(f"P/c² must be an integer (each rank computes P/c² block products), but "
                         f"P={world_size}, c={replication} gives {world_size / replication ** 2:g}")


def stage_blocks(num_block_rows: int, replication: int, col: int) -> list[int]:
    """The block columns grid column ``col`` multiplies: ``col · P/c² … (col + 1) · P/c² - 1``."""
    stages = num_block_rows // replication
    return list(range(col * stages, (col + 1) * stages))


class ProcessGrid:
    """Row and column process groups over the default group, created identically on every rank.

    Args:
        replication (int): ``c``, the number of replicas of every block row.
        world_size (int, optional): for building the grid's layout without a process group
            (simulations, tests); groups are then not created. (default: the default group's)
        rank (int, optional): this rank, with ``world_size``. (default: the default group's)
    """

    def __init__(self, replication: int, world_size: int | None = None, rank: int | None = None) -> None:
        distributed = world_size is None and is_distributed()
        self.world_size = dist.get_world_size() if distributed else (world_size or 1)
        self.rank = dist.get_rank() if distributed else (rank or 0)
        check_grid(self.world_size, replication)
        self.replication = replication
        self.num_block_rows = self.world_size // replication
        self.row, self.col = divmod(self.rank, replication)
        self.row_group = self.col_group = None
        self.world: object = None  # the default group this grid was built over (process_grid's cache key)
        if distributed:
            # new_group is collective: every rank creates every group, in the same order.
            for i in range(self.num_block_rows):
                group = dist.new_group(self.row_ranks(i))
                if i == self.row:
                    self.row_group = group
            for j in range(replication):
                group = dist.new_group(self.col_ranks(j))
                if j == self.col:
                    self.col_group = group

    @property
    def stages(self) -> int:
        """Block products per rank: ``P / c²``."""
        return self.num_block_rows // self.replication

    def row_ranks(self, row: int) -> list[int]:
        """Ranks holding block row ``row`` (one grid row)."""
        return [row * self.replication + j for j in range(self.replication)]

    def col_ranks(self, col: int) -> list[int]:
        """Ranks at position ``col`` of every grid row (one grid column)."""
        return [i * self.replication + col for i in range(self.num_block_rows)]

    def stage_blocks(self) -> list[int]:
        """The block columns this rank multiplies (see :func:`stage_blocks`)."""
        return stage_blocks(self.num_block_rows, self.replication, self.col)

    def __repr__(self) -> str:
        return (f"ProcessGrid(P={self.world_size}, c={self.replication}, rank={self.rank} at "
                f"({self.row}, {self.col}), stages={self.stages})")


_GRIDS: dict[tuple[int, int], ProcessGrid] = {}
register_group_cache(_GRIDS.clear)


def process_grid(replication: int) -> ProcessGrid:
    """The ``ProcessGrid(replication)`` of the current default group, created once.

    Layers share it instead of creating groups of their own: ``new_group`` is
    collective, and two layers creating groups in a different order on different
    ranks would deadlock.  The cache is keyed on the default group, so a new job
    (``init_process_group`` after ``destroy_process_group``) gets new groups.

    Args:
        replication (int): ``c``, the number of replicas of every block row.
    """
    world = dist.group.WORLD if is_distributed() else None
    key = (id(world), replication)
    grid = _GRIDS.get(key)
    if grid is None or grid.world is not world:
        grid = _GRIDS[key] = ProcessGrid(replication)
        grid.world = world
    return grid
