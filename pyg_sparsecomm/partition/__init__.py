from . import hypergraph, stochastic  # noqa: F401  (register 'hypergraph', 'stochastic_hypergraph')
from .methods import METHODS, register
from .partitioner import SparsityAwarePartitioner

__all__ = ["METHODS", "register", "SparsityAwarePartitioner"]
