"""Byte and time counters for every message the exchanges send.

One process-wide :class:`CommCounter` (``comm_counter()``) records, per peer
(indexed by its rank in the *default* group, whatever subgroup the exchange ran
in, so that 1.5D's row and column groups add up in one array), the bytes of
payload this process sent and received, per *kind* of exchange (``"halo"``,
``"halo_grad"``, ``"bcast"``, ``"allreduce"``, ...), and the wall time spent
inside communication calls.  Bytes count tensor payload only
(``numel * element_size``), which is what the plan predicts.

Times are measured by a :class:`Stopwatch`: the host clock for CPU tensors, CUDA events on the
current stream for CUDA tensors (an NCCL call returns once it is *enqueued*, so the host clock
would measure the enqueueing, near 0).
"""
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import torch.distributed as dist


class Stopwatch:
    r"""Accumulated seconds of timed intervals, on the host or on a CUDA stream.

    ``with stopwatch.measure(device):`` times its block: for a CUDA ``device`` by two
    ``torch.cuda.Event(enable_timing=True)`` recorded on the current stream before and after
    the block, i.e. how long the stream took from the block's first to its last enqueued work
    (for a communication call: until the stream could go on past the collective, the time it
    was *not* hidden); otherwise by the host clock.  Events are read when :attr:`seconds` is
    (which waits for the last recorded one), so timing never blocks the host in the hot path.
    """

    #: pending event pairs are folded into the total every this many (those completed: bounds memory)
    FOLD_EVERY = 256

    def __init__(self) -> None:
        self._host = 0.0
        self._events: list[tuple] = []

    @contextmanager
    def measure(self, device: torch.device | str | None = None) -> Iterator[None]:
        if device is None or torch.device(device).type != "cuda":
            start = time.perf_counter()
            try:
                yield
            finally:
                self._host += time.perf_counter() - start
            return
        begin = torch.cuda.Event(enable_timing=True)
        begin.record()
        try:
            yield
        finally:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((begin, end))
            if len(self._events) % self.FOLD_EVERY == 0:
                self._fold(wait=False)

    def _fold(self, wait: bool) -> None:
        """Adds the completed intervals, in order (all of them, waiting for each, if ``wait``)."""
        done = 0
        for begin, end in self._events:
            if wait:
                end.synchronize()
            elif not end.query():
                break
            self._host += begin.elapsed_time(end) / 1e3  # milliseconds
            done += 1
        del self._events[:done]

    @property
    def seconds(self) -> float:
        if self._events:
            self._fold(wait=True)
        return self._host

    @seconds.setter
    def seconds(self, value: float) -> None:
        self._events.clear()
        self._host = float(value)


class CommCounter:
    def __init__(self) -> None:
        self._thread = threading.local()
        self.reset()

    def reset(self) -> None:
        self.sent: dict[str, np.ndarray] = {}
        self.received: dict[str, np.ndarray] = {}
        self.calls: dict[str, int] = defaultdict(int)
        self._clock = Stopwatch()

    @property
    def seconds(self) -> float:
        """Seconds spent in timed communication calls (CUDA: on the stream, :class:`Stopwatch`)."""
        return self._clock.seconds

    @seconds.setter
    def seconds(self, value: float) -> None:
        self._clock.seconds = value

    def record(self, kind: str, sent_per_peer: Sequence[int] | np.ndarray,
               received_per_peer: Sequence[int] | np.ndarray,
               group: dist.ProcessGroup | None = None) -> None:
        """Adds one exchange; ``*_per_peer[p]`` is indexed by rank ``p`` *of* ``group``."""
        sent = _to_global(np.asarray(sent_per_peer, dtype=np.int64), group)
        received = _to_global(np.asarray(received_per_peer, dtype=np.int64), group)
        # A different length means a new job with another world size: its counts start afresh.
        if kind in self.sent and self.sent[kind].size == sent.size:
            self.sent[kind] += sent
            self.received[kind] += received
        else:
            self.sent[kind], self.received[kind] = sent.copy(), received.copy()
        self.calls[kind] += 1

    def start(self, device: torch.device) -> object:
        """The start of an exchange timed by :meth:`exchanged` (the hot path's :meth:`timed`, without
        a context manager): the host clock for a CPU ``device``, a CUDA event recorded on the current
        stream for a CUDA one, ``None`` in an untimed thread."""
        if getattr(self._thread, "untimed", False):
            return None
        if device.type != "cuda":
            return time.perf_counter()
        begin = torch.cuda.Event(enable_timing=True)
        begin.record()
        return begin

    def exchanged(self, kind: str, rows: "PeerRows", row_bytes: int, start: object) -> None:
        """Adds one exchange of ``rows`` (rows sent and received per peer, by default-group rank, of
        ``row_bytes`` bytes each) and the time since ``start`` (:meth:`start`): :meth:`record` and
        :meth:`timed` of an exchange whose per-peer rows are known beforehand (``start``: a CUDA event of
        :meth:`start`, or the host clock's ``time.perf_counter()``; an untimed thread adds no time)."""
        if start is not None and not getattr(self._thread, "untimed", False):
            if isinstance(start, float):
                self._clock._host += time.perf_counter() - start
            else:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._clock._events.append((start, end))
                if len(self._clock._events) % Stopwatch.FOLD_EVERY == 0:
                    self._clock._fold(wait=False)
        sent, received = rows.sent * row_bytes, rows.received * row_bytes
        if kind in self.sent and self.sent[kind].size == sent.size:
            self.sent[kind] += sent
            self.received[kind] += received
        else:
            self.sent[kind], self.received[kind] = sent, received
        self.calls[kind] += 1

    @contextmanager
    def timed(self, device: torch.device | str | None = None) -> Iterator[None]:
        """Adds the block's time to :attr:`seconds`: CUDA events on the current stream when
        ``device`` (the communicated tensors') is a CUDA device, else the host clock."""
        if getattr(self._thread, "untimed", False):
            yield
            return
        with self._clock.measure(device):
            yield

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """In this thread, exchanges count their bytes but not their time (a background
        thread's waits overlap the caller's work: they are not time the caller waited)."""
        previous = getattr(self._thread, "untimed", False)
        self._thread.untimed = True
        try:
            yield
        finally:
            self._thread.untimed = previous

    def bytes_sent(self, kind: str | None = None) -> int:
        kinds = [kind] if kind else list(self.sent)
        return int(sum(self.sent[k].sum() for k in kinds if k in self.sent))

    def bytes_received(self, kind: str | None = None) -> int:
        kinds = [kind] if kind else list(self.received)
        return int(sum(self.received[k].sum() for k in kinds if k in self.received))

    def per_peer_sent(self) -> np.ndarray:
        arrays = list(self.sent.values())
        return np.sum(arrays, axis=0) if arrays else np.zeros(0, dtype=np.int64)

    def snapshot(self) -> dict:
        return {
            "bytes_sent": self.bytes_sent(), "bytes_received": self.bytes_received(),
            "by_kind": {k: {"sent": int(self.sent[k].sum()), "received": int(self.received[k].sum()),
                            "calls": self.calls[k]} for k in self.sent},
            "comm_seconds": self.seconds,
        }


def _to_global(per_group_peer: np.ndarray, group: dist.ProcessGroup | None) -> np.ndarray:
    """Re-indexes a per-peer array of ``group`` by default-group rank."""
    if group is None or not (dist.is_available() and dist.is_initialized()):
        return per_group_peer
    out = np.zeros(dist.get_world_size(), dtype=np.int64)
    ranks = [dist.get_global_rank(group, p) for p in range(per_group_peer.size)]
    np.add.at(out, ranks, per_group_peer)
    return out


class PeerRows:
    """Rows one exchange sends and receives per peer, indexed by default-group rank (what
    :meth:`CommCounter.exchanged` multiplies by the row's bytes), computed once per plan.

    Args:
        sent (Sequence[int]): rows sent to each rank of ``group``.
        received (Sequence[int]): rows received from each.
        group (ProcessGroup, optional): the exchange's group. (default: :obj:`None`, the default group)
    """

    def __init__(self, sent: Sequence[int], received: Sequence[int], group: dist.ProcessGroup | None = None) -> None:
        self.sent = _to_global(np.asarray(sent, dtype=np.int64), group)
        self.received = _to_global(np.asarray(received, dtype=np.int64), group)


def row_nbytes(t) -> int:
    """Bytes of one row (all trailing dimensions) of ``t``, also when ``t`` has no rows."""
    n = 1
    for s in t.shape[1:]:
        n *= s
    return n * t.element_size()


_COUNTER = CommCounter()


def comm_counter() -> CommCounter:
    """The process-wide counter every exchange of this package records into."""
    return _COUNTER
