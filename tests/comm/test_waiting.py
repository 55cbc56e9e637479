"""Waiting for host collectives (issue 56, ``comm/waiting.py``): a gloo rank with a core of its own polls
``is_completed()`` (yielding the core between polls) before it blocks in ``wait()``; NCCL groups, a host
with more than two rank threads per core and ``PYG_SPARSECOMM_WAIT=block`` never poll; the polls stop after
``SPIN_SECONDS`` and the wait blocks.  Counted, not timed: the yields of a rank waiting for a peer that
is deliberately late, in real gloo runs, through the halo exchange and the loss's all-reduce."""
import time

import pytest
import torch
import torch.distributed as dist

from pyg_sparsecomm.comm import waiting
from pyg_sparsecomm.testing import launch


class _Work:
    """A stand-in ``Work``: completes after ``polls`` calls of ``is_completed()``."""

    def __init__(self, polls: int) -> None:
        self.left, self.polled, self.waited = polls, 0, 0

    def is_completed(self) -> bool:
        self.polled += 1
        self.left -= 1
        return self.left < 0

    def wait(self) -> bool:
        self.waited += 1
        return True


@pytest.fixture
def one_group(monkeypatch):
    """``finish`` on the default group of a 2-rank job, its decision given per test."""
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(waiting, "SPIN", {})

    def decide(seconds: float) -> None:
        waiting.SPIN[(None, 2)] = seconds
    return decide


def test_a_wait_polls_until_the_work_completes_then_waits(one_group):
    one_group(5.0)
    work = _Work(polls=30)
    waiting.finish(work)
    assert work.polled == 31 and work.waited == 1


def test_a_blocking_decision_waits_at_once(one_group):
    one_group(0.0)
    work = _Work(polls=30)
    waiting.finish(work)
    assert work.polled == 0 and work.waited == 1


def test_polling_stops_after_its_budget_and_the_wait_blocks(one_group):
    one_group(0.01)
    work = _Work(polls=10 ** 12)
    start = time.perf_counter()
    waiting.finish(work)
    assert work.waited == 1 and work.polled > 0 and time.perf_counter() - start < 5


@pytest.mark.parametrize("backend,local,threads,cores,mode,spins", [
    ("gloo", 2, 1, 2, "auto", True),     # a core per rank thread
    ("gloo", 4, 1, 2, "auto", True),     # two rank threads per core: a polling rank yields to the other
    ("gloo", 2, 2, 2, "auto", True),
    ("gloo", 6, 1, 2, "auto", False),    # more crowded: blocking
    ("gloo", 4, 2, 2, "auto", False),
    ("gloo", 4, 1, 2, "spin", True),     # asked for
    ("gloo", 2, 1, 2, "block", False),   # asked for
    ("nccl", 2, 1, 16, "auto", False),   # NCCL's wait does not block the host
    ("nccl", 2, 1, 16, "spin", False),
])
def test_who_polls(monkeypatch, backend, local, threads, cores, mode, spins):
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(waiting.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local))
    monkeypatch.setenv(waiting.WAIT_ENV, mode)
    assert waiting._decide(None, local) == (waiting.SPIN_SECONDS if spins else 0.0)
    assert waiting._decide(None, 1) == 0.0  # one rank: nothing to wait for


def test_an_unknown_mode_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(waiting.WAIT_ENV, "busy")
    with pytest.raises(ValueError, match="PYG_SPARSECOMM_WAIT='busy'.*'auto', 'spin' or 'block'"):
        waiting._decide(None, 2)


def _yields_while_a_peer_is_late(rank, world_size, mode):
    """Rank 1 arrives 0.2 s late at a layer's halo exchange and at the loss's all-reduce; rank 0's
    yields while it waits for them, and the results (equal to the single-process ones)."""
    import os

    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    from pyg_sparsecomm import SparsityAwarePartitioner, distribute, distributed_loss, shard
    from pyg_sparsecomm.graph.datasets import sbm_graph
    os.environ[waiting.WAIT_ENV] = mode
    waiting.SPIN.clear()
    data = sbm_graph(60, 3, num_features=4, avg_degree=4.0, seed=0)
    local = shard(SparsityAwarePartitioner(world_size, method="random", seed=0)(data))
    torch.manual_seed(0)
    conv = distribute(GCNConv(4, 3))
    conv(local.x, local.adj)  # the first call agrees on the shard
    yields = [0]
    real = os.sched_yield

    def counted() -> None:
        yields[0] += 1
        real()
    os.sched_yield = counted
    try:
        if rank == 1:
            time.sleep(0.2)
        out = conv(local.x, local.adj)
        if rank == 1:
            time.sleep(0.2)
        loss = distributed_loss(F.mse_loss, out, torch.zeros_like(out))
    finally:
        os.sched_yield = real
    return yields[0], out.detach(), float(loss), local.n_id


@pytest.mark.parametrize("mode", ["spin", "block"])
def test_a_rank_waiting_for_a_late_peer_polls_only_where_it_spins(mode):
    from torch_geometric.nn import GCNConv

    from pyg_sparsecomm.graph.datasets import sbm_graph
    results = launch(_yields_while_a_peer_is_late, 2, mode)
    data = sbm_graph(60, 3, num_features=4, avg_degree=4.0, seed=0)
    torch.manual_seed(0)
    expected = GCNConv(4, 3)(data.x, data.edge_index)
    for _, out, loss, n_id in results:
        torch.testing.assert_close(out, expected[n_id])
        assert loss == pytest.approx(float((expected ** 2).mean()), rel=1e-5)
    if mode == "spin":
        assert results[0][0] > 0, "rank 0 waited for its late peer without polling"
    else:
        assert results[0][0] == 0, f"rank 0 polled {results[0][0]} times under PYG_SPARSECOMM_WAIT=block"


def _group_released(rank, world_size):
    """Whether a group a wait decided on is freed once destroyed and the package's group caches released."""
    import weakref

    from pyg_sparsecomm.comm.group import release_groups
    group = dist.new_group(list(range(world_size)))
    waiting.finish(dist.all_reduce(torch.ones(1), group=group, async_op=True), group)
    assert (group, world_size) in waiting.SPIN
    ref = weakref.ref(group)
    dist.destroy_process_group(group)
    del group
    release_groups()
    return ref() is None


def test_the_decisions_do_not_keep_a_destroyed_group_alive():
    """``release_groups`` ends the job's groups (and gloo's threads) while the interpreter lives: the
    decisions' cache is one it clears."""
    assert all(launch(_group_released, 2))
