from . import hypergraph, kaminpar_backend, stochastic  # noqa: F401  (register 'hypergraph', 'kaminpar', ...)
from .methods import METHODS, register
from .partitioner import SparsityAwarePartitioner

__all__ = ["METHODS", "register", "SparsityAwarePartitioner"]
