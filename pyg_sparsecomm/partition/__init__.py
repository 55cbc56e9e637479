"""Partitioning the global graph into part vectors: :class:`SparsityAwarePartitioner`
(:mod:`.partitioner`), one registered function per method (:mod:`.methods`: ``register``), balancing
(:mod:`.balance`, :mod:`.moves`), the backends (:mod:`.kaminpar_backend`, :mod:`.kahypar_backend`,
:mod:`.hypergraph`, :mod:`.multiconstraint`), :mod:`.stochastic` and :mod:`.hetero` (a ``HeteroData``'s
part vectors).

The method modules and the partitioner are imported here, not at first use: importing a method module
registers its methods in :data:`.methods.METHODS`, which every lookup of a method name reads, and the
partitioner is what the package is imported for; the names resolve lazily as in every package."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from . import auto, hypergraph, kaminpar_backend, partitioner, stochastic  # noqa: F401  (register 'auto', ...)

_EXPORTS = {"set_hypergraph_threads": ".hypergraph", "PLAIN_OPTIONS": ".kaminpar_defaults",
            "AutomaticOptionsWarning": ".kaminpar_defaults", "METHODS": ".methods", "register": ".methods",
            "SparsityAwarePartitioner": ".partitioner"}

if TYPE_CHECKING:  # pragma: no cover
    from .hypergraph import set_hypergraph_threads
    from .kaminpar_defaults import PLAIN_OPTIONS, AutomaticOptionsWarning
    from .methods import METHODS, register
    from .partitioner import SparsityAwarePartitioner

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["AutomaticOptionsWarning", "METHODS", "PLAIN_OPTIONS", "register", "set_hypergraph_threads",
           "SparsityAwarePartitioner"]
