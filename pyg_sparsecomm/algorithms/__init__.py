"""Distributed SpMM algorithms, one class per file, selected by name.

``"rdma"`` is declared, not imported: its module imports the one-sided engine
(:mod:`pyg_sparsecomm.rdma`), which loads at the first lookup of the class
(``ALGORITHMS["rdma"]``, ``make_algorithm("rdma", ...)``) or of ``RDMAStationaryC``.
"""
from typing import TYPE_CHECKING, Any

from .base import ALGORITHMS, SpMMAlgorithm, algorithm_class, auto_candidates, make_algorithm
from .oblivious_1d import Oblivious1D
from .oblivious_15d import Oblivious15D
from .overlap_1d import Overlap1D, Overlap1DP2P
from .settings import check_settings
from .sparse_1d import SparseAware1D
from .sparse_15d import SparseAware15D

if TYPE_CHECKING:  # pragma: no cover
    from .rdma import RDMAStationaryC

ALGORITHMS.declare("rdma", f"{__name__}.rdma")


def __getattr__(name: str) -> Any:
    if name == "RDMAStationaryC":
        return ALGORITHMS["rdma"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ALGORITHMS", "SpMMAlgorithm", "algorithm_class", "make_algorithm", "auto_candidates", "check_settings",
           "SparseAware1D", "Oblivious1D", "Overlap1D", "Overlap1DP2P", "SparseAware15D", "Oblivious15D",
           "RDMAStationaryC"]
