r"""Waiting for a host (gloo) collective without letting the core fall asleep.

``Work.wait()`` blocks the calling thread on a condition variable until gloo's threads have moved
the bytes.  When every rank has a core of its own, the waiting rank's core then goes idle, and waking
it again -- the peer's bytes arriving, gloo's thread, then the waiter -- is what a step's exchange
costs, not the bytes: measured on the 2-core machine of ``benchmarks/`` (P = 2 gloo ranks, one
thread each, a few milliseconds of compute between collectives), a 2-element all-reduce took
2.4-5.7 ms blocked in ``wait()`` and 0.3-0.4 ms polled, a 64 kB all-to-all 2.5-6.5 ms against
0.2-0.3 ms -- a mini-batch step has eight such exchanges.  MPI libraries poll for the same reason.

:func:`finish` therefore polls ``is_completed()`` for up to :data:`SPIN_SECONDS`, giving the core to
any other runnable thread between polls (``os.sched_yield``, which also releases the GIL: a loader's
prefetching thread keeps running), then waits as before (so a dead peer still raises after the
group's timeout, through ``wait()``).  It polls on a gloo group whose ranks on this host, times
torch's threads per rank, are at most :data:`MOST_THREADS_PER_CORE` per core this process may run on
(:func:`spin_seconds`): a polling rank yields to the rank sharing its core, and at P = 4 on the 2
cores polling was still 1.1-1.2x the seeds / s of blocking (``benchmarks/minibatch_speed.py``,
interleaved runs); more crowded hosts block.  NCCL's ``wait()`` does not block the host (it orders
streams): never polled.  ``PYG_SPARSECOMM_WAIT=block`` turns polling off, ``=spin`` on (gloo only).
"""
import os
import time

import torch
import torch.distributed as dist

from .group import register_group_cache

#: the environment variable choosing how host collectives are waited for: ``auto`` (default),
#: ``spin`` or ``block``
WAIT_ENV = "PYG_SPARSECOMM_WAIT"
#: the longest a wait polls before blocking (a peer this much slower is waited for asleep)
SPIN_SECONDS = 0.05
#: the most rank threads per core at which waits poll (``auto``)
MOST_THREADS_PER_CORE = 2

#: :func:`spin_seconds` of every ``(group, world size)`` seen (a new job in the same process has
#: other groups or another size); it holds the groups, so ``release_groups`` clears it
SPIN: dict[tuple[object, int], float] = {}
register_group_cache(SPIN.clear)


def spin_seconds(group: dist.ProcessGroup | None = None) -> float:
    """How long a wait on ``group`` polls before it blocks: :data:`SPIN_SECONDS` on a gloo group whose
    local ranks times ``torch.get_num_threads()`` are at most :data:`MOST_THREADS_PER_CORE` per core of
    this process (``LOCAL_WORLD_SIZE``, as ``torchrun`` sets it; else the group's size), 0 otherwise or
    under ``PYG_SPARSECOMM_WAIT=block``;
    decided once per group and world size (:data:`SPIN`)."""
    size = dist.get_world_size(group)
    key = (group, size)
    if key not in SPIN:
        SPIN[key] = _decide(group, size)
    return SPIN[key]


def _decide(group: dist.ProcessGroup | None, size: int) -> float:
    mode = os.environ.get(WAIT_ENV, "auto").strip().lower()
    if mode not in ("auto", "spin", "block"):
        raise ValueError(f"{WAIT_ENV}={mode!r}: expected 'auto', 'spin' or 'block'")
    if mode == "block" or size == 1 or dist.get_backend(group) != "gloo":
        return 0.0
    if mode == "spin":
        return SPIN_SECONDS
    local = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    cores = len(os.sched_getaffinity(0))
    return SPIN_SECONDS if local * torch.get_num_threads() <= MOST_THREADS_PER_CORE * cores else 0.0


def finish(work, group: dist.ProcessGroup | None = None) -> None:
    """``work.wait()``, polling ``work.is_completed()`` first for up to :func:`spin_seconds` of
    ``group`` (the module docstring says why).  ``comm.halo``'s per-call exchange writes the same
    loop inline (a steady-state layer call's budget of functions)."""
    key = (group, dist.get_world_size(group))
    seconds = SPIN[key] if key in SPIN else spin_seconds(group)
    if seconds:
        deadline = time.perf_counter() + seconds
        while not work.is_completed() and time.perf_counter() < deadline:
            os.sched_yield()
    work.wait()
