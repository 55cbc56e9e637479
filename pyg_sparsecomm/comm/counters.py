"""Byte and time counters for every message the exchanges send.

One process-wide :class:`CommCounter` (``comm_counter()``) records, per peer
rank, the bytes of payload this process sent and received, per *kind* of
exchange (``"halo"``, ``"halo_grad"``, ``"bcast"``, ...), and the wall time
spent inside communication calls.  Bytes count tensor payload only
(``numel * element_size``), which is what the plan predicts.
"""
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Dict, Iterator, Sequence

import numpy as np


class CommCounter:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.sent: Dict[str, np.ndarray] = {}
        self.received: Dict[str, np.ndarray] = {}
        self.calls: Dict[str, int] = defaultdict(int)
        self.seconds: float = 0.0

    def record(self, kind: str, sent_per_peer: Sequence[int], received_per_peer: Sequence[int]) -> None:
        sent = np.asarray(sent_per_peer, dtype=np.int64)
        received = np.asarray(received_per_peer, dtype=np.int64)
        if kind in self.sent and self.sent[kind].size == sent.size:
            self.sent[kind] += sent
            self.received[kind] += received
        else:
            self.sent[kind], self.received[kind] = sent.copy(), received.copy()
        self.calls[kind] += 1

    @contextmanager
    def timed(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def bytes_sent(self, kind: str = None) -> int:
        kinds = [kind] if kind else list(self.sent)
        return int(sum(self.sent[k].sum() for k in kinds if k in self.sent))

    def bytes_received(self, kind: str = None) -> int:
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
