"""pyg_sparsecomm: sparsity-aware full-graph GNN training across processes for PyTorch Geometric."""
from .adj import HaloAdj
from .comm.counters import comm_counter
from .comm.rounding import seed_rounding
from .cost import CostModel
from .data import shard
from .grid import ProcessGrid, process_grid
from .layout import predict_layouts
from .loader import DistributedNeighborLoader, DistributedNodeSubsetLoader
from .nn import DistributedGCNConv, NodeDropout, distribute
from .nn.gradient_sync import LossNormalisationWarning
from .partition import SparsityAwarePartitioner
from .plan import RankPlan, comm_pattern, rank_plan
from .runtime import init_distributed
from .startup import partition_and_shard, rank_zero_first
from .stats import CommStats
from .store import graph_fingerprint, load_shard, partition_source, save_partition
from .training import distributed_loss, gather_nodes, global_accuracy, global_count, global_sum, sync_gradients

__version__ = "0.2.0"

__all__ = [
    "DistributedGCNConv", "distribute", "NodeDropout", "SparsityAwarePartitioner", "shard", "HaloAdj",
    "DistributedNeighborLoader", "DistributedNodeSubsetLoader",
    "RankPlan", "CommStats",
    "comm_pattern", "rank_plan", "comm_counter", "seed_rounding", "distributed_loss", "sync_gradients", "global_sum",
    "global_count", "global_accuracy", "save_partition", "load_shard", "graph_fingerprint", "partition_source",
    "ProcessGrid", "process_grid", "CostModel", "predict_layouts", "__version__",
    "init_distributed",
    "rank_zero_first", "partition_and_shard", "gather_nodes", "LossNormalisationWarning",
]
