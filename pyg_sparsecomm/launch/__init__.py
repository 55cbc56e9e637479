"""Joining and starting a ``torchrun`` job: the process group and device (:mod:`.runtime`), a key space
per restart attempt (:mod:`.attempts`), a ported script's start-up (:mod:`.startup`: the dataset
processed once, then this rank's shard) (peak memory per rank: :mod:`pyg_sparsecomm.memory`)."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"init_distributed": ".runtime", "rank_zero_first": ".startup", "partition_and_shard": ".startup",
            "partition_on_rank_zero": ".startup"}

if TYPE_CHECKING:  # pragma: no cover
    from .runtime import init_distributed
    from .startup import partition_and_shard, partition_on_rank_zero, rank_zero_first

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "init_distributed", "rank_zero_first", "partition_and_shard", "partition_on_rank_zero",
]
