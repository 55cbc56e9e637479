"""Distributed mini-batch training: loaders over a rank's shard whose batches carry a
per-batch sparsity-aware exchange plan.  The batch rules and the batch adjacency they build
live in :mod:`pyg_sparsecomm.sampling` (re-exported here)."""
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

__all__ = ["DistributedNeighborLoader", "DistributedHeteroNeighborLoader", "DistributedLinkNeighborLoader",
           "DistributedNodeSubsetLoader", "SampledAdj", "trim_to_layer", "NeighborSampling", "NodeSubsetSampling",
           "GlobalBatch", "global_batches", "HeteroNeighborSampling", "HeteroGlobalBatch", "hetero_global_batches",
           "SampledRelationAdj", "DistributedHeteroLinkNeighborLoader", "LinkBatching",
           "hetero_link_global_batches", "DistributedHeteroNodeSubsetLoader", "HeteroNodeSubsetSampling",
           "hetero_subset_global_batches"]
