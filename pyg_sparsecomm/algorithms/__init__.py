"""Distributed SpMM algorithms, one class per file, selected by name.

``"rdma"`` is declared, not imported: its module imports the one-sided engine
(:mod:`pyg_sparsecomm.rdma`), which loads at the first lookup of the class
(``ALGORITHMS["rdma"]``, ``make_algorithm("rdma", ...)``) or of ``RDMAStationaryC``.
"""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .base import ALGORITHMS, SpMMAlgorithm, algorithm_class, auto_candidates, check_settings, make_algorithm
from .oblivious_1d import Oblivious1D
from .oblivious_15d import Oblivious15D
from .overlap_1d import Overlap1D, Overlap1DP2P
from .sparse_1d import SparseAware1D
from .sparse_15d import SparseAware15D

if TYPE_CHECKING:  # pragma: no cover
    from .cost import CostModel
    from .epoch import bytes_per_epoch
    from .layout import predict_layouts
    from .rdma import RDMAStationaryC

ALGORITHMS.declare("rdma", f"{__name__}.rdma")


# the class RDMAStationaryC is the one ALGORITHMS["rdma"] loads (its module registers it)
__getattr__, __dir__ = lazy_exports(__name__, {"RDMAStationaryC": ".rdma", "CostModel": ".cost",
                                               "predict_layouts": ".layout", "bytes_per_epoch": ".epoch"})


__all__ = ["ALGORITHMS", "SpMMAlgorithm", "algorithm_class", "make_algorithm", "auto_candidates", "check_settings",
           "SparseAware1D", "Oblivious1D", "Overlap1D", "Overlap1DP2P", "SparseAware15D", "Oblivious15D",
           "RDMAStationaryC", "CostModel", "predict_layouts", "bytes_per_epoch"]
