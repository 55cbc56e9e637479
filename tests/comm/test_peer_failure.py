"""A rank's failure reaches every other rank by name (issue #45, item 5).

Before: when one rank's script raised (a label of 99, ``x`` on the meta device), its peers' next
collective failed with gloo's "Connection closed by peer [127.0.0.1]:38789", naming no rank; a
stopped rank surfaced as "Timed out waiting 120000ms for send operation"; a rank killed without a
word, or one that left the job early, likewise.  Now the peers raise ``PeerFailedError`` naming
the rank and its error (or that it did not arrive, left, or sent no report), within seconds.

Real gloo jobs; each rank writes what it raised to a file (:func:`launch` stops collecting
results at the first failed rank, and the peers' errors come after it).
"""
import contextlib
import io
import os
import re
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from graphs import NUM_FEATURES, make_cases
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import distribute, distributed_loss, gather_nodes, global_accuracy, shard
from pyg_sparsecomm.comm import peer_failure
from pyg_sparsecomm.launch.runtime import distributed_job
from pyg_sparsecomm.testing import launch


def _outcome(folder: str, rank: int, work) -> None:
    """Runs ``work()`` and writes how long it took and what it raised to ``folder/rank{rank}``."""
    start = time.monotonic()
    try:
        work()
        outcome = "no error"
    except Exception as e:  # noqa: BLE001 - what the rank saw is the result
        outcome = f"{type(e).__name__}: {e}"
    Path(folder, f"rank{rank}").write_text(f"{time.monotonic() - start:.2f}\n{outcome}")


def _outcomes(folder: Path, ranks: list[int]) -> dict[int, tuple[float, str]]:
    """What ``ranks`` wrote: the launcher let them end by themselves (``settle``)."""
    found = {}
    for r in ranks:
        seconds, outcome = (folder / f"rank{r}").read_text().split("\n", 1)
        found[r] = (float(seconds), outcome)
    return found


def _model_and_shard(world_size: int):
    local = shard(make_cases(world_size)["directed"])
    torch.manual_seed(0)
    return distribute(GCNConv(NUM_FEATURES, 4)), local


def _no_grace_needed() -> None:
    """A grace period of ten minutes: where the cause is known at once (a peer reported it, or the
    only peer is the one gone) the reports are read without waiting, else the job times out; no
    clock is read, so a loaded machine only slows the job down."""
    peer_failure.grace_seconds = lambda group, timed_out: 600.0


def _label_99(rank, world_size, folder):
    """Rank 2's labels hold a 99 (F.cross_entropy raises there); rank 0 meets it in
    distributed_loss, rank 1 in a torch.distributed call of its own, uncaught (sys.excepthook)."""
    _no_grace_needed()
    with distributed_job():
        model, local = _model_and_shard(world_size)
        out = model(local.x, local.adj)
        y = torch.zeros(out.size(0), dtype=torch.long)
        if rank == 2:
            y[0] = 99
            distributed_loss(F.cross_entropy, out, y)  # IndexError: Target 99 is out of bounds
        elif rank == 0:
            _outcome(folder, rank, lambda: distributed_loss(F.cross_entropy, out, y))
        else:
            _outcome(folder, rank, lambda: _uncaught(lambda: dist.all_reduce(torch.ones(3))))


def _uncaught(work) -> None:
    """What the interpreter prints for ``work()``'s uncaught error (the installed ``sys.excepthook``),
    raised as a RuntimeError holding it."""
    try:
        work()
    except RuntimeError as e:
        printed = io.StringIO()
        with contextlib.redirect_stderr(printed):
            sys.excepthook(type(e), e, e.__traceback__)
        raise RuntimeError(printed.getvalue()) from None


def test_every_rank_names_the_rank_that_raised_and_its_error(tmp_path):
    with pytest.raises(RuntimeError, match="rank 2 of 3 failed"):
        launch(_label_99, 3, str(tmp_path), pg_timeout=20, timeout=120, settle=120)
    found = _outcomes(tmp_path, [0, 1])
    seconds, message = found[0]
    assert message.startswith("PeerFailedError: distributed_loss failed on rank 0 of 3 because rank 2 failed"), message
    assert "rank 2: IndexError: Target 99 is out of bounds" in message, message
    assert "Connection" in message and "Timed out" not in message  # gloo's lost connection, last: no timeout
    seconds, printed = found[1]
    # the user's own torch.distributed call: the traceback of gloo's error, then the explanation
    assert "Connection closed by peer" in printed or "Connection reset by peer" in printed, printed
    assert "PeerFailedError: a torch.distributed call outside pyg_sparsecomm failed on rank 1 of 3 because rank 2 " \
           "failed" in printed, printed
    assert "rank 2: IndexError: Target 99 is out of bounds" in printed and "Timed out" not in printed, printed


def _meta_x(rank, world_size, folder):
    """Rank 1 passes its features on the meta device to a distribute()d layer."""
    _no_grace_needed()
    with distributed_job():
        model, local = _model_and_shard(world_size)
        if rank == 1:
            model(local.x.to("meta"), local.adj)
        _outcome(folder, rank, lambda: model(local.x, local.adj))


def test_the_layers_halo_exchange_names_the_rank_whose_call_failed(tmp_path):
    with pytest.raises(RuntimeError, match="rank 1 of 2 failed"):
        launch(_meta_x, 2, str(tmp_path), pg_timeout=20, timeout=120, settle=120)
    seconds, message = _outcomes(tmp_path, [0])[0]
    assert message.startswith("PeerFailedError: the halo exchange failed on rank 0 of 2 because rank 1 failed"), \
        message
    assert "rank 1: " in message and "meta" in message.lower() and "Timed out" not in message, message


def _stopped(rank, world_size, folder):
    """Rank 2 stops (SIGSTOP) before a global_accuracy on a group with a 3 s timeout."""
    short = dist.new_group(timeout=timedelta(seconds=3))
    dist.barrier()
    if rank == 2:
        Path(folder, "pid").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
    pred = torch.arange(4)
    _outcome(folder, rank, lambda: global_accuracy(pred, pred, group=short))
    if rank == 0:  # the stopped rank ends now, so that the launcher does too
        time.sleep(0.5)  # rank 1 reads the reports too
        os.kill(int(Path(folder, "pid").read_text()), signal.SIGKILL)


def test_a_timeout_names_the_rank_that_did_not_arrive(tmp_path):
    with pytest.raises(RuntimeError, match="rank 2 of 3 failed"):
        launch(_stopped, 3, str(tmp_path), pg_timeout=30, timeout=120, settle=120)
    for rank, (_, message) in _outcomes(tmp_path, [0, 1]).items():
        assert message.startswith(f"PeerFailedError: global_sum failed on rank {rank} of 3 because rank 2 did "
                                  f"not arrive"), message
        assert re.search(r"rank 2: did not arrive, and sent no report within \d\.\d s", message), message
        assert f"rank {1 - rank}: waiting in a collective that failed" in message, message
        # gloo closes a pair that timed out: a rank may see its peer's timeout first, as a lost connection
        assert "Timed out waiting 3000ms" in message or "Connection closed by peer" in message, message


def _killed_or_left(rank, world_size, folder, how):
    """Rank 1 is killed (os._exit: no Python error) before a global_accuracy, or leaves the job
    (its script ends) before rank 0's final gather_nodes."""
    _no_grace_needed()
    with distributed_job():
        local = shard(make_cases(world_size)["directed"])
        pred = torch.arange(4)
        global_accuracy(pred, pred)
        if rank == 1:
            if how == "killed":
                os._exit(3)
            return
        _outcome(folder, rank, lambda: global_accuracy(pred, pred) if how == "killed" else gather_nodes(local.x, local))


@pytest.mark.parametrize("how,words", [
    ("killed", "global_sum failed on rank 0 of 2 because rank 1 closed its connections without a report:\n  rank 1: "
               "closed its connections without a report: killed"),
    ("left", "gather_nodes failed on rank 0 of 2 because rank 1 left the job while this rank still waited in a "
             "collective: every rank must run the same collectives"),
])
def test_a_rank_killed_or_gone_early_is_named(tmp_path, how, words):
    context = pytest.raises(RuntimeError, match="rank 1 of 2 failed") if how == "killed" else contextlib.nullcontext()
    with context:
        launch(_killed_or_left, 2, str(tmp_path), how, pg_timeout=10, timeout=120, settle=120)
    seconds, message = _outcomes(tmp_path, [0])[0]
    assert message.startswith(f"PeerFailedError: {words}"), message
    assert "Timed out" not in message, message  # the lost connection, and no grace: the only peer is the one gone


def _thread_error(rank, world_size):
    peer_failure.install_failure_hooks()
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):  # threading's own hook prints to sys.stderr
        worker = threading.Thread(target=lambda: 1 / 0, name="loader")
        worker.start()
        worker.join()
    return peer_failure.collect_reports(0.0), printed.getvalue()


def test_a_threads_uncaught_error_is_reported_and_still_printed():
    reports, printed = launch(_thread_error, 1)[0]
    kind, text = reports[0]
    assert kind == "error" and text.startswith("ZeroDivisionError: division by zero"), reports
    assert text.endswith("in thread loader") and "test_peer_failure.py" in text, text
    assert "ZeroDivisionError" in printed  # the previous hook ran
