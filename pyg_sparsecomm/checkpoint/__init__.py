r"""Checkpoint and resume: long runs survive failures under ``torchrun --max-restarts``.

::

    point = checkpoint.load(ckpt_dir, model=model, shard=local, optimizer=optimizer, loader=loader)
    start = 1 if point is None else point.step + 1
    for epoch in range(start, epochs + 1):
        ...                                                   # one training step
        if epoch % every == 0:
            checkpoint.save(ckpt_dir, epoch, model=model, shard=local, optimizer=optimizer, loader=loader)

:func:`save` writes, through ``torch.distributed.checkpoint``, the model, optimizer, LR scheduler,
the loader's epoch and position in it, the caller's ``extra``, every rank's random streams and the
package's own state (rounding streams of compressed halos, stale pipelines of ``staleness=1``
layers, ``NodeDropout`` steps), every rank's rows of the tables sharded by owner (LightGCN's, by global
row id: :mod:`.owner_rows`) and the partition's fingerprint, atomically (:mod:`.directory`).
:func:`load` restores the newest complete one: on the same partition, training continues bitwise
as if never interrupted; on another partition (``allow_repartition=True``, e.g. another number of
ranks) from the same parameters (a sharded table's rows re-sharded by global id), optimizer state
and loader position, with the ranks' own state started anew (:class:`ResumePoint`).
"""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"complete_checkpoints": ".directory", "latest_checkpoint": ".directory",
            "partition_fingerprint": ".rank_state", "PartitionMismatchError": ".resume", "ResumePoint": ".resume",
            "load": ".resume", "save": ".resume"}

if TYPE_CHECKING:  # pragma: no cover
    from .directory import complete_checkpoints, latest_checkpoint
    from .rank_state import partition_fingerprint
    from .resume import PartitionMismatchError, ResumePoint, load, save

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["save", "load", "ResumePoint", "PartitionMismatchError", "latest_checkpoint", "complete_checkpoints",
           "partition_fingerprint"]
