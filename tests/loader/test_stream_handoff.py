"""The prefetching thread's CUDA stream and the handover of its batches (issue 46, item 2), with a
stand-in for ``torch.cuda`` that logs every stream operation, as a CPU can show them: the thread
makes every batch inside its own stream, which first waits for the caller's; an event is recorded
on that stream after the batch is made; the caller's stream waits for that event before the caller
gets the batch; every tensor of the batch is recorded on the caller's stream; on the CPU nothing of
it happens."""
import threading
from contextlib import contextmanager

import torch
from device_walk import tensors
from test_loader import make_graph

from pyg_sparsecomm import shard
from pyg_sparsecomm.loader import DistributedNeighborLoader
from pyg_sparsecomm.loader import base as loader_base
from pyg_sparsecomm.loader.prefetch import PrefetchedBatches
from pyg_sparsecomm.loader.stream_handoff import StreamHandoff, tensors_of


class FakeStream:
    def __init__(self, name, cuda):
        self.name, self.cuda = name, cuda

    def wait_event(self, event):
        self.cuda.log.append(("wait", self.name, event))

    def wait_stream(self, stream):
        self.cuda.log.append(("wait_stream", self.name, stream.name))


class FakeEvent:
    def __init__(self, cuda):
        self.cuda = cuda

    def record(self, stream):
        self.cuda.log.append(("record", stream.name, self))


class FakeCuda:
    """``torch.cuda``'s streams as they behave: the current stream is per thread (the default
    stream, here the caller's, until a ``stream()`` block sets another)."""

    def __init__(self):
        self.log: list[tuple] = []
        self.lock = threading.Lock()
        self.local = threading.local()
        self.caller = FakeStream("caller", self)
        self.streams: list[FakeStream] = []

    def Stream(self, device):  # noqa: N802 -- torch.cuda's name
        self.streams.append(FakeStream(f"side {len(self.streams)}", self))
        return self.streams[-1]

    def Event(self):  # noqa: N802
        return FakeEvent(self)

    def current_stream(self, device=None):
        return getattr(self.local, "stream", self.caller)

    @contextmanager
    def stream(self, stream):
        previous = self.current_stream()
        self.local.stream = stream
        try:
            yield
        finally:
            self.local.stream = previous


def _batches(cuda, made):
    local = shard(make_graph(1), rank=0, world_size=1)
    for i, batch in enumerate(DistributedNeighborLoader(local, [3, 2], batch_size=20, prefetch=0)):
        made.append(cuda.current_stream().name)  # the stream the batch's kernels went to
        cuda.log.append(("made", i))
        yield batch


def _take(batches, cuda):
    out = []
    for i, batch in enumerate(batches):
        cuda.log.append(("taken", i))
        out.append(batch)
    return out


def test_the_callers_stream_waits_for_each_batch_made_on_the_threads_stream(monkeypatch):
    cuda, made, recorded = FakeCuda(), [], []
    monkeypatch.setattr(torch.Tensor, "record_stream",
                        lambda tensor, stream: cuda.log.append(("record_stream", stream.name, id(tensor))))
    taken = _take(PrefetchedBatches(_batches(cuda, made), 2, torch.device("cuda", 0), cuda=cuda), cuda)
    assert len(taken) > 2 and made == ["side 0"] * len(taken)  # the thread's stream, for every batch
    log = cuda.log
    assert log.index(("wait_stream", "side 0", "caller")) < log.index(("made", 0))  # the loader's tensors first
    for i, batch in enumerate(taken):
        made_at, taken_at = log.index(("made", i)), log.index(("taken", i))
        recorded = [e for e in log[made_at:] if e[0] == "record"]
        assert recorded and recorded[0][1] == "side 0", f"batch {i}: no event recorded on the thread's stream"
        event = recorded[0][2]
        waits = [j for j, e in enumerate(log) if e == ("wait", "caller", event)]
        assert waits and made_at < waits[0] < taken_at, f"batch {i}: the caller's stream did not wait for its event"
        on_caller = {e[2] for e in log[waits[0]:taken_at] if e[:2] == ("record_stream", "caller")}
        missing = [path for path, t in tensors(batch, f"batch {i}") if id(t) not in on_caller]
        assert missing == [], f"tensors not recorded on the caller's stream: {missing}"


def test_on_the_cpu_the_handover_does_nothing():
    cuda, made = FakeCuda(), []
    taken = _take(PrefetchedBatches(_batches(cuda, made), 1, torch.device("cpu"), cuda=cuda), cuda)
    assert taken and made == ["caller"] * len(taken)
    assert cuda.streams == [] and not any(e[0] in ("record", "wait", "wait_stream", "record_stream") for e in cuda.log)


def test_the_loader_hands_its_device_to_the_prefetcher(monkeypatch):
    seen = []
    real = loader_base.PrefetchedBatches

    def spy(batches, depth, device=None, **kwargs):
        seen.append(device)
        return real(batches, depth, device, **kwargs)

    monkeypatch.setattr(loader_base, "PrefetchedBatches", spy)
    local = shard(make_graph(1), rank=0, world_size=1)
    loader = DistributedNeighborLoader(local, [3], batch_size=30, prefetch=1)
    next(iter(loader))
    assert seen == [local.adj.device] == [loader.device]
    assert StreamHandoff(torch.device("meta")).stream is None  # only a CUDA device gets a stream


def test_every_tensor_of_a_batch_is_found():
    """The walk the handover records tensors with finds what the suite's device walk finds."""
    local = shard(make_graph(1), rank=0, world_size=1)
    batch = next(iter(DistributedNeighborLoader(local, [3, 2], batch_size=20, prefetch=0)))
    trimmed = batch.adj.trim()
    assert {id(t) for _, t in tensors(batch)} == {id(t) for t in tensors_of(batch)}
    assert {id(t) for _, t in tensors(trimmed)} == {id(t) for t in tensors_of(trimmed)}
