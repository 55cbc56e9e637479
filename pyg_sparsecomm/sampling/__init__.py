"""Mini-batch sampling shared by the loaders, the layers and the partitioner: the batch rules
(:mod:`.rules`, :mod:`.hetero_rules` and :mod:`.hetero_subset_rules` for heterogeneous graphs,
:mod:`.link_rules` for link batches, drawn with the counter-based hashes of :mod:`.randomness`) and a batch's trimmable
adjacency (:mod:`.sampled_adj`).

It sits below :mod:`pyg_sparsecomm.loader`, :mod:`pyg_sparsecomm.nn` and
:mod:`pyg_sparsecomm.partition`, which all import it, so none of them imports another for it.
"""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"HeteroGlobalBatch": ".hetero_rules", "HeteroNeighborSampling": ".hetero_rules",
            "hetero_global_batches": ".hetero_rules", "HeteroNodeSubsetSampling": ".hetero_subset_rules",
            "hetero_subset_global_batches": ".hetero_subset_rules", "LinkBatching": ".link_rules",
            "hetero_link_global_batches": ".link_rules", "GlobalBatch": ".rules", "NeighborSampling": ".rules",
            "NodeSubsetSampling": ".rules", "global_batches": ".rules", "SampledAdj": ".sampled_adj",
            "trim_to_layer": ".sampled_adj", "SampledRelationAdj": ".sampled_relation_adj"}

if TYPE_CHECKING:  # pragma: no cover
    from .hetero_rules import HeteroGlobalBatch, HeteroNeighborSampling, hetero_global_batches
    from .hetero_subset_rules import HeteroNodeSubsetSampling, hetero_subset_global_batches
    from .link_rules import LinkBatching, hetero_link_global_batches
    from .rules import GlobalBatch, NeighborSampling, NodeSubsetSampling, global_batches
    from .sampled_adj import SampledAdj, trim_to_layer
    from .sampled_relation_adj import SampledRelationAdj

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["SampledAdj", "trim_to_layer", "NeighborSampling", "NodeSubsetSampling", "GlobalBatch", "global_batches",
           "HeteroNeighborSampling", "HeteroGlobalBatch", "hetero_global_batches",
           "SampledRelationAdj", "LinkBatching", "hetero_link_global_batches", "HeteroNodeSubsetSampling",
           "hetero_subset_global_batches"]
