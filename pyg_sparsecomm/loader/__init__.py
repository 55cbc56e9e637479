"""Distributed mini-batch training: loaders over a rank's shard whose batches carry a
per-batch sparsity-aware exchange plan.  The batch rules and the batch adjacency they build
live in :mod:`pyg_sparsecomm.sampling` (re-exported here).

The heterogeneous loaders are imported here, not at first use: each registers itself as the class its
homogeneous loader dispatches a ``HeteroData`` shard to (``DistributedNeighborLoader(hetero_shard)``, as
PyG's ``NeighborLoader`` takes both); the names resolve lazily as in every package."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from . import hetero_link_loader, hetero_neighbor_loader, hetero_subset_loader  # noqa: F401  (the HeteroData dispatch)

_EXPORTS = {"GlobalBatch": "..sampling", "HeteroGlobalBatch": "..sampling", "HeteroNeighborSampling": "..sampling",
            "HeteroNodeSubsetSampling": "..sampling", "LinkBatching": "..sampling", "NeighborSampling": "..sampling",
            "NodeSubsetSampling": "..sampling", "SampledAdj": "..sampling", "SampledRelationAdj": "..sampling",
            "global_batches": "..sampling", "hetero_global_batches": "..sampling",
            "hetero_link_global_batches": "..sampling", "hetero_subset_global_batches": "..sampling",
            "trim_to_layer": "..sampling", "DistributedHeteroLinkNeighborLoader": ".hetero_link_loader",
            "DistributedHeteroNeighborLoader": ".hetero_neighbor_loader",
            "DistributedHeteroNodeSubsetLoader": ".hetero_subset_loader",
            "DistributedLinkNeighborLoader": ".link_neighbor_loader",
            "DistributedNeighborLoader": ".neighbor_loader", "DistributedNodeSubsetLoader": ".node_subset_loader"}

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
    from .hetero_link_loader import DistributedHeteroLinkNeighborLoader
    from .hetero_neighbor_loader import DistributedHeteroNeighborLoader
    from .hetero_subset_loader import DistributedHeteroNodeSubsetLoader
    from .link_neighbor_loader import DistributedLinkNeighborLoader
    from .neighbor_loader import DistributedNeighborLoader
    from .node_subset_loader import DistributedNodeSubsetLoader

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["DistributedNeighborLoader", "DistributedHeteroNeighborLoader", "DistributedLinkNeighborLoader",
           "DistributedNodeSubsetLoader", "SampledAdj", "trim_to_layer", "NeighborSampling", "NodeSubsetSampling",
           "GlobalBatch", "global_batches", "HeteroNeighborSampling", "HeteroGlobalBatch", "hetero_global_batches",
           "SampledRelationAdj", "DistributedHeteroLinkNeighborLoader", "LinkBatching",
           "hetero_link_global_batches", "DistributedHeteroNodeSubsetLoader", "HeteroNodeSubsetSampling",
           "hetero_subset_global_batches"]
