"""Distributed mini-batch training: loaders over a rank's shard whose batches carry a
per-batch sparsity-aware exchange plan."""
from .neighbor_loader import DistributedNeighborLoader
from .node_subset_loader import DistributedNodeSubsetLoader
from .sampled_adj import SampledAdj, trim_to_layer
from .sampling import GlobalBatch, NeighborSampling, NodeSubsetSampling, global_batches

__all__ = ["DistributedNeighborLoader", "DistributedNodeSubsetLoader", "SampledAdj", "trim_to_layer",
           "NeighborSampling", "NodeSubsetSampling", "GlobalBatch", "global_batches"]
