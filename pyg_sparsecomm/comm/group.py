"""Process-group helpers that also work when ``torch.distributed`` is not initialised."""
import atexit
import gc
import weakref
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

from ..compat import is_registered_group, process_group_timeout
from .peer_failure import failures_named, forget_job, install_failure_hooks, raise_named


def is_distributed(group: dist.ProcessGroup | None = None) -> bool:
    return dist.is_available() and dist.is_initialized()


def collective_device(group: dist.ProcessGroup | None = None) -> torch.device | None:
    """Where small bookkeeping tensors must live for a collective: NCCL reduces only CUDA
    tensors, gloo takes CPU tensors (``None``: leave them where they are).

    On NCCL it is the *calling thread's* current device: a new thread starts on device 0, so a
    thread that issues collectives must first ``torch.cuda.set_device`` the rank's device (as
    :class:`~pyg_sparsecomm.loader.prefetch.PrefetchedBatches` does)."""
    if is_distributed(group) and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def is_alive(group: dist.ProcessGroup | None = None) -> bool:
    """Whether ``group`` (``None``: the default group) can still run collectives: ``torch.distributed``
    is initialised and the group was not destroyed (e.g. by a job's teardown)."""
    if not is_distributed(group):
        return False
    return group is None or is_registered_group(group)


#: groups whose first operation was a collective every member joined (see :func:`join_all`)
_JOINED: "weakref.WeakSet[dist.ProcessGroup]" = weakref.WeakSet()


def join_all(group: dist.ProcessGroup | None = None) -> None:
    """Makes sure ``group``'s first operation is one every member joins: a one-element all-reduce,
    issued once per group (later calls return at once).

    NCCL creates a group's communicator at its first operation, and the first *batched
    point-to-point* call (``batch_isend_irecv``) on a group must involve every rank; a rank
    with no rows to send or receive posts nothing, and its peers would block until the
    watchdog's timeout.  Every member must call this at the same point (e.g. right after
    creating the group, or before a group's first point-to-point exchange).
    """
    if not is_distributed(group):
        return
    key = group if group is not None else dist.group.WORLD
    assert key is not None  # initialised: is_distributed
    if key in _JOINED:
        return
    install_failure_hooks()  # a rank's uncaught error reaches its peers by name (comm.peer_failure)
    with failures_named("the first collective of a process group", group):
        dist.all_reduce(torch.zeros(1, device=collective_device(group)), group=group)
    _JOINED.add(key)


def world_size(group: dist.ProcessGroup | None = None) -> int:
    return dist.get_world_size(group) if is_distributed(group) else 1


def rank(group: dist.ProcessGroup | None = None) -> int:
    return dist.get_rank(group) if is_distributed(group) else 0


def twin_group(group: dist.ProcessGroup | None = None, backend: str | None = None) -> dist.ProcessGroup:
    """A new process group over ``group``'s ranks, with its timeout and its backend (or
    ``backend``: ``"gloo"`` for CPU exchanges beside an NCCL group), for exchanges that run
    concurrently with ``group``'s own (e.g. on a background thread).

    Only ``group``'s ranks call this (local synchronisation), all in the same order.  The new
    group's first operation is a collective of all its members (:func:`join_all`).
    """
    parent = group if group is not None else dist.group.WORLD
    assert parent is not None  # initialised: new_group needs it
    parent_backend = dist.get_backend(parent)
    device = torch.device("cuda" if parent_backend == "nccl" else "cpu")
    timeout = process_group_timeout(parent, device)  # so a dead peer surfaces as fast on the twin
    backend = backend or parent_backend
    created = dist.new_group(dist.get_process_group_ranks(parent), timeout=timeout, backend=backend,
                             use_local_synchronization=True)
    join_all(created)  # its first operation is one every member joins (NCCL's rule for batched P2P)
    return created


#: (purpose, ranks) -> (the default group it was made under, the dedicated group)
_DEDICATED: dict[tuple[str, tuple[int, ...]], tuple[object, dist.ProcessGroup]] = {}
#: clear-functions of the caches that hold process groups (this module's, the process grids')
_GROUP_CACHES: list[Callable[[], None]] = [_DEDICATED.clear, forget_job]


def register_group_cache(clear: Callable[[], None]) -> None:
    """Makes :func:`release_groups` call ``clear()``: for a module-level cache of process groups."""
    if clear not in _GROUP_CACHES:
        _GROUP_CACHES.append(clear)


def release_groups() -> None:
    """Drops the package's cached process groups once the job's groups are destroyed, so that
    their C++ objects (and gloo's worker threads) end *now*, while the interpreter is alive.

    Why: ``destroy_process_group`` unregisters the groups, but a group still referenced from Python
    lives on with its worker threads until interpreter shutdown.  A worker that releases the last
    collective's work (e.g. ``gather_nodes``'s gather) then needs the GIL of a finalising
    interpreter, which ends the thread inside C++ code: ``terminate called without an active
    exception`` (SIGABRT) after the script has finished.  Called by
    :func:`~pyg_sparsecomm.launch.runtime.init_distributed`'s exit handler and
    :func:`~pyg_sparsecomm.launch.runtime.distributed_job`, and at exit for scripts that call
    ``dist.destroy_process_group()`` themselves; idempotent.
    """
    for clear in _GROUP_CACHES:
        clear()
    gc.collect()  # the groups may sit in reference cycles (layers, hooks) that only gc frees


atexit.register(release_groups)


def dedicated_group(group: dist.ProcessGroup | None, purpose: str, backend: str | None = None) -> dist.ProcessGroup:
    """The process group of ``purpose`` (e.g. ``"stale halos"``, ``"gradients"``) over ``group``'s
    ranks: a :func:`twin_group` made at the first call and reused while the default group lives,
    so a process holds one per purpose, not one per layer or model (each gloo group opens a
    connection to every peer).  Collective over ``group``'s ranks at the first call.  ``backend``:
    as :func:`twin_group`'s (``"gloo"``: CPU collectives beside an NCCL group).
    """
    default = dist.group.WORLD
    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(dist.get_world_size()))
    cached = _DEDICATED.get((purpose, ranks))
    if cached is not None and cached[0] is default:
        return cached[1]
    created = twin_group(group, backend)
    _DEDICATED[(purpose, ranks)] = (default, created)
    return created


def host_group(group: dist.ProcessGroup | None = None) -> dist.ProcessGroup | None:
    """A group over ``group``'s ranks whose collectives take CPU tensors: ``group`` itself unless
    its backend is NCCL, else a gloo twin (:func:`dedicated_group`: made at the first call, at
    which every rank of ``group`` calls this at the same point, like any collective)."""
    if collective_device(group) is None:
        return group
    return dedicated_group(group, "host", backend="gloo")


def host_all_reduce(values: list[int], op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM,
                    group: dist.ProcessGroup | None = None) -> list[int]:
    """``values`` reduced with ``op`` over ``group``'s ranks, on the host: one all-reduce of a CPU
    ``int64`` tensor (over gloo, :func:`host_group`), read through numpy, which refuses device
    tensors: the result never waits for a device (no ``.item()`` on a CUDA tensor in hot paths)."""
    if world_size(group) == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.long)
    try:  # run by layer calls (StaticHalo's agreement): failures_named's check at no cost
        dist.all_reduce(t, op=op, group=host_group(group))
    except BaseException as error:
        raise_named(error, "host_all_reduce", group)
        raise
    return [int(v) for v in t.numpy()]


def host_all_gather(values: list[int], group: dist.ProcessGroup | None = None) -> list[list[int]]:
    """Every rank's ``values`` (the same length on every rank), by rank, on the host: one all-gather
    of a CPU ``int64`` tensor over :func:`host_group` (cheaper than ``all_gather_object``'s two
    collectives and pickling when the values are a fixed number of integers)."""
    if world_size(group) == 1:
        return [list(values)]
    t = torch.tensor(values, dtype=torch.long)
    out = [torch.empty_like(t) for _ in range(world_size(group))]
    with failures_named("host_all_gather", group):
        dist.all_gather(out, t, group=host_group(group))
    return [[int(v) for v in row.numpy()] for row in out]


def global_rank(group: dist.ProcessGroup | None, group_rank: int) -> int:
    """The default-group rank of ``group_rank`` (what ``broadcast``/``reduce`` take as src/dst)."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def check_plan_matches_group(plan_world_size: int, plan_rank: int,
                             group: dist.ProcessGroup | None = None) -> None:
    """A plan made for another world size or rank would deadlock or mix up rows."""
    if plan_world_size > 1 and not is_distributed(group):
        raise RuntimeError(f"this shard belongs to a {plan_world_size}-rank partition but "
                           f"torch.distributed is not initialised: call init_process_group first")
    install_failure_hooks(announce=False)  # before the shard's first collective (comm.peer_failure); announced at join
    ws, r = world_size(group), rank(group)
    if plan_world_size != ws:
        raise ValueError(f"the graph was partitioned into {plan_world_size} parts but the process group "
                         f"has world size {ws}: partition with num_parts={ws}")
    if plan_rank != r:
        raise ValueError(f"this shard was built for rank {plan_rank} but this process is rank {r}")


T = TypeVar("T")
# error types a rank re-raises by name for a peer's failure (anything else: RuntimeError)
_SHARED_ERRORS = {e.__name__: e for e in (FileNotFoundError, PermissionError, OSError, ValueError,
                                          TypeError, KeyError, RuntimeError)}


def raise_together(fn: Callable[[], T], what: str, group: dist.ProcessGroup | None = None,
                   flag_first: bool = False) -> T:
    """Runs ``fn`` on every rank of ``group`` and agrees on the outcome (one ``all_gather_object``;
    with ``flag_first``, one one-element all-reduce, and the gather only when a rank failed).

    If ``fn`` raised on any rank, every rank raises the same error: the type of the lowest
    failing rank's error, a message naming every failing rank and its error.  A rank-local
    failure (a missing or corrupt file, ...) would otherwise stop one rank while its peers go
    on into a collective it never joins and hang until the timeout.  Without a process group
    it is just ``fn()``.
    """
    if not is_distributed(group):
        return fn()
    error: Exception | None = None
    result = None
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - every error is shared, then re-raised
        error = e
    if flag_first:
        if not host_all_reduce([int(error is not None)], dist.ReduceOp.MAX, group)[0]:  # no device wait
            return result  # type: ignore[return-value]
    outcomes: list[tuple[str, str] | None] = [None] * world_size(group)
    with failures_named(what, group):
        dist.all_gather_object(outcomes, None if error is None else (type(error).__name__, str(error)), group=group)
    failed = [(r, outcome) for r, outcome in enumerate(outcomes) if outcome is not None]
    if not failed:
        return result  # type: ignore[return-value]
    kind = _SHARED_ERRORS.get(failed[0][1][0], RuntimeError)
    by_error: dict = {}  # the same error on many ranks is reported once
    for r, outcome in failed:
        by_error.setdefault(outcome, []).append(str(r))
    details = "\n".join(f"  rank {', '.join(ranks)}: {name}: {message}" for (name, message), ranks in by_error.items())
    raise kind(f"{what} failed on {len(failed)} of {len(outcomes)} ranks (every rank raises this error):\n"
               f"{details}") from error
