"""Work items run a few at a time in threads, their results taken in order.

numpy releases the GIL in its sorts, element-wise operations, gathers and bincounts on large
arrays, so the chunked passes of the partition pipeline (the ParHiP writer's blocks, the edge
sample's chunks) run on two cores in threads, without copying the edges to other processes.  At
most ``workers`` items are in flight, so their memory stays that of ``workers`` items.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

#: items in flight
WORKERS = 2


def ordered_in_threads(fn: Callable[[Item], Result], items: Iterable[Item],
                       workers: int = WORKERS) -> Iterator[Result]:
    """``fn(item)`` for every item, in the items' order, computed by ``workers`` threads with at
    most ``workers`` items submitted and not yet taken."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[Result]] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
