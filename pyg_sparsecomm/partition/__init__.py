from . import auto, hypergraph, kaminpar_backend, stochastic  # noqa: F401  (register 'auto', 'hypergraph', ...)
from .hypergraph import set_hypergraph_threads
from .kaminpar_defaults import PLAIN_OPTIONS, AutomaticOptionsWarning
from .methods import METHODS, register
from .partitioner import SparsityAwarePartitioner

__all__ = ["AutomaticOptionsWarning", "METHODS", "PLAIN_OPTIONS", "register", "set_hypergraph_threads",
           "SparsityAwarePartitioner"]
