"""A rank's shard and the partition files it is read from: :func:`shard` (this rank's ``Data`` or
``HeteroData`` from a partitioned graph), :func:`save_partition` / :func:`load_shard` (partition once,
train many times; atomic, hashed files) and :func:`partition_files` (out-of-core partitioning from
``.npy`` files); :func:`shard_index` (the whole graph's index lists on a shard)."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"shard": ".rank_data", "save_partition": ".files", "load_shard": ".files",
            "graph_fingerprint": ".files", "partition_source": ".files", "partition_files": ".from_files",
            "shard_index": ".shard_index"}

if TYPE_CHECKING:  # pragma: no cover
    from .files import graph_fingerprint, load_shard, partition_source, save_partition
    from .from_files import partition_files
    from .rank_data import shard
    from .shard_index import shard_index

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "shard", "save_partition", "load_shard", "graph_fingerprint", "partition_source", "partition_files",
    "shard_index",
]
