"""Distributed mini-batch training: loaders over a rank's shard whose batches carry a
per-batch sparsity-aware exchange plan.  The batch rules and the batch adjacency they build
live in :mod:`pyg_sparsecomm.sampling` (re-exported here).

One loader per kind of batch -- :class:`DistributedNeighborLoader`, :class:`DistributedLinkNeighborLoader`,
:class:`DistributedNodeSubsetLoader` -- each taking a ``Data`` or a ``HeteroData`` shard, as PyG's loaders
take both: the loader picks the sampling strategy of the shard's kind (``loader.sampler``,
``*_sampler`` modules).  ``DistributedHeteroNeighborLoader``, ``DistributedHeteroLinkNeighborLoader`` and
``DistributedHeteroNodeSubsetLoader`` are deprecated aliases of them (a :class:`DeprecationWarning` when
looked up), for one release."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"GlobalBatch": "..sampling", "HeteroGlobalBatch": "..sampling", "HeteroNeighborSampling": "..sampling",
            "HeteroNodeSubsetSampling": "..sampling", "LinkBatching": "..sampling", "NeighborSampling": "..sampling",
            "NodeSubsetSampling": "..sampling", "SampledAdj": "..sampling", "SampledRelationAdj": "..sampling",
            "global_batches": "..sampling", "hetero_global_batches": "..sampling",
            "hetero_link_global_batches": "..sampling", "hetero_subset_global_batches": "..sampling",
            "trim_to_layer": "..sampling", "DistributedLinkNeighborLoader": ".link_neighbor_loader",
            "DistributedNeighborLoader": ".neighbor_loader", "DistributedNodeSubsetLoader": ".node_subset_loader"}

_TAKES_BOTH = "it takes a HeteroData shard, as PyG's loaders do"
#: the heterogeneous loaders' old names: deprecated aliases of the loaders, for one release
DEPRECATED = {"DistributedHeteroNeighborLoader": ("DistributedNeighborLoader", _TAKES_BOTH),
              "DistributedHeteroLinkNeighborLoader": ("DistributedLinkNeighborLoader", _TAKES_BOTH),
              "DistributedHeteroNodeSubsetLoader": ("DistributedNodeSubsetLoader", _TAKES_BOTH)}

if TYPE_CHECKING:  # pragma: no cover
    from ..sampling import (
        GlobalBatch,
        HeteroGlobalBatch,
        HeteroNeighborSampling,
        HeteroNodeSubsetSampling,
        LinkBatching,
        NeighborSampling,
        NodeSubsetSampling,
        SampledAdj,
        SampledRelationAdj,
        global_batches,
        hetero_global_batches,
        hetero_link_global_batches,
        hetero_subset_global_batches,
        trim_to_layer,
    )
    from .link_neighbor_loader import DistributedLinkNeighborLoader
    from .neighbor_loader import DistributedNeighborLoader
    from .node_subset_loader import DistributedNodeSubsetLoader

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, renamed=DEPRECATED)
__all__ = ["DistributedNeighborLoader", "DistributedLinkNeighborLoader", "DistributedNodeSubsetLoader",
           "SampledAdj", "trim_to_layer", "NeighborSampling", "NodeSubsetSampling", "GlobalBatch", "global_batches",
           "HeteroNeighborSampling", "HeteroGlobalBatch", "hetero_global_batches", "SampledRelationAdj",
           "LinkBatching", "hetero_link_global_batches", "HeteroNodeSubsetSampling", "hetero_subset_global_batches"]
