"""Distributed SpMM algorithms, one class per file, selected by name."""
from .base import ALGORITHMS, SpMMAlgorithm, algorithm_class, auto_candidates, make_algorithm
from .oblivious_1d import Oblivious1D
from .oblivious_15d import Oblivious15D
from .overlap_1d import Overlap1D, Overlap1DP2P
from .rdma import RDMAStationaryC
from .settings import check_settings
from .sparse_1d import SparseAware1D
from .sparse_15d import SparseAware15D

__all__ = ["ALGORITHMS", "SpMMAlgorithm", "algorithm_class", "make_algorithm", "auto_candidates", "check_settings",
           "SparseAware1D", "Oblivious1D", "Overlap1D", "Overlap1DP2P", "SparseAware15D", "Oblivious15D",
           "RDMAStationaryC"]
