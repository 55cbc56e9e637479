"""pyg_sparsecomm: sparsity-aware full-graph GNN training across processes for PyTorch Geometric.

The root exports what a training script uses; the pieces below it stay importable from their
subpackages (:mod:`~pyg_sparsecomm.plan`, :mod:`~pyg_sparsecomm.algorithms`, :mod:`~pyg_sparsecomm.comm`, ...).
Every name loads its module at first use (:mod:`~pyg_sparsecomm._lazy`), so ``import pyg_sparsecomm.partition``
or ``from pyg_sparsecomm import SparsityAwarePartitioner`` imports the partitioner alone, not the layers,
the SpMM algorithms or the one-sided engine.
"""
from typing import TYPE_CHECKING

from . import _moved_modules
from ._lazy import lazy_exports
from .graph.dataset_lock import lock_dataset_files_once_loaded

__version__ = "0.3.0"

#: public name -> module (relative to this package) that defines it
_EXPORTS = {
    # graph -> partition -> shard
    "SparsityAwarePartitioner": ".partition", "AutomaticOptionsWarning": ".partition",
    "shard": ".store.rank_data", "HaloAdj": ".plan.halo_adj", "CommStats": ".plan.stats",
    "save_partition": ".store.files", "load_shard": ".store.files", "graph_fingerprint": ".store.files",
    "partition_source": ".store.files", "partition_files": ".store.from_files",
    "shard_index": ".store.shard_index", "ShardIndex": ".graph.node_index",
    "ShardSelection": ".graph.shard_selection", "PerRankSelectionError": ".graph.shard_selection",
    # launching a job
    "init_distributed": ".launch.runtime", "rank_zero_first": ".launch.startup",
    "partition_and_shard": ".launch.startup", "partition_on_rank_zero": ".launch.startup",
    "process_grid": ".comm.grid", "PeerFailedError": ".comm.peer_failure",
    # layers and loaders
    "distribute": ".nn", "DistributedGCNConv": ".nn", "NodeDropout": ".nn",
    "DistributedNeighborLoader": ".loader", "DistributedNodeSubsetLoader": ".loader",
    # the training loop
    "distributed_loss": ".training.whole_graph", "sync_gradients": ".training.whole_graph",
    "global_sum": ".training.whole_graph", "global_count": ".training.whole_graph",
    "global_bincount": ".training.whole_graph",
    "global_accuracy": ".training.whole_graph", "gather_nodes": ".training.whole_graph",
    "GlobalEvaluator": ".training.evaluator",
    "LossNormalisationWarning": ".nn.gradient_sync", "PerRankValueWarning": ".training.per_rank",
    "comm_counter": ".comm.counters",
}

#: names the root exported before 0.3.0 -> where they live now (a DeprecationWarning names the import)
_MOVED = {
    "RankPlan": "pyg_sparsecomm.plan", "comm_pattern": "pyg_sparsecomm.plan", "rank_plan": "pyg_sparsecomm.plan",
    "CostModel": "pyg_sparsecomm.algorithms", "predict_layouts": "pyg_sparsecomm.algorithms",
    "ProcessGrid": "pyg_sparsecomm.comm", "seed_rounding": "pyg_sparsecomm.comm",
}

if TYPE_CHECKING:  # pragma: no cover  (what type checkers and IDEs see; _EXPORTS is what runs)
    from .comm.counters import comm_counter
    from .comm.grid import process_grid
    from .comm.peer_failure import PeerFailedError
    from .graph.node_index import ShardIndex
    from .graph.shard_selection import PerRankSelectionError, ShardSelection
    from .launch.runtime import init_distributed
    from .launch.startup import partition_and_shard, partition_on_rank_zero, rank_zero_first
    from .loader import DistributedNeighborLoader, DistributedNodeSubsetLoader
    from .nn import DistributedGCNConv, NodeDropout, distribute
    from .nn.gradient_sync import LossNormalisationWarning
    from .partition import AutomaticOptionsWarning, SparsityAwarePartitioner
    from .plan.halo_adj import HaloAdj
    from .plan.stats import CommStats
    from .store.files import graph_fingerprint, load_shard, partition_source, save_partition
    from .store.from_files import partition_files
    from .store.rank_data import shard
    from .store.shard_index import shard_index
    from .training.evaluator import GlobalEvaluator
    from .training.per_rank import PerRankValueWarning
    from .training.whole_graph import (
        distributed_loss,
        gather_nodes,
        global_accuracy,
        global_bincount,
        global_count,
        global_sum,
        sync_gradients,
    )

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _MOVED)
_moved_modules.install(__name__)  # 0.2's module paths (pyg_sparsecomm.runtime, ...) warn, then work
lock_dataset_files_once_loaded()  # every rank may build the dataset: one downloads and processes, the others load

__all__ = [
    "__version__", "SparsityAwarePartitioner", "AutomaticOptionsWarning", "shard", "HaloAdj", "CommStats",
    "save_partition", "load_shard", "graph_fingerprint", "partition_source", "partition_files", "shard_index",
    "ShardIndex", "ShardSelection", "PerRankSelectionError", "init_distributed", "rank_zero_first",
    "partition_and_shard", "partition_on_rank_zero",
    "process_grid",
    "PeerFailedError", "distribute", "DistributedGCNConv", "NodeDropout", "DistributedNeighborLoader",
    "DistributedNodeSubsetLoader", "distributed_loss", "sync_gradients", "global_sum", "global_count",
    "global_bincount", "global_accuracy", "gather_nodes", "GlobalEvaluator", "LossNormalisationWarning",
    "PerRankValueWarning", "comm_counter",
]
