"""A peer that dies mid-job: what the surviving rank sees, and how soon — on gloo, where the waiting
call raises.  On NCCL the process group's watchdog aborts the surviving process instead (no
exception to catch; ``runtime.nccl_failure_env``, README "Errors instead of hangs"), which a CPU
suite cannot run: ``tests/launch/test_runtime_nccl.py`` checks the settings."""
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pyg_sparsecomm.testing import launch


def report_outcome(report: str, work: Callable[[], object]) -> None:
    """Runs ``work()`` on the surviving rank and writes how long it took and how it ended (the
    launcher stops collecting results once the dead rank is noticed, so a file carries them)."""
    start = time.monotonic()
    try:
        work()
        outcome = "no error"
    except RuntimeError as e:
        outcome = f"RuntimeError: {e}"
    Path(report).write_text(f"{time.monotonic() - start:.1f}\n{outcome}")


def assert_survivor_raised(worker: Callable, report: Path) -> None:
    """Launches ``worker(rank, 2, report)`` (rank 1 dies) and checks that rank 0 got an error,
    not a hang: its collectives time out after 10 s at the latest, and the launcher gives it two
    minutes to end by itself (no clock is read: a loaded machine only slows it down)."""
    with pytest.raises(RuntimeError, match="rank 1 of 2 failed"):
        launch(worker, 2, str(report), pg_timeout=10, timeout=120, settle=120)
    assert report.exists(), "rank 0 did not end by itself: it hung"
    outcome = report.read_text().split("\n", 1)[1]
    assert outcome.startswith("RuntimeError"), outcome
