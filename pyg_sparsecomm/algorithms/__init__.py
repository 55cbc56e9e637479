"""Distributed SpMM algorithms, one class per file, selected by name."""
from .base import ALGORITHMS, SpMMAlgorithm, make_algorithm
from .oblivious_1d import Oblivious1D
from .overlap_1d import Overlap1D
from .sparse_1d import SparseAware1D

__all__ = ["ALGORITHMS", "SpMMAlgorithm", "make_algorithm", "SparseAware1D", "Oblivious1D", "Overlap1D"]
