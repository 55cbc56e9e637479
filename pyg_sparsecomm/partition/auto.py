"""``method="auto"``: METIS for small graphs, KaMinPar above a size when it is installed.

METIS's time and memory grow quickly with the graph, KaMinPar's far less at the same total
volume (``benchmarks/partition_scale.py`` measures both, RESULTS.md).  On small graphs METIS is
fast and the reference partition of earlier releases, so :func:`recommended_method` keeps it
there.
"""
from __future__ import annotations

import warnings

from torch import Tensor

from .kaminpar_backend import KAMINPAR_INSTALL_HINT, kaminpar_available
from .methods import METHODS, register

#: edges above which ``"auto"`` picks KaMinPar (when installed)
KAMINPAR_ABOVE_EDGES = 1_000_000


def recommended_method(num_edges: int, warn: bool = True) -> str:
    """``"kaminpar"`` for graphs of more than :data:`KAMINPAR_ABOVE_EDGES` edges when the
    ``kaminpar`` package is installed, else ``"metis"`` (with a warning naming the install
    when the graph is that large and ``warn``)."""
    if num_edges <= KAMINPAR_ABOVE_EDGES:
        return "metis"
    if kaminpar_available():
        return "kaminpar"
    if warn:
        warnings.warn(f"method='auto' partitions this graph of {num_edges} edges with METIS, which takes "
                      f"minutes and GBs from tens of millions of edges; KaMinPar about 8x less time and 6x "
                      f"less memory: {KAMINPAR_INSTALL_HINT}", stacklevel=3)
    return "metis"


@register("auto")
def auto_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int) -> Tensor:
    """The partition of :func:`recommended_method`'s method with its default options (both
    balance the row nonzeros; equal seeds give equal partitions)."""
    return METHODS[recommended_method(edge_index.size(1))](edge_index, num_nodes, num_parts, seed)
