"""The interface every distributed SpMM algorithm implements, the registry of their names
(:data:`ALGORITHMS`) and the one check of a layer's ``algorithm``, ``replication``, process ``group``
and halo options (:func:`check_settings`).

:func:`check_settings` is pure (it reads the algorithm registry, never a process group) and is what
``distribute()``, ``DistributedGCNConv``, the epoch's pricing
(:func:`~pyg_sparsecomm.algorithms.epoch.bytes_per_epoch`) and the algorithm factory
(:class:`SpMMAlgorithm`) call, so every entry point refuses the same combinations with the same message.
"""
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Optional

import numpy as np
import torch.distributed as dist
from torch import Tensor

from ..comm.exchanger import HaloExchanger
from ..comm.group import check_plan_matches_group
from ..comm.halo_options import HaloOptions
from ..plan.halo_adj import HaloAdj
from .cost import wire_row_bytes
from .registry import LazyRegistry

if TYPE_CHECKING:  # pragma: no cover
    from ..comm.grid import ProcessGrid
    from .cost import CostModel, Prediction, RankVolumes, RowBytes

__all__ = ["ALGORITHMS", "SpMMAlgorithm", "check_settings", "check_options", "supports", "auto_candidates",
           "algorithm_class", "make_algorithm"]


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


class SpMMAlgorithm(ABC):
    """Computes this rank's block row of ``A H`` from its owned rows of ``H``.

    An instance is bound to one (normalised) ``HaloAdj`` and may precompute
    per-adjacency structures in ``__init__``; ``__call__`` may be invoked many
    times and must be differentiable in ``x``.  Subclasses register themselves
    by defining ``name``; adding an algorithm touches only its own file (and the
    import in ``algorithms/__init__.py``).

    An algorithm exchanges through a :class:`~pyg_sparsecomm.comm.exchanger.HaloExchanger`
    (plan, process group, halo options, the layer's slots).  1D algorithms run over the
    exchanger's group and the adjacency of a partition into P parts.  *Replicated* (1.5D)
    algorithms run on a :class:`~pyg_sparsecomm.comm.grid.ProcessGrid`: the adjacency is the block
    row of a partition into ``P / c`` parts, exchanged within the grid's column group (whose
    ranks hold one block row each, so the plan's ranks are column-group ranks; the exchanger
    is rebound to that group) and summed within its row group.

    Args:
        adj (HaloAdj): this rank's (normalised) block row.
        exchanger (HaloExchanger, optional): how halo rows travel; rebound to ``adj.plan``
            (and, 1.5D, to the grid's column group). (default: :obj:`None`, exact exchanges
            over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (required by replicated algorithms).
            (default: :obj:`None`)
    """
    name: ClassVar[str]
    #: whether gradients reach learnable edge weights (adjacency values that require grad)
    differentiates_edge_weights: ClassVar[bool] = True
    #: 1.5D: needs a ProcessGrid and the block-row shard of ``shard(data, grid=...)``
    replicated: ClassVar[bool] = False
    #: compared by ``algorithm="auto"`` (needs a ``predict``)
    auto_candidate: ClassVar[bool] = False
    #: bytes per element on the wire when the algorithm fixes it (``"rdma"``: float64);
    #: ``None``: the payload's element size
    wire_element_size: ClassVar[int | None] = None
    #: honours ``HaloOptions.precision`` / ``grad_precision`` (compressed halo payloads)
    supports_precision: ClassVar[bool] = False
    #: honours ``HaloOptions.staleness`` (pipelined halos of the previous step)
    supports_staleness: ClassVar[bool] = False
    #: runs on mini-batch adjacencies (a new graph every step)
    supports_minibatches: ClassVar[bool] = True
    #: ``multiply(x, halo)`` computes ``__call__(x)`` from halo rows the caller fetched (a layer
    #: reuses the halo of its input features across calls instead of exchanging them again)
    multiplies_given_halo: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "name", None):
            ALGORITHMS[cls.name] = cls

    def __init__(self, adj: HaloAdj, exchanger: HaloExchanger | None = None,
                 grid: Optional["ProcessGrid"] = None) -> None:
        exchanger = (exchanger or HaloExchanger(adj.plan)).bind(plan=adj.plan)
        if self.replicated and grid is None:
            raise ValueError(f"algorithm={self.name!r} runs on a process grid: pass replication=c "
                             f"(DistributedGCNConv) or grid=ProcessGrid(c)")
        check_settings(self.name, grid.replication if grid is not None else 1, options=exchanger.options,
                       unit_grid=True)
        if self.replicated:
            assert grid is not None
            exchanger = exchanger.bind(group=grid.col_group)
        check_plan_matches_group(adj.plan.world_size, adj.plan.rank, exchanger.group)
        if adj.is_minibatch and not self.supports_minibatches:
            raise ValueError(f"algorithm={self.name!r} does not run on mini-batches (its setup is per graph, and "
                             f"every batch is another graph); use algorithm='1d', '1d_overlap' or '1d_overlap_p2p'")
        if not self.differentiates_edge_weights and adj.value is not None and adj.value.requires_grad:
            raise NotImplementedError(f"algorithm={self.name!r} does not differentiate edge weights; "
                                      f"use algorithm='1d' or '1.5d' for learnable edge weights")
        self.adj, self.exchanger, self.grid = adj, exchanger, grid

    @property
    def group(self) -> dist.ProcessGroup | None:
        """The process group of this algorithm's exchanges (1.5D: the grid's column group)."""
        return self.exchanger.group

    @property
    def options(self) -> HaloOptions:
        """The layer's halo options (the exchanger's)."""
        return self.exchanger.options

    @abstractmethod
    def __call__(self, x: Tensor) -> Tensor:
        """``x``: ``[num_owned, f]`` owned rows of ``H``; returns ``[num_owned, f]`` rows of ``A H``."""

    def exchange(self, x: Tensor, key: str = "x") -> Tensor:
        """The halo rows of ``x`` this block row reads, under the layer's :class:`HaloOptions`."""
        return self.exchanger.exchange(x, key)

    def multiply(self, x: Tensor, halo: Tensor) -> Tensor:
        """``self(x)`` from the ``halo`` rows of ``x`` fetched by the caller, where
        :attr:`multiplies_given_halo` (else ``NotImplementedError``)."""
        raise NotImplementedError(f"algorithm={self.name!r} exchanges its own halo rows")

    @classmethod
    def predict(cls, volumes: "RankVolumes", model: "CostModel",
                row_bytes: "int | RowBytes") -> Optional["Prediction"]:
        """α-β prediction of one SpMM, forward and backward, on the rank ``volumes`` describes
        (``None``: the algorithm has no cost model and ``algorithm="auto"`` never picks it).

        ``bytes_sent`` is exactly what the rank's exchanges record as sent in
        :func:`~pyg_sparsecomm.comm.counters.comm_counter` (``tests/algorithms/test_counted_equals_predicted.py``);
        ``row_bytes`` is :meth:`row_bytes` of the SpMM's width (a
        :class:`~pyg_sparsecomm.algorithms.cost.RowBytes` when halos are compressed); ``pipelined`` is the part of
        ``seconds`` that ``staleness=1`` moves off the critical path (:meth:`predict_as_run`)."""
        return None

    @classmethod
    def predict_epoch(cls, ranks: Sequence["RankVolumes"], widths: Sequence[int], model: "CostModel",
                      element_size: int = 4, options: HaloOptions | None = None) -> tuple[np.ndarray, np.ndarray]:
        r"""Per rank, the predicted seconds and bytes sent of one SpMM (forward and backward) per width:

        .. math:: (t_r, s_r) = \sum_{w \in \mathrm{widths}} \mathrm{predict\_as\_run}(\mathrm{ranks}_r, w)

        Args:
            ranks (Sequence['RankVolumes']): the :class:`~pyg_sparsecomm.algorithms.cost.RankVolumes` of every rank.
            widths (Sequence[int]): the SpMM width of every layer.
            model (CostModel): the α-β model.
            element_size (int, optional): bytes per element of the exchanged rows. (default: :obj:`4`)
            options (HaloOptions, optional): the layers' :class:`HaloOptions` (compressed halos are priced compressed;
                with ``staleness=1`` the seconds are the exposed time, :meth:`predict_as_run`). (default: :obj:`None`)

        Returns:
            ``(seconds, bytes_sent)``, two ``[len(ranks)]`` arrays; ValueError without a :meth:`predict`.
        """
        seconds, sent = np.zeros(len(ranks)), np.zeros(len(ranks), dtype=np.int64)
        for r, volumes in enumerate(ranks):
            for width in widths:
                prediction = cls.predict_as_run(volumes, model, width, element_size, options)
                seconds[r] += prediction.seconds
                sent[r] += prediction.bytes_sent
        return seconds, sent

    @classmethod
    def predict_as_run(cls, volumes: "RankVolumes", model: "CostModel", width: int, element_size: int = 4,
                       options: HaloOptions | None = None) -> "Prediction":
        r""":meth:`predict` of an SpMM of ``width`` columns as a layer with ``options`` runs it:
        compressed halos priced at their payload bytes, and with ``staleness=1`` the *exposed*
        time, the pipelined exchanges hidden behind the rank's own local SpMMs of the step
        (:meth:`~pyg_sparsecomm.algorithms.cost.Prediction.exposed`,
        :meth:`~pyg_sparsecomm.algorithms.cost.CostModel.stale_window`, an upper bound):

        .. math:: t = t_{sync} - t_{pipelined} + \max(0,\ t_{pipelined} - 2 \gamma \, nnz_r \, f)

        With ``staleness=0`` this is :meth:`predict` itself.  ValueError without a :meth:`predict`.
        """
        prediction = cls.predict(volumes, model, cls.row_bytes(width, element_size, options))
        if prediction is None:
            raise ValueError(f"algorithm={cls.name!r} has no cost model (SpMMAlgorithm.predict)")
        if options is not None and options.staleness:
            return prediction.exposed(model.stale_window(volumes.nnz, width))
        return prediction

    @classmethod
    def row_bytes(cls, width: int, element_size: int = 4,
                  options: HaloOptions | None = None) -> "int | RowBytes":
        """Bytes of one exchanged row of ``width`` elements of ``element_size`` bytes (or of
        :attr:`wire_element_size` when the algorithm fixes it): the ``row_bytes`` of :meth:`predict`;
        with compressed ``options``, the :class:`~pyg_sparsecomm.algorithms.cost.RowBytes` of their precisions."""
        return wire_row_bytes(width, cls.wire_element_size or int(element_size), options)


def supports(name: str, options: HaloOptions | None) -> bool:
    """Whether the algorithm ``name`` honours ``options`` (:func:`check_options` would pass)."""
    cls = ALGORITHMS[name]
    return options is None or ((cls.supports_precision or not options.compressed)
                               and (cls.supports_staleness or not options.staleness))


def auto_candidates(replicated: bool, options: HaloOptions | None = None) -> list[str]:
    """The algorithms ``"auto"`` compares for a 1D (``False``) or 1.5D (``True``) layout (that
    honour ``options``).

    Args:
        replicated (bool): the 1.5D algorithms (``True``) or the 1D ones (``False``).
        options (HaloOptions, optional): the halo options every candidate must support.
            (default: :obj:`None`, any)
    """
    return sorted(n for n, a in ALGORITHMS.items()
                  if a.auto_candidate and a.replicated == replicated and supports(n, options))


def algorithm_class(name: str) -> type[SpMMAlgorithm]:
    """The registered algorithm called ``name``; ValueError naming the valid ones otherwise.

    Args:
        name (str): the algorithm's :attr:`SpMMAlgorithm.name` (a key of :data:`ALGORITHMS`).
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]


def make_algorithm(name: str, adj: HaloAdj, exchanger: HaloExchanger | None = None,
                   grid: Optional["ProcessGrid"] = None) -> SpMMAlgorithm:
    """The algorithm ``name`` bound to ``adj``, exchanging through ``exchanger`` (on ``grid`` for
    1.5D algorithms).

    Args:
        name (str): the algorithm's :attr:`SpMMAlgorithm.name` (a key of :data:`ALGORITHMS`).
        adj (HaloAdj): this rank's (normalised) block row.
        exchanger (HaloExchanger, optional): how halo rows travel (see :class:`SpMMAlgorithm`).
            (default: :obj:`None`, exact exchanges over the default group)
        grid (ProcessGrid, optional): the 1.5D grid (required by replicated algorithms).
            (default: :obj:`None`)
    """
    return algorithm_class(name)(adj, exchanger, grid)
