"""Who sends which rows: the pure, distribution-free communication plan of a partition.

:func:`comm_pattern` (the rows each part needs from each other part), :class:`RankPlan` (one rank's
``[owned | halo]`` relabelling, send and receive lists), the rank's adjacency blocks :class:`HaloAdj`
and :class:`RelationAdj`, :class:`CommStats` (the volumes a plan predicts) and, of a heterogeneous
graph, the patterns of its relations and source types (:mod:`.hetero`, :class:`HeteroCommStats`). Nothing here uses
``torch.distributed``: a plan for any ``P`` is computed in one process.
"""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"RankPlan": ".homogeneous", "comm_pattern": ".homogeneous", "rank_plan": ".homogeneous",
            "HaloAdj": ".halo_adj", "RelationAdj": ".relation_adj", "CommStats": ".stats",
            "HeteroCommStats": ".hetero"}

if TYPE_CHECKING:  # pragma: no cover
    from .halo_adj import HaloAdj
    from .hetero import HeteroCommStats
    from .homogeneous import RankPlan, comm_pattern, rank_plan
    from .relation_adj import RelationAdj
    from .stats import CommStats

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "RankPlan", "comm_pattern", "rank_plan", "HaloAdj", "RelationAdj", "CommStats", "HeteroCommStats",
]
