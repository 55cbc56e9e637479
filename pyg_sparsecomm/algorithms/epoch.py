r"""What a partition's exchanges cost per training epoch, priced by every algorithm's own formula.

The plan predicts rows (:class:`~pyg_sparsecomm.plan.stats.CommStats`: who sends how many rows
to whom per SpMM); what those rows cost depends on the algorithm that moves them, so the pricing
lives here, with the algorithms (the plan imports nothing above it):
``bytes_per_epoch(data.comm_stats, widths, algorithm="1.5d", replication=2)``.
"""
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..comm.grid import check_grid
from ..comm.halo_options import HaloOptions
from .base import algorithm_class, check_settings
from .cost import CostModel, volumes_of_all_ranks


class PlannedVolumes(Protocol):
    """What the pricing reads of a plan's statistics (a :class:`~pyg_sparsecomm.plan.stats.CommStats`)."""
    num_parts: int
    volume: np.ndarray
    part_sizes: np.ndarray
    spans: np.ndarray | None


def bytes_per_epoch(stats: PlannedVolumes, widths: Sequence[int], element_size: int = 4, algorithm: str = "1d",
                    replication: int = 1, options: HaloOptions | None = None) -> int:
    r"""Bytes all ranks send in one training epoch of a GCN whose layers exchange ``widths`` columns.

    ``DistributedGCNConv`` applies its linear map first, so layer ``l`` runs one SpMM
    (forward and backward) of ``out_channels`` columns.  Every algorithm is priced by
    its own :meth:`~pyg_sparsecomm.algorithms.SpMMAlgorithm.predict`, the figure its
    exchanges record in ``comm_counter()``:

    .. math::
        \sum_{l} \sum_{r=0}^{P-1} \mathrm{predict}(r, b_l).\mathrm{bytes\_sent}, \qquad
        b_l = \mathrm{widths}_l \cdot \mathrm{element\_size}

    (e.g. ``"1d"``: :math:`2 \cdot` ``total_rows`` :math:`\cdot \sum_l b_l`; ``"rdma"``
    always moves float64, whatever ``element_size``).

    Args:
        stats (CommStats): the partition's statistics (``data.comm_stats``).
        widths (Sequence[int]): the SpMM width of every layer.
        element_size (int, optional): bytes per element of the exchanged rows. (default: ``4``, float32)
        algorithm (str, optional): any registered name (``pyg_sparsecomm.algorithms.ALGORITHMS``).
            (default: ``"1d"``)
        replication (int, optional): ``c`` of a 1.5D algorithm; ``stats`` are then those of the
            partition into ``P / c`` parts. (default: ``1``)
        options (HaloOptions, optional): the layers' halo options: compressed halos are priced at
            :func:`~pyg_sparsecomm.comm.quantize.payload_row_bytes`. (default: :obj:`None`, exact)

    Raises:
        ValueError: for an unknown name (listing the valid ones), a 1D algorithm with
            ``replication > 1``, or an algorithm without a prediction.
    """
    check_settings(algorithm, replication, unit_grid=True, allow_auto=False)
    cls = algorithm_class(algorithm)
    check_grid(stats.num_parts * replication, replication)
    ranks = volumes_of_all_ranks(stats.volume, stats.part_sizes, replication, stats.spans)
    return int(cls.predict_epoch(ranks, widths, CostModel(), element_size, options)[1].sum())
