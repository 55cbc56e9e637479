"""Communication time on CUDA comes from CUDA events, not the host clock (issue #24, defect 6).

An NCCL call returns once it is enqueued, so the host clock around it measures ~0.  No GPU
here: ``torch.cuda.Event`` is replaced by a fake whose timestamps come from a simulated stream
clock, which the faked collectives advance; the host clock cannot see that time, so a test
passes only if the CUDA branch ran and its events were read.
"""
import time

import pytest
import torch

from pyg_sparsecomm.comm import collectives, counters, halo, stale
from pyg_sparsecomm.comm.counters import CommCounter, Stopwatch


class FakeStream:
    """The simulated GPU stream: ``ms`` is its clock, advanced by the 'kernels' a test enqueues."""
    ms = 0.0
    events: list = []
    synchronized = 0


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing, "elapsed_time needs enable_timing=True"
        self.at: float | None = None
        FakeStream.events.append(self)

    def record(self, stream=None) -> None:
        self.at = FakeStream.ms

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        FakeStream.synchronized += 1

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.at is not None and end.at is not None, "an event was not recorded"
        return end.at - self.at


@pytest.fixture
def fake_cuda_events(monkeypatch):
    FakeStream.ms, FakeStream.events, FakeStream.synchronized = 0.0, [], 0
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    return FakeStream


def test_cuda_intervals_are_timed_on_the_stream(fake_cuda_events):
    counter = CommCounter()
    for _ in range(3):
        with counter.timed(torch.device("cuda", 0)):
            fake_cuda_events.ms += 5.0  # a collective that takes 5 ms on the GPU, ~0 on the host
    assert len(fake_cuda_events.events) == 6 and fake_cuda_events.synchronized == 0  # no host sync while timing
    assert counter.seconds == pytest.approx(0.015)
    assert fake_cuda_events.synchronized == 3  # read once, then folded
    assert counter.snapshot()["comm_seconds"] == pytest.approx(0.015) and fake_cuda_events.synchronized == 3
    counter.reset()
    assert counter.seconds == 0.0


def test_host_intervals_use_the_host_clock(fake_cuda_events):
    watch = Stopwatch()
    with watch.measure("cpu"):
        time.sleep(0.02)
    with watch.measure(None):
        time.sleep(0.02)
    assert watch.seconds >= 0.04 and not fake_cuda_events.events


def test_pending_events_are_folded_without_waiting(fake_cuda_events):
    watch = Stopwatch()
    for _ in range(Stopwatch.FOLD_EVERY):
        with watch.measure("cuda"):
            fake_cuda_events.ms += 1.0
    assert not watch._events and fake_cuda_events.synchronized == 0  # completed ones folded via query()
    assert watch.seconds == pytest.approx(Stopwatch.FOLD_EVERY * 1e-3)


class _Work:
    def wait(self) -> None:
        FakeStream.ms += 7.0

    def is_completed(self) -> bool:
        return True


def test_the_exchanges_time_on_their_tensors_device(fake_cuda_events, monkeypatch):
    """Every timed call site passes its tensors' device: on a CUDA device each one's 7 ms on the
    stream is counted (the tensors are CPU tensors posing as CUDA ones: only ``.device`` is read)."""
    counter, seen = counters.comm_counter(), []
    original = Stopwatch.measure

    def measure(self, device=None):
        seen.append(device)
        return original(self, torch.device("cuda", 0) if device == torch.device("cpu") else device)
    monkeypatch.setattr(Stopwatch, "measure", measure)
    for name in ("broadcast", "reduce", "all_reduce"):  # a Work where asked for one (comm.waiting.finish waits)
        monkeypatch.setattr(collectives.dist, name, lambda *a, **k: _Work() if k.get("async_op") else _Work().wait())
    monkeypatch.setattr(collectives.dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(halo.dist, "all_to_all_single", lambda *a, **k: _Work())
    counter.reset()
    buf = torch.ones(3, 2)
    collectives.broadcast_rows(buf, 0)
    collectives.reduce_rows(buf, 0)
    collectives.all_reduce_rows(buf)
    halo.all_to_all_rows(buf, [3], [3])
    stale.PIPELINE_SECONDS.reset()
    stale._Pending(buf, _Work(), buf).wait()
    assert seen == [torch.device("cpu")] * 6  # the pending exchange's wait is timed twice
    assert counter.seconds == pytest.approx(5 * 0.007)
    assert stale.PIPELINE_SECONDS.wait == pytest.approx(0.007)


def test_epoch_clock_waits_for_the_device(monkeypatch):
    """The examples' epoch times: ``device_clock`` synchronises a CUDA device before reading the clock."""
    from pyg_sparsecomm.launch.runtime import device_clock
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    device_clock("cpu")
    assert synced == []
    device_clock(torch.device("cuda", 1))
    assert synced == [torch.device("cuda", 1)]
