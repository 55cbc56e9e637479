"""Joining a ``torchrun`` job: the process group (with a timeout) and the device."""
import atexit
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

#: how long a collective waits for a stalled or dead peer before raising (gloo's default is 30 min)
DEFAULT_TIMEOUT = timedelta(seconds=120)


def init_distributed(backend: str | None = None,
                     timeout: timedelta = DEFAULT_TIMEOUT) -> tuple[int, int, torch.device]:
    """Joins the job ``torchrun`` started; returns ``(rank, world_size, device)``.

    Without ``torchrun`` (no ``RANK`` in the environment) nothing is initialised and the
    script runs as rank 0 of 1.  With CUDA each rank takes GPU ``LOCAL_RANK`` and NCCL,
    otherwise the CPU and gloo.  ``timeout`` bounds every collective, so a dead peer
    surfaces as an error instead of a hang.  The process group is destroyed when the script
    ends: left to the interpreter's teardown, gloo's threads can abort the process
    ("terminate called without an active exception", seen once in CI after a script had finished).
    """
    if "RANK" not in os.environ:
        return 0, 1, torch.device("cpu")
    cuda = torch.cuda.is_available() and backend in (None, "nccl")
    device = torch.device("cpu")
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group(backend or ("nccl" if cuda else "gloo"), timeout=timeout)
    atexit.register(_destroy_process_group)
    return dist.get_rank(), dist.get_world_size(), device


def join_job() -> None:
    """:func:`init_distributed` if this process runs under ``torchrun`` and has not joined its job
    yet (what ``rank_zero_first``, ``partition_and_shard`` and ``distribute`` do first)."""
    if "RANK" in os.environ and not dist.is_initialized():
        init_distributed()


def _destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def distributed_job(backend: str | None = None,
                    timeout: timedelta = DEFAULT_TIMEOUT) -> Iterator[tuple[int, int, torch.device]]:
    """:func:`init_distributed` for the duration of a ``with`` block, which yields
    ``(rank, world_size, device)``; the process group is destroyed on exit, also on error."""
    try:
        yield init_distributed(backend, timeout)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_job(train: Callable[..., dict[str, list[float]]], args: Any) -> tuple[int, dict[str, list[float]]]:
    """Runs ``train(args, rank, world_size, device)`` inside :func:`distributed_job`; returns
    ``(rank, history)``, after printing the final test accuracy and the median epoch time on
    rank 0 when ``history`` holds ``test_acc`` and ``epoch_s`` (the examples' training loops)."""
    with distributed_job() as (rank, world_size, device):
        history = train(args, rank, world_size, device)
    if rank == 0 and history.get("test_acc") and history.get("epoch_s"):
        ms = sorted(history["epoch_s"])[len(history["epoch_s"]) // 2] * 1e3
        print(f"final test accuracy {history['test_acc'][-1]:.4f}, median epoch {ms:.1f} ms")
    return rank, history
