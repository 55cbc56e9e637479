"""``save`` and ``load``: a training run's state through ``torch.distributed.checkpoint`` (DCP).

One checkpoint holds, as DCP entries:

* ``model`` and ``optimizer``: DCP's ``get_state_dict`` (keys are parameter names, so they load
  into any number of ranks); the same on every rank, so DCP writes them once;
* ``scheduler``, ``loader`` (:meth:`DistributedLoader.state_dict
  <pyg_sparsecomm.loader.base.DistributedLoader.state_dict>`: epoch and position in it) and the
  caller's ``extra``: the same on every rank, one entry each;
* ``rank_state/<r>``: rank ``r``'s own state (:mod:`.rank_state`: random streams, rounding
  streams, stale pipelines);
* ``owner_rows/<r>/...``: rank ``r``'s rows of the parameters sharded by owner (LightGCN's
  table) and of their optimizer state, by global row id (:mod:`.owner_rows`);

and ``checkpoint.json`` (:mod:`.directory`): step, world size, every rank's
:func:`~.rank_state.partition_fingerprint` and the layout of the tables sharded by owner.
"""
import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch_geometric.data import Data

from ..comm.group import host_all_reduce, is_distributed, raise_together
from ..nn.owner_sharded import owner_sharded_parameters
from . import directory as layout
from . import owner_rows
from .rank_state import load_rank_state, partition_fingerprint, rank_state

#: 2: parameters sharded by owner saved per rank (1 kept one rank's rows of them)
FORMAT_VERSION = 2


class PartitionMismatchError(ValueError):
    """:func:`load` of a checkpoint saved on another partition without ``allow_repartition=True``
    (e.g. after an elastic membership change: another number of ranks)."""


@dataclass
class ResumePoint:
    """Where a loaded checkpoint stood.

    Attributes:
        step (int): the ``step`` it was saved with (continue after it).
        extra (Any, optional): the ``extra`` it was saved with. (default: :obj:`None`)
        path (pathlib.Path, optional): its directory. (default: :obj:`None`)
        world_size (int, optional): the number of ranks that saved it. (default: :obj:`1`)
        repartitioned (bool, optional): loaded on another partition (``allow_repartition=True``): parameters,
            optimizer, scheduler, loader position and ``extra`` are those saved; the ranks' own
            state (random streams, rounding streams, stale pipelines) starts anew. (default: :obj:`False`)
        info (dict, optional): its ``checkpoint.json`` (step, world size, every rank's partition
            fingerprint). (default: ``{}``)
    """
    step: int
    extra: Any = None
    path: Path | None = None
    world_size: int = 1
    repartitioned: bool = False
    info: dict = field(default_factory=dict)


def _rank() -> int:
    return dist.get_rank() if is_distributed(None) else 0


def _world_size() -> int:
    return dist.get_world_size() if is_distributed(None) else 1


@contextmanager
def _single_process_quietly() -> Iterator[None]:
    """DCP warns on every call without a process group ("assuming the intent is to save in a single
    process"): that is the intent here (a script run without torchrun)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _pack(value: Any) -> bytes:
    """One opaque DCP entry (DCP would otherwise split nested dicts into entries of their own)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _unpack(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)  # written by _pack (DCP loads its own bytes so too)


def _every_rank(mine: Any) -> list[Any]:
    """Every rank's ``mine``, on every rank."""
    if not is_distributed(None):
        return [mine]
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return every


def save(directory: str | Path, step: int, *, model: torch.nn.Module, shard: Data,
         optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None, loader: Any = None,
         extra: Any = None, keep: int | None = 2) -> Path:
    """Saves a checkpoint of training after ``step`` into ``directory/step-<step>``; collective
    (every rank calls it at the same step).  Returns the checkpoint's directory.

    Atomic (:mod:`.directory`): a checkpoint appears complete or not at all.  Stale pipelines
    are waited for first (their exchanges in flight complete), which changes nothing the next
    step computes.

    Args:
        directory (str or Path): where checkpoints live (created; shared by every rank).
        step (int): the training step (or epoch) just completed.
        model (torch.nn.Module): the (``distribute()``d) model: parameters, buffers, ``NodeDropout``
            steps, and its distributed layers' stale pipelines.
        shard (Data): the rank's shard (its partition's fingerprint is recorded).
        optimizer (torch.optim.Optimizer, optional): its state (Adam's moments, step counts).
            (default: :obj:`None`)
        scheduler (torch.optim.lr_scheduler.LRScheduler, optional): an LR scheduler (anything with
            ``state_dict``/``load_state_dict``). (default: :obj:`None`)
        loader (DistributedNeighborLoader, optional): a distributed loader: its epoch and the batches
            taken in it. (default: :obj:`None`)
        extra (Any, optional): anything picklable, the same on every rank (e.g. the loss history).
            (default: :obj:`None`)
        keep (int, optional): complete checkpoints kept (the oldest are removed; ``None``: all).
            (default: :obj:`2`)
    """
    if keep is not None and keep < 1:
        raise ValueError(f"checkpoint.save: keep must be >= 1 or None, got {keep}")
    model_state, optimizer_state, sharded = _state_dicts(model, shard, optimizer, "checkpoint.save")
    every = _every_rank((partition_fingerprint(shard), sharded.layout()))
    sharded_layout = owner_rows.saved_layout([rows for _, rows in every])
    state: dict[str, Any] = {"model": model_state, f"rank_state/{_rank()}": rank_state(model),
                             **sharded.entries(_rank()),
                             "replicated": _pack({"scheduler": None if scheduler is None else scheduler.state_dict(),
                                                  "loader": None if loader is None else loader.state_dict(),
                                                  "extra": extra})}
    if optimizer_state is not None:
        state["optimizer"] = optimizer_state
    partial = layout.partial_directory(directory, step)
    with _single_process_quietly():
        dcp.save(state, checkpoint_id=partial, no_dist=not is_distributed(None))
    info = {"format_version": FORMAT_VERSION, "step": int(step), "world_size": _world_size(),
            "partition_fingerprints": [fingerprint for fingerprint, _ in every], "optimizer": optimizer is not None,
            owner_rows.ENTRY: sharded_layout}
    return layout.publish(partial, step, info, keep)


def _state_dicts(model: torch.nn.Module, shard: Data, optimizer: torch.optim.Optimizer | None,
                 what: str) -> tuple[dict, dict | None, owner_rows.OwnerRowState]:
    """DCP's state dicts of the model and optimizer, the parameters sharded by owner (sharded to
    ``shard`` first, before the optimizer's state is made) taken out of them."""
    declared = raise_together(lambda: owner_sharded_parameters(model, shard), what)
    model_state, optimizer_state = _model_and_optimizer(model, optimizer)
    sharded = raise_together(lambda: owner_rows.take(declared, model_state, optimizer_state), what)
    return model_state, optimizer_state, sharded


def _model_and_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> tuple[dict, dict | None]:
    if optimizer is None:
        return get_state_dict(model, [])[0], None
    return get_state_dict(model, optimizer)


def load(directory: str | Path, *, model: torch.nn.Module, shard: Data,
         optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None, loader: Any = None,
         allow_repartition: bool = False) -> ResumePoint | None:
    """Restores the newest complete checkpoint in ``directory`` into the given objects; collective.
    Returns where it stood, or ``None`` when there is none (a fresh start).

    Call it where training would start: after building the model, optimizer, scheduler and loader
    (and after ``torch.manual_seed``: the random streams are restored here).  On the partition it
    was saved on, training then continues *bitwise* as the uninterrupted run would.

    Args:
        directory (str or Path): where :func:`save` wrote.
        model (torch.nn.Module): the model to restore, as given to :func:`save`.
        shard (torch_geometric.data.Data): the rank's shard (its partition's fingerprint is compared).
        optimizer (torch.optim.Optimizer, optional): the optimizer to restore. (default: :obj:`None`)
        scheduler (torch.optim.lr_scheduler.LRScheduler, optional): the LR scheduler to restore.
            (default: :obj:`None`)
        loader (DistributedNeighborLoader, optional): the distributed loader to restore (its epoch and
            position). (default: :obj:`None`)
        allow_repartition (bool, optional): resume a checkpoint saved on another partition (another
            number of ranks after an elastic membership change, or another partitioning): the
            parameters, optimizer, scheduler, loader position and ``extra`` are restored; the
            ranks' own state is not (random streams as seeded; stale pipelines start with one
            exact step, as at step 0; rounding streams as seeded).  Without it such a checkpoint
            raises :class:`PartitionMismatchError` (a ``ValueError``). (default: :obj:`False`)
    """
    path = layout.latest_checkpoint(directory)
    if path is None:
        return None
    info = layout.read_info(path)
    same = _same_partition(info, shard)
    if not same and not allow_repartition:
        raise PartitionMismatchError(
            f"checkpoint {path} was saved on another partition ({info['world_size']} ranks; this job has "
            f"{_world_size()}, or the shards differ: another graph, partitioning method or seed). Its ranks' own "
            f"state (stale pipelines, random and rounding streams) cannot continue here; pass "
            f"allow_repartition=True to resume its parameters, optimizer, scheduler and loader position anyway, "
            f"or resume on the partition it was saved on")
    if optimizer is not None and not info.get("optimizer"):
        raise ValueError(f"checkpoint {path} holds no optimizer state (saved without optimizer=)")
    model_state, optimizer_state, sharded = _state_dicts(model, shard, optimizer, "checkpoint.load")
    saved_layout = info.get(owner_rows.ENTRY)
    raise_together(lambda: owner_rows.check_layout(path, saved_layout, sharded), "checkpoint.load")
    state: dict[str, Any] = {"model": model_state, "replicated": b""}
    if optimizer is not None:
        state["optimizer"] = optimizer_state
    if same:
        state[f"rank_state/{_rank()}"] = b""
    with _single_process_quietly():
        dcp.load(state, checkpoint_id=path, no_dist=not is_distributed(None))
        if sharded.tensors:
            assert saved_layout is not None  # check_layout refused a checkpoint without it
            raise_together(lambda: owner_rows.restore(path, saved_layout, sharded, _rank(), same), "checkpoint.load")
    owner_rows.put_back(sharded, state["model"], state.get("optimizer"))
    set_state_dict(model, [] if optimizer is None else optimizer, model_state_dict=state["model"],
                   optim_state_dict=state.get("optimizer", {}))
    replicated = _unpack(state["replicated"])
    _load_into(scheduler, replicated["scheduler"], "scheduler")
    _load_into(loader, replicated["loader"], "loader")
    if same:
        load_rank_state(model, state[f"rank_state/{_rank()}"])
    return ResumePoint(int(info["step"]), replicated["extra"], path, int(info["world_size"]), not same, info)


def _same_partition(info: dict, shard: Data) -> bool:
    """Whether every rank's shard is the one it saved (the same answer on every rank)."""
    saved = info["partition_fingerprints"]
    mine = partition_fingerprint(shard)
    match = int(len(saved) == _world_size() and saved[_rank()] == mine)
    if is_distributed(None):
        match = host_all_reduce([match], dist.ReduceOp.MIN, None)[0]
    return bool(match)


def _load_into(target: Any, state: Any, name: str) -> None:
    if target is None:
        return
    if state is None:
        raise ValueError(f"checkpoint: a {name} was passed to load() but the checkpoint was saved without one")
    target.load_state_dict(state)
