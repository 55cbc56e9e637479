"""The process's one-sided backend and its cache of collectively built engines, shared through leases.

Used by ``algorithm="rdma"`` (:mod:`pyg_sparsecomm.algorithms.rdma`), whose *engine* is
an adjacency tiled over the backend's memory; any object with a ``users`` count and a
collective ``free()`` can be cached here.

**Engine lifetime.**  Building an engine is collective, and so is freeing it (its
regions).  Engines are shared: identical inputs (same fingerprint on every rank) get
the same engine, handed out as a :class:`Lease`.  A lease is held by every user of
the engine (an algorithm object, an autograd node of a pending backward) and released
explicitly or when it is garbage-collected, so an engine is never freed while
something still uses it.  Leases are counted locally at any time; engines are *freed*
only at collective points — when an engine is looked up (:func:`lease`: every rank
builds an algorithm at the same point) and in :func:`collect` / :func:`free_engines`
— and only engines that are unreferenced on **every** rank (their keys are
all-gathered), so all ranks free the same engines in the same order.  At most
:data:`MAX_IDLE_ENGINES` unreferenced engines stay cached for reuse.
:func:`free_engines` (collective) frees every engine and is registered, together with
closing the backend, with :mod:`atexit` (so no region is left in use when MPI finalises)
and with :func:`pyg_sparsecomm.launch.runtime.before_teardown` (so a job run by
:func:`~pyg_sparsecomm.launch.runtime.distributed_job` frees them before it destroys the process
group).  At exit, a backend whose process group is already gone frees nothing (the memory
goes with the process).
"""
from __future__ import annotations

import atexit
import gc
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from ..launch.runtime import before_teardown
from .backend import RMABackend
from .factory import make_backend

#: unreferenced engines kept cached (oldest freed first); referenced engines are never freed
MAX_IDLE_ENGINES = 4
#: engine key -> engine, least recently looked up first (identical keys and order on every rank)
_ENGINES: OrderedDict = OrderedDict()
_BACKEND: RMABackend | None = None
_LOCK = threading.Lock()  # lease counts may drop from a garbage-collecting thread


def backend(device: torch.device | str | None = None) -> RMABackend:
    """The process's one-sided backend, created by :func:`make_backend` for ``device`` on first use.

    Args:
        device (torch.device or str, optional): where the caller's data lives; one device type per
            process. (default: :obj:`"cpu"`)

    Returns:
        The backend every engine of this process is built on.
    """
    global _BACKEND
    if _BACKEND is None:
        _BACKEND = make_backend(device if device is not None else "cpu")
        _register_shutdown()
    elif device is not None and torch.device(device).type != _BACKEND.device.type:
        raise RuntimeError(f"algorithm='rdma' already runs on a {_BACKEND.device.type} backend in this process; "
                           f"got an adjacency on {torch.device(device)}")
    return _BACKEND


def set_backend(be: RMABackend) -> None:
    """Runs the engines of this process on ``be`` (e.g. ``MPIBackend(heap_bytes=...)`` or a
    ``SymmetricMemoryBackend`` on a chosen group) instead of ``make_backend(device)``.

    Call on every rank before the first engine is built; refused once engines exist.
    """
    global _BACKEND
    if _ENGINES:
        raise RuntimeError("set_backend must be called before the first algorithm='rdma' layer is built "
                           "(or after free_engines())")
    if _BACKEND is None:
        _register_shutdown()
    _BACKEND = be


def _register_shutdown() -> None:
    atexit.register(_shutdown)  # runs before mpi4py's MPI_Finalize (registered earlier, atexit is LIFO)
    before_teardown(_shutdown)  # and before distributed_job destroys the process group


def _drop(engine: Any) -> None:
    with _LOCK:
        engine.users -= 1


class Lease:
    """One reference to an engine; :meth:`release` (idempotent, also on garbage collection) drops it."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        with _LOCK:
            engine.users += 1
        self._finalizer = weakref.finalize(self, _drop, engine)

    def release(self) -> None:
        self._finalizer()


def engines() -> list[Any]:
    """The cached engines, least recently looked up first (referenced or not)."""
    return list(_ENGINES.values())


def _idle() -> list:
    with _LOCK:
        return [key for key, engine in _ENGINES.items() if engine.users <= 0]


def _evict(idle_everywhere: list, keep: int) -> None:
    """Frees the oldest engines of ``idle_everywhere`` (computed identically on every rank) beyond ``keep``."""
    victims = [key for key in _ENGINES if key in set(idle_everywhere)]
    for key in victims[:max(len(victims) - keep, 0)]:
        _ENGINES.pop(key).free()


def lease(fingerprint: str, build: Callable[[], Any]) -> Lease:
    """A lease on the engine of ``fingerprint``, built collectively by ``build()`` once and shared later.

    Collective.  Every rank must take the same branch: the key is the all-gathered
    tuple of every rank's local fingerprint (two inputs can coincide on one rank and
    differ on another), and the engines freed are those unreferenced on every rank
    (all-gathered with the fingerprint), so the caches stay identical.

    Args:
        fingerprint (str): this rank's digest of what the engine is built from.
        build (Callable[[], Any]): builds the engine (collectively) on a cache miss.
    """
    gathered = backend().allgather((fingerprint, _idle()))
    key = tuple(fp for fp, _ in gathered)
    idle = set.intersection(*(set(part) for _, part in gathered)) - {key}
    if key in _ENGINES:
        _ENGINES.move_to_end(key)
    else:
        _ENGINES[key] = build()
    out = Lease(_ENGINES[key])
    _evict([k for k in _ENGINES if k in idle], MAX_IDLE_ENGINES)
    return out


def collect(keep: int = MAX_IDLE_ENGINES) -> None:
    """Collective: frees the engines unreferenced on every rank, oldest first, keeping ``keep`` of them.

    Runs the garbage collector first: a lease held only by garbage in a reference cycle (a dropped
    algorithm still linked to its layer's state) is released by the collector, not by reference
    counting, and whether an automatic collection ran before this point depends on allocations."""
    if not _ENGINES and _BACKEND is None:
        return
    gc.collect()
    gathered = backend().allgather(_idle())
    _evict(list(set.intersection(*(set(part) for part in gathered))), keep)


def free_engines() -> None:
    """Collectively frees every cached engine, referenced or not (call on all ranks at the same point).

    A user of a freed engine then raises a clear RuntimeError instead of reading freed
    memory.  Registered with :mod:`atexit`.
    """
    while _ENGINES:
        _ENGINES.popitem(last=False)[1].free()


def _shutdown() -> None:
    """At a job's teardown or exit: free every engine and close the backend's regions while its
    communicator (MPI, the process group) still works; afterwards only drop them."""
    global _BACKEND
    if _BACKEND is None:
        return
    try:
        if not _BACKEND.can_communicate():
            for engine in _ENGINES.values():
                engine.freed = True  # a later use raises instead of reading memory that is gone
            _ENGINES.clear()
            return
        free_engines()
        _BACKEND.close()
    finally:
        _BACKEND = None
