"""Where checkpoints live, and how one becomes complete all at once::

    DIR/step-000000012/                 a complete checkpoint: DCP's files (.metadata, one
                                        __<rank>_0.distcp per rank) and checkpoint.json
    DIR/.partial-000000013-<nonce>/     one being written, or left by a job that died: never read
    DIR/.removing-step-000000010-<nonce>/  a checkpoint being pruned, or left by a job killed meanwhile

Every rank writes into the partial directory; once ``dcp.save`` returned on every rank (its
metadata is written after every rank's files), rank 0 writes ``checkpoint.json`` and renames the
directory to its final name (``os.replace`` of a directory is atomic on a POSIX file system,
then the parent directory is synced).  A reader takes the newest ``step-*`` directory holding
``checkpoint.json``, so a checkpoint half-written when a rank died is never the one resumed from.
A checkpoint is pruned by renaming it out of ``step-*`` first, so a job killed while deleting its
files leaves a ``.removing-*`` directory, which the next save removes with the dead ``.partial-*``
ones (as it removes a ``step-*`` directory holding only DCP's files and no ``checkpoint.json``,
what a prune killed midway left before it renamed first).
Rank 0 decides and every rank follows (one broadcast), so all ranks read the same checkpoint;
the directory must be on a file system every rank sees (one machine, or a shared one), as DCP's
file writer needs.
"""
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ..comm.group import is_distributed, raise_together

INFO = "checkpoint.json"
_PREFIX, _PARTIAL, _REMOVING = "step-", ".partial-", ".removing-"


def step_name(step: int) -> str:
    return f"{_PREFIX}{step:09d}"


def _rank_zero() -> bool:
    return not is_distributed(None) or dist.get_rank() == 0


def _from_rank_zero(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    if not is_distributed(None):
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def partial_directory(directory: str | Path, step: int) -> Path:
    """A new empty directory for the checkpoint of ``step``, the same on every rank (collective)."""
    def make() -> Path | None:
        if not _rank_zero():
            return None
        path = Path(directory) / f"{_PARTIAL}{step:09d}-{uuid.uuid4().hex[:12]}"
        path.mkdir(parents=True)
        return path
    return Path(_from_rank_zero(raise_together(make, "creating the checkpoint directory")))


def _sync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def publish(partial: Path, step: int, info: dict, keep: int | None) -> Path:
    """Completes the checkpoint written into ``partial`` (collective: call it once ``dcp.save``
    returned): ``checkpoint.json`` holding ``info``, the rename to ``step-<step>``, then the
    checkpoints beyond the newest ``keep`` and the partial directories of dead jobs are removed."""
    final = partial.parent / step_name(step)

    def complete() -> None:
        if not _rank_zero():
            return
        with open(partial / INFO, "w") as file:
            json.dump(info, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        if final.exists():  # the same step saved again (a resumed job): the new one replaces it
            _remove(final)
        os.replace(partial, final)
        _sync_directory(final.parent)
        _prune(final.parent, keep)
    raise_together(complete, f"completing the checkpoint {final}")
    return final


def _prune(directory: Path, keep: int | None) -> None:
    for path in [*directory.glob(f"{_PARTIAL}*"), *directory.glob(f"{_REMOVING}*")]:  # a job died saving or pruning
        shutil.rmtree(path, ignore_errors=True)
    for path in directory.glob(f"{_PREFIX}*"):
        if _pruned_in_part(path):
            _remove(path)
    if keep is not None:
        for path in complete_checkpoints(directory)[:-keep]:
            _remove(path)


def _remove(path: Path) -> None:
    """Deletes the checkpoint at ``path``, renamed out of ``step-*`` first (atomic): a job killed
    while deleting leaves a ``.removing-*`` directory, never a ``step-*`` that no listing sees."""
    doomed = path.parent / f"{_REMOVING}{path.name}-{uuid.uuid4().hex[:12]}"
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _pruned_in_part(path: Path) -> bool:
    """Whether ``path`` is a ``step-*`` directory without ``checkpoint.json`` holding DCP's files
    only (``.metadata``, ``*.distcp``): a checkpoint whose removal was cut short.  Anything else
    there (an empty directory, other files) was not made here and is left alone."""
    if not path.is_dir() or (path / INFO).exists():
        return False
    entries = list(path.iterdir())
    return bool(entries) and all(e.is_file() and (e.name == ".metadata" or e.name.endswith(".distcp"))
                                 for e in entries)


def complete_checkpoints(directory: str | Path) -> list[Path]:
    """The complete checkpoints in ``directory``, oldest first (this process's view).

    Args:
        directory (str or pathlib.Path): where :func:`~pyg_sparsecomm.checkpoint.save` writes.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob(f"{_PREFIX}*") if p.name[len(_PREFIX):].isdigit() and (p / INFO).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(_PREFIX):]))


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in ``directory`` as rank 0 sees it, on every rank
    (collective); ``None`` when there is none.

    Args:
        directory (str or pathlib.Path): where :func:`~pyg_sparsecomm.checkpoint.save` writes.
    """
    def newest() -> Path | None:
        found = complete_checkpoints(directory) if _rank_zero() else []
        return found[-1] if found else None
    return _from_rank_zero(raise_together(newest, f"listing the checkpoints in {directory}"))


def read_info(path: Path) -> dict:
    """``checkpoint.json`` of the checkpoint at ``path``."""
    with open(path / INFO) as file:
        return json.load(file)
