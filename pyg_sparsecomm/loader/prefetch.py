"""Sampling the next batches on a background thread while the current one trains.

Sampling and planning a batch is mostly index work and small id exchanges; a training step
is mostly kernels that release the GIL.  A thread that prepares batch ``k + 1`` while batch
``k`` trains hides the loader behind the step (the role of ``num_workers`` in PyG's loaders,
which cannot be used here: a batch's plan needs collectives with the other ranks).

Three rules keep every rank's collectives matched:

* the thread's exchanges run on the loader's own process group, a CPU (gloo) one, so they
  never interleave with the training step's exchanges on the model's group.  On GPUs this is
  what makes the order deterministic: NCCL kernels of two communicators on one device, issued
  by two threads, may be queued in a different order on different ranks, and a rank whose
  kernel of one communicator waits for a peer that is itself waiting in the other one
  deadlocks.  The thread issues no NCCL collective at all (its exchanges go through the host), so
  the only NCCL collectives on the device are the training thread's, in program order, the
  same on every rank; the gloo group's collectives are the thread's only, in batch order;
* the thread starts batch ``i`` only once the caller has taken batch ``i - depth``.  Ranks
  take the same number of batches (the loaders' contract), so every rank's thread samples
  the same batches, also when an epoch is left early: closing the iterator lets the thread
  finish every batch it was allowed (``depth`` plus the batches taken, counted, never judged by
  whether the thread had woken yet), then stop, on every rank alike;
* the thread runs on the caller's CUDA device: a new thread starts on device 0, and the
  batch it builds (copies to the shard's device) or any collective it issued would otherwise
  land on every rank's GPU 0.

On a CUDA shard the thread samples on a stream of its own and hands every batch over with an
event the caller's stream waits for (:mod:`.stream_handoff`).

However the loop ends, the thread is stopped and joined before the process goes on to anything
that could meet it half-way through a collective: a loop left by ``break`` or by an exception
closes its epoch (the loaders close it when the epoch's generator is finalised, at once in
CPython), and an epoch still open when the interpreter exits (an iterator kept in a global) is
closed by an ``atexit`` handler registered when its thread starts.  Interpreter teardown never
meets a live thread inside gloo: a daemon thread woken there is ended by a forced unwind of its
C++ frames, which aborts the process (``terminate called without an active exception``, exit
134), and ``dist.destroy_process_group()`` after the loop destroys the group the thread would
still be using.
"""
import atexit
import queue
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch_geometric.data import Data

from ..comm.counters import comm_counter
from .stream_handoff import StreamHandoff

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class PrefetchedBatches:
    """Iterates ``batches`` (a generator of one epoch's batches) ``depth`` batches ahead, on a
    daemon thread.  Exceptions of the thread (e.g. a timed-out exchange with a dead peer) are
    raised by ``__next__``.

    Args:
        batches (Iterator[Data]): the epoch's batches, made when iterated.
        depth (int): batches made ahead of the caller.
        device (torch.device, optional): where the batches are made; on a CUDA device the thread
            works on its own stream (default: :obj:`None`, the CPU).
        cuda (module, optional): ``torch.cuda`` or a stand-in (:class:`~.stream_handoff.StreamHandoff`).
            (default: :obj:`torch.cuda`)
    """

    def __init__(self, batches: Iterator[Data], depth: int, device: torch.device | None = None,
                 cuda: Any = torch.cuda) -> None:
        self._handoff = StreamHandoff(torch.device("cpu") if device is None else device, cuda)
        self._batches = batches
        self._ready: queue.Queue = queue.Queue()
        # batches the thread may sample: depth + the batches the caller took.  A function of what
        # the caller did only (never of when the thread wakes), so every rank samples the same ones
        self._allowed, self._sampled = depth, 0
        self._turn = threading.Condition()
        self._stop = threading.Event()
        # the current device is per thread: the caller's, set again in the new thread
        self._device = torch.cuda.current_device() if torch.cuda.is_available() else None
        self._thread = threading.Thread(target=self._run, name="pyg_sparsecomm-prefetch", daemon=True)
        atexit.register(self.close)  # before interpreter teardown (unregistered by close)
        self._thread.start()

    def _run(self) -> None:
        with comm_counter().untimed():  # its waits overlap the step: not the step's communication time
            try:
                if self._device is not None:
                    torch.cuda.set_device(self._device)
                with self._handoff.producing():
                    self._produce()
            except BaseException as error:  # noqa: BLE001 -- re-raised in the caller's thread
                self._ready.put(_Failure(error))

    def _produce(self) -> None:
        while True:
            with self._turn:
                self._turn.wait_for(lambda: self._sampled < self._allowed or self._stop.is_set())
                if self._sampled >= self._allowed:  # stopped, and no batch left that was allowed
                    return
                self._sampled += 1
            batch = next(self._batches, _END)
            if batch is _END:
                self._ready.put(_END)
                return
            self._ready.put((batch, self._handoff.made()))

    def __iter__(self) -> "PrefetchedBatches":
        return self

    def __next__(self) -> Data:
        if self._stop.is_set():
            raise StopIteration
        item = self._ready.get()
        if item is _END:
            self._stop.set()
            raise StopIteration
        if isinstance(item, _Failure):
            self._stop.set()
            raise item.error
        with self._turn:  # the caller took batch k: batch k + depth may start
            self._allowed += 1
            self._turn.notify()
        return self._handoff.received(*item)

    def close(self) -> None:
        """Stops after the batches already allowed (the same on every rank: ``depth`` plus the
        batches taken, whether or not the thread had started them) and waits for the thread;
        the batches made and not taken are dropped.  Idempotent."""
        with self._turn:
            self._stop.set()
            self._turn.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        atexit.unregister(self.close)
        while not self._ready.empty():  # drop the batches made ahead (their memory, their device events)
            self._ready.get_nowait()

    def __del__(self) -> None:
        if self._thread.is_alive():
            self.close()


def closing(batches: PrefetchedBatches) -> Iterator[Data]:
    """The batches of ``batches``; however the caller's loop ends (exhausted, ``break``, an
    exception, the iterator dropped), the thread is stopped and joined when it does."""
    try:
        yield from batches
    finally:
        batches.close()
