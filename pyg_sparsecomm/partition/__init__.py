from . import hypergraph  # noqa: F401  (registers 'hypergraph')
from .methods import METHODS, register
from .partitioner import SparsityAwarePartitioner

__all__ = ["METHODS", "register", "SparsityAwarePartitioner"]
