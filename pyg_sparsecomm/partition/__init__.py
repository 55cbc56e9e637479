from . import auto, hypergraph, kaminpar_backend, stochastic  # noqa: F401  (register 'auto', 'hypergraph', ...)
from .methods import METHODS, register
from .partitioner import SparsityAwarePartitioner

__all__ = ["METHODS", "register", "SparsityAwarePartitioner"]
