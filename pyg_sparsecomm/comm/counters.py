"""Byte and time counters for every message the exchanges send.

One process-wide :class:`CommCounter` (``comm_counter()``) records, per peer
(indexed by its rank in the *default* group, whatever subgroup the exchange ran
in, so that 1.5D's row and column groups add up in one array), the bytes of
payload this process sent and received, per *kind* of exchange (``"halo"``,
``"halo_grad"``, ``"bcast"``, ``"allreduce"``, ...), and the wall time spent
inside communication calls.  Bytes count tensor payload only
(``numel * element_size``), which is what the plan predicts.
"""
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch.distributed as dist


class CommCounter:
    def __init__(self) -> None:
        self._thread = threading.local()
        self.reset()

    def reset(self) -> None:
        self.sent: dict[str, np.ndarray] = {}
        self.received: dict[str, np.ndarray] = {}
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: float = 0.0

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

    @contextmanager
    def timed(self) -> Iterator[None]:
        if getattr(self._thread, "untimed", False):
            yield
            return
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

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
