"""Joining a ``torchrun`` job: the process group (with a timeout) and the device."""
import atexit
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..comm.group import release_groups
from ..comm.peer_failure import install_failure_hooks, report_error, report_left
from .attempts import attempt_store

#: how long a collective waits for a stalled or dead peer before raising (gloo's default is 30 min)
DEFAULT_TIMEOUT = timedelta(seconds=120)


def nccl_failure_env(timeout: timedelta) -> dict[str, str]:
    """The ``ProcessGroupNCCL`` settings that make a dead or stalled peer end the job within
    ``timeout`` (plus a minute) on NCCL, where collectives run asynchronously on the GPU and
    the host does not wait for them:

    * ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``: the watchdog thread that checks every collective
      against the group's ``timeout`` aborts the communicators and tears the process down
      when one timed out or failed (its peers' collectives then fail the same way);
    * ``TORCH_NCCL_ENABLE_MONITORING=1`` and ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``: a monitor
      thread kills the process if the watchdog itself stops making progress (e.g. stuck in a
      CUDA call) for ``timeout + 60`` s instead of the default 8 minutes.

    ``ProcessGroupNCCL`` reads them when the group is created.
    """
    return {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "TORCH_NCCL_ENABLE_MONITORING": "1",
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(int(timeout.total_seconds()) + 60)}


def device_clock(device: torch.device | str) -> float:
    """``time.perf_counter()`` once the work queued on ``device`` finished: on CUDA it synchronises
    the device first (kernels and NCCL calls return when queued, so the host clock alone would
    time the queueing).  For epoch times, not for the hot path."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def init_distributed(backend: str | None = None,
                     timeout: timedelta = DEFAULT_TIMEOUT) -> tuple[int, int, torch.device]:
    """Joins the job ``torchrun`` started; returns ``(rank, world_size, device)``.

    Without ``torchrun`` (no ``RANK`` in the environment) nothing is initialised and the
    script runs as rank 0 of 1.  With CUDA each rank takes GPU ``LOCAL_RANK`` and NCCL,
    otherwise the CPU and gloo.  ``timeout`` bounds every collective, so a dead peer
    surfaces as an error instead of a hang: on gloo the waiting call raises ``RuntimeError``
    (``DistBackendError``); on NCCL the watchdog aborts the process (:func:`nccl_failure_env`,
    set unless the environment already sets them).  The process group is destroyed when the script
    ends, and the package's cached groups are released with it
    (:func:`~pyg_sparsecomm.comm.group.release_groups`): left to the interpreter's teardown, gloo's
    worker threads abort the process ("terminate called without an active exception").
    In a process that joined a job already (a launcher, a notebook, a test harness), it returns
    that job's rank, size and device.  Either way a rank's uncaught error from then on reaches
    every other rank by name (:mod:`~pyg_sparsecomm.comm.peer_failure`): their next collective
    of the package raises :class:`~pyg_sparsecomm.comm.peer_failure.PeerFailedError` naming it
    and its error, within seconds, instead of gloo's "Connection closed by peer"; a rank that
    does not arrive at a collective before ``timeout`` is named likewise.
    Under ``torchrun --max-restarts N`` (and elastic ``--nnodes MIN:MAX`` membership changes) every
    attempt of the job creates its group on keys of its own (:mod:`~pyg_sparsecomm.launch.attempts`), so a
    restarted job connects again.

    Args:
        backend (str, optional): the process group's backend. (default: NCCL with CUDA, else gloo)
        timeout (datetime.timedelta, optional): the bound of every collective.
            (default: :obj:`timedelta(seconds=120)`)
    """
    if dist.is_initialized():
        install_failure_hooks()
        nccl = dist.get_backend() == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        return dist.get_rank(), dist.get_world_size(), device
    if "RANK" not in os.environ:
        return 0, 1, torch.device("cpu")
    cuda = torch.cuda.is_available() and backend in (None, "nccl")
    device = torch.device("cpu")
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    backend = backend or ("nccl" if cuda else "gloo")
    if backend == "nccl":
        for name, value in nccl_failure_env(timeout).items():
            os.environ.setdefault(name, value)  # the user's own settings win
    _init_process_group(backend, timeout)
    install_failure_hooks()
    atexit.register(_destroy_process_group)
    return dist.get_rank(), dist.get_world_size(), device


def _init_process_group(backend: str, timeout: timedelta) -> None:
    """``init_process_group``; under ``torchrun`` on the key space of this attempt of the job
    (:mod:`~pyg_sparsecomm.launch.attempts`), so a job restarted by ``--max-restarts`` or an elastic
    membership change connects again instead of reading the dead attempt's addresses."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        dist.init_process_group(backend, timeout=timeout)
        return
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
    store.set_timeout(timeout)
    dist.init_process_group(backend, store=attempt_store(store, rank, world_size, timeout), rank=rank,
                            world_size=world_size, timeout=timeout)


#: collective clean-ups to run while the job's process group is still alive (see :func:`before_teardown`)
_TEARDOWN: list[Callable[[], None]] = []


def before_teardown(cleanup: Callable[[], None]) -> None:
    """Runs ``cleanup()`` (collective: every rank, same order) before :func:`distributed_job`
    or the exit handler of :func:`init_distributed` destroys the process group, most recently
    registered first; each at most once.  E.g. the one-sided engines free their symmetric
    memory (a barrier) there, instead of at interpreter exit on a destroyed group.
    """
    if cleanup not in _TEARDOWN:
        _TEARDOWN.append(cleanup)


def _run_teardown() -> None:
    while _TEARDOWN:
        _TEARDOWN.pop()()


def join_job() -> None:
    """:func:`init_distributed` if this process runs under ``torchrun`` and has not joined its job
    yet (what ``rank_zero_first``, ``partition_and_shard`` and ``distribute`` do first)."""
    init_distributed()  # joins only under torchrun and only once (it returns a job already joined)


def _destroy_process_group() -> None:
    if dist.is_initialized():
        report_left()  # a peer still waiting for this rank names it (no-op after an error was reported)
        try:
            _run_teardown()
        finally:
            _destroy_and_release()


def _destroy_and_release() -> None:
    dist.destroy_process_group()
    release_groups()


@contextmanager
def distributed_job(backend: str | None = None,
                    timeout: timedelta = DEFAULT_TIMEOUT) -> Iterator[tuple[int, int, torch.device]]:
    """:func:`init_distributed` for the duration of a ``with`` block, which yields
    ``(rank, world_size, device)``; the process group is destroyed on exit, also on error.

    On a normal exit the clean-ups of :func:`before_teardown` run first (they are collective);
    after an error they are skipped (a peer may never reach them) and the group is destroyed.
    Before the group is destroyed (which its peers see as closed connections) the error, or
    that this rank left without one, is reported to the peers
    (:mod:`~pyg_sparsecomm.comm.peer_failure`), whose collectives then raise naming this rank.
    """
    try:
        yield init_distributed(backend, timeout)
    except BaseException as error:
        _TEARDOWN.clear()
        if dist.is_initialized():
            report_error(error)
        raise
    finally:
        if dist.is_initialized():
            report_left()
            try:
                _run_teardown()
            finally:
                _destroy_and_release()


def run_job(train: Callable[..., dict[str, list[float]]], args: Any) -> tuple[int, dict[str, list[float]]]:
    """Runs ``train(args, rank, world_size, device)`` inside :func:`distributed_job`; returns
    ``(rank, history)``, after printing the final test accuracy and the median epoch time on
    rank 0 when ``history`` holds ``test_acc`` and ``epoch_s`` (the examples' training loops),
    and every rank's peak memory (:func:`~pyg_sparsecomm.memory.peak_memory_report`)."""
    from ..memory import peak_memory_report

    with distributed_job() as (rank, world_size, device):
        history = train(args, rank, world_size, device)
        memory = peak_memory_report(device)  # collective: gathered while the group is up
    if rank == 0 and history.get("test_acc") and history.get("epoch_s"):
        ms = sorted(history["epoch_s"])[len(history["epoch_s"]) // 2] * 1e3
        print(f"final test accuracy {history['test_acc'][-1]:.4f}, median epoch {ms:.1f} ms")
    if rank == 0:
        print(memory)
    return rank, history
