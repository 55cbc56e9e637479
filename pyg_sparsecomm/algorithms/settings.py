"""The one check of a layer's ``algorithm``, ``replication``, process ``group`` and halo options.

:func:`check_settings` is pure (it reads the algorithm registry, never a process group) and is
what ``distribute()``, ``DistributedGCNConv``, :meth:`CommStats.bytes_per_epoch
<pyg_sparsecomm.plan.stats.CommStats.bytes_per_epoch>` and the algorithm factory
(:class:`~pyg_sparsecomm.algorithms.SpMMAlgorithm`) call, so every entry point refuses the same
combinations with the same message.  The registry of algorithm names, :data:`ALGORITHMS`,
lives here too.  :func:`exchange_group` checks, at a layer's first call, that
the shard it got was made for that layout.
"""
from typing import TYPE_CHECKING

import torch.distributed as dist

from ..comm.grid import ProcessGrid
from ..comm.group import check_plan_matches_group
from ..comm.halo_options import HaloOptions
from ..plan.halo_adj import HaloAdj
from .registry import LazyRegistry

if TYPE_CHECKING:  # pragma: no cover
    from .base import SpMMAlgorithm

#: the registered algorithms by name (filled by :class:`~pyg_sparsecomm.algorithms.SpMMAlgorithm`
#: subclasses that define ``name``)
#: name -> class of every algorithm (declared ones import their module at the first lookup)
ALGORITHMS: LazyRegistry[type["SpMMAlgorithm"]] = LazyRegistry("algorithm")


def check_settings(algorithm: str, replication: int = 1, group: dist.ProcessGroup | None = None,
                   options: HaloOptions | None = None, unit_grid: bool = False, allow_auto: bool = True) -> bool:
    """Raises ``ValueError`` naming the problem and the fix unless the settings fit together;
    returns whether the layout is 1.5D (the algorithm runs on a
    :class:`~pyg_sparsecomm.comm.grid.ProcessGrid`).

    Args:
        algorithm (str): a registered algorithm's name, or ``"auto"``.
        replication (int, optional): ``c`` of the 1.5D layout. (default: ``1``)
        group (torch.distributed.ProcessGroup, optional): the 1D exchanges' group; 1.5D layouts
            run on the grid of the default group and take none. (default: :obj:`None`)
        options (HaloOptions, optional): halo options the algorithm must honour (a layer's
            constructor passes ``options.compression_only``: staleness is checked when the
            algorithm is built). (default: :obj:`None`)
        unit_grid (bool, optional): whether a 1.5D algorithm may run with ``replication=1`` (on
            the ``P x 1`` grid, where it degenerates to 1D: ``DistributedGCNConv``, the algorithm
            factory, the statistics); ``distribute()`` refuses it. (default: :obj:`False`)
        allow_auto (bool, optional): whether ``"auto"`` is a valid name. (default: :obj:`True`)
    """
    names = sorted(ALGORITHMS) + (["auto"] if allow_auto else [])
    if algorithm not in names:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {names}")
    if not isinstance(replication, int) or isinstance(replication, bool) or replication < 1:
        raise ValueError(f"replication must be a positive integer, got {replication!r}")
    cls = ALGORITHMS.get(algorithm)
    replicated = replication > 1 or (cls is not None and cls.replicated)
    if cls is not None and replication > 1 and not cls.replicated:
        one_and_half = sorted(n for n, a in ALGORITHMS.items() if a.replicated)
        raise ValueError(f"algorithm={algorithm!r} is a 1D algorithm: it needs replication = 1, got "
                         f"replication={replication}; a 1.5D layout needs one of {one_and_half}"
                         + (" or 'auto'" if allow_auto else ""))
    if cls is not None and cls.replicated and replication == 1 and not unit_grid:
        raise ValueError(f"algorithm={algorithm!r} is a 1.5D algorithm: it needs replication > 1, got "
                         f"{replication} (pass replication=c and shard(data, grid=process_grid(c)))")
    if replicated and group is not None:
        raise ValueError("1.5D layouts run on the ProcessGrid of the default group; do not pass group=")
    if options is not None:
        check_options(algorithm, options)
    return replicated


def check_options(name: str, options: HaloOptions) -> None:
    """Refuses, by name, halo options the algorithm ``name`` cannot honour (``"auto"`` compares
    only the algorithms that honour them)."""
    cls = ALGORITHMS.get(name)
    if cls is None:
        return
    if options.compressed and not cls.supports_precision:
        raise ValueError(f"algorithm={name!r} does not support halo_precision / halo_grad_precision "
                         f"({options.describe()}); use one of "
                         f"{sorted(n for n, a in ALGORITHMS.items() if a.supports_precision)} or exact halos")
    if options.staleness and not cls.supports_staleness:
        raise ValueError(f"algorithm={name!r} does not support staleness={options.staleness}; use one of "
                         f"{sorted(n for n, a in ALGORITHMS.items() if a.supports_staleness)} or staleness=0")


def exchange_group(adj: HaloAdj, grid: ProcessGrid | None,
                   group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    """The group of the halo exchanges (1.5D: the grid's column group), after checking that the
    shard was made for this layout."""
    if grid is None:
        check_plan_matches_group(adj.plan.world_size, adj.plan.rank, group)
        return group
    if adj.plan.world_size != grid.num_block_rows or adj.plan.rank != grid.row:
        raise ValueError(
            f"replication={grid.replication} on {grid.world_size} ranks needs the block row {grid.row} of a "
            f"partition into P/c={grid.num_block_rows} parts (SparsityAwarePartitioner(num_parts="
            f"{grid.num_block_rows}) and shard(data, grid=ProcessGrid({grid.replication}))), but this shard "
            f"is part {adj.plan.rank} of {adj.plan.world_size}")
    check_plan_matches_group(adj.plan.world_size, adj.plan.rank, grid.col_group)
    return grid.col_group
