"""pyg_sparsecomm: sparsity-aware full-graph GNN training across processes for PyTorch Geometric.

The public names load their module at first use (PEP 562), so ``import pyg_sparsecomm.partition``
or ``from pyg_sparsecomm import SparsityAwarePartitioner`` imports the partitioner alone, not the
layers, the SpMM algorithms or the one-sided engine.
"""
import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

#: public name -> module (relative to this package) that defines it
_EXPORTS = {
    "HaloAdj": ".adj",
    "comm_counter": ".comm.counters",
    "seed_rounding": ".comm.rounding", "PeerFailedError": ".comm.peer_failure",
    "CostModel": ".cost",
    "shard": ".data",
    "partition_files": ".from_files",
    "ProcessGrid": ".grid", "process_grid": ".grid",
    "predict_layouts": ".layout",
    "DistributedNeighborLoader": ".loader", "DistributedNodeSubsetLoader": ".loader",
    "DistributedGCNConv": ".nn", "NodeDropout": ".nn", "distribute": ".nn",
    "LossNormalisationWarning": ".nn.gradient_sync",
    "SparsityAwarePartitioner": ".partition", "AutomaticOptionsWarning": ".partition",
    "RankPlan": ".plan", "comm_pattern": ".plan", "rank_plan": ".plan",
    "PerRankValueWarning": ".per_rank",
    "init_distributed": ".runtime",
    "partition_and_shard": ".startup", "partition_on_rank_zero": ".startup", "rank_zero_first": ".startup",
    "CommStats": ".stats",
    "graph_fingerprint": ".store", "load_shard": ".store", "partition_source": ".store", "save_partition": ".store",
    "distributed_loss": ".training", "gather_nodes": ".training", "global_accuracy": ".training",
    "global_count": ".training", "global_sum": ".training", "sync_gradients": ".training",
}

if TYPE_CHECKING:  # pragma: no cover  (what type checkers and IDEs see; _EXPORTS is what runs)
    from .adj import HaloAdj
    from .comm.counters import comm_counter
    from .comm.peer_failure import PeerFailedError
    from .comm.rounding import seed_rounding
    from .cost import CostModel
    from .data import shard
    from .from_files import partition_files
    from .grid import ProcessGrid, process_grid
    from .layout import predict_layouts
    from .loader import DistributedNeighborLoader, DistributedNodeSubsetLoader
    from .nn import DistributedGCNConv, NodeDropout, distribute
    from .nn.gradient_sync import LossNormalisationWarning
    from .partition import AutomaticOptionsWarning, SparsityAwarePartitioner
    from .per_rank import PerRankValueWarning
    from .plan import RankPlan, comm_pattern, rank_plan
    from .runtime import init_distributed
    from .startup import partition_and_shard, partition_on_rank_zero, rank_zero_first
    from .stats import CommStats
    from .store import graph_fingerprint, load_shard, partition_source, save_partition
    from .training import distributed_loss, gather_nodes, global_accuracy, global_count, global_sum, sync_gradients


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a subpackage: pyg_sparsecomm.nn, ...
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "DistributedGCNConv", "distribute", "NodeDropout", "SparsityAwarePartitioner", "shard", "HaloAdj",
    "DistributedNeighborLoader", "DistributedNodeSubsetLoader",
    "RankPlan", "CommStats",
    "comm_pattern", "rank_plan", "comm_counter", "seed_rounding", "distributed_loss", "sync_gradients", "global_sum",
    "global_count", "global_accuracy", "save_partition", "load_shard", "graph_fingerprint", "partition_source",
    "ProcessGrid", "process_grid", "CostModel", "predict_layouts", "__version__",
    "init_distributed",
    "rank_zero_first", "partition_and_shard", "partition_on_rank_zero", "gather_nodes", "LossNormalisationWarning",
    "partition_files", "PerRankValueWarning", "PeerFailedError",
    "AutomaticOptionsWarning",
]
