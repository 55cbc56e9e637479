r"""Handing a batch made on the prefetching thread's CUDA stream over to the training thread's.

The prefetching thread (:mod:`.prefetch`) samples on a CUDA stream of its own, so its kernels,
and the host copies of its gloo exchanges (which wait for everything queued before them on
their stream), never queue behind the training step's kernels, nor theirs behind its own.  A
batch crosses over with an event recorded on the thread's stream once the batch is made: the
training thread's current stream waits for that event (on the device; the host goes on) before
any kernel of the step reads the batch, and every tensor of the batch is recorded as used on
that stream (``Tensor.record_stream``), so that when the step drops the batch the caching
allocator does not hand its memory to the thread's next batch while the step's kernels may
still read it.  The thread's stream first waits for the caller's (the loader's tensors made
there, e.g. the canonical in-edge order, are read by the thread).  Off CUDA (the CPU) every step
is a no-op.
"""
import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data.data import BaseData


class StreamHandoff:
    """The producer's stream and the handover of its batches to the consumer's stream.

    Args:
        device (torch.device): where the batches are made; a CUDA device gets a stream of its own.
        cuda (module, optional): the ``torch.cuda`` whose ``Stream``, ``Event``, ``stream`` and
            ``current_stream`` are used (tests pass a stand-in). (default: :obj:`torch.cuda`)
    """

    def __init__(self, device: torch.device, cuda: Any = torch.cuda) -> None:
        self.device = torch.device(device)
        self.cuda, self.stream = None, None
        if self.device.type == "cuda":
            self.cuda, self.stream = cuda, cuda.Stream(self.device)
            # what the caller queued so far (the loader's tensors, which the thread reads) comes first
            self.stream.wait_stream(cuda.current_stream(self.device))

    def producing(self) -> contextlib.AbstractContextManager:
        """Run the producing thread's work inside: its kernels go to the producer's stream."""
        return contextlib.nullcontext() if self.cuda is None else self.cuda.stream(self.stream)

    def made(self) -> Any:
        """Called by the producer once a batch is made: an event marking that point of its stream
        (``None`` off CUDA)."""
        if self.cuda is None:
            return None
        event = self.cuda.Event()
        event.record(self.stream)
        return event

    def received(self, batch: Any, event: Any) -> Any:
        """Called by the consumer before it uses ``batch``: its current stream waits for ``event`` and
        every tensor of the batch is recorded on that stream; returns ``batch``."""
        if event is None or self.cuda is None:
            return batch
        consumer = self.cuda.current_stream(self.device)
        consumer.wait_event(event)
        for tensor in tensors_of(batch):
            tensor.record_stream(consumer)
        return batch


def tensors_of(obj: Any) -> Iterator[Tensor]:
    """Every distinct tensor reachable from ``obj`` (a batch): through PyG data objects' stores, mappings,
    lists and tuples, dataclasses and the attributes of this package's objects (a batch's
    adjacency, its plan, its hop bookkeeping)."""
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, (str, bytes, int, float, bool)):
            continue
        seen.add(id(item))
        if isinstance(item, Tensor):
            yield item
            if type(item) is not Tensor:  # a subclass's own tensors (BatchNodeIds' rows)
                stack.extend(v for v in vars(item).values() if isinstance(v, Tensor))
        elif isinstance(item, BaseData):
            stack.extend(item.stores)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) or type(item).__module__.startswith("pyg_sparsecomm"):
            stack.extend(getattr(item, "__dict__", {}).values())
