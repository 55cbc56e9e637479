"""How ``pytest -n 2`` (pytest-xdist) workers share the machine's cores.

Most of the suite's time goes to tests that start processes (``launch``'s ranks, ``torchrun``,
``mpiexec``), which take every core; a single-process test beside them slows their collectives by
more than it gains (``-n 2`` without this plugin was slower than one process, CHANGELOG).  About 250
tests run in the worker's process alone, on one core.  So the workers hold one file lock between them:

* every test starts under the **shared** lock, so single-process tests run side by side;
* a test that starts a process (``subprocess.Popen``, ``multiprocessing``'s ``Process.start``)
  first takes the lock **exclusively**, waiting for the other worker's current test to end and
  keeping the other worker's next test waiting until it ends.

No marks are needed: a test is treated as multi-process from the moment it starts its first process.
A test marked ``one_core`` (the processes it starts use one core between them: they run one at a
time, or mostly wait) keeps the shared lock.
Tests of one module stay on one worker (``--dist loadgroup``, one group per module), so module-scoped
launches run once; modules that share a session fixture with a launch (``SHARED_FIXTURES``) share a
group.  Without xdist this plugin does nothing.
"""
import fcntl
import multiprocessing.process
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

#: session fixtures that launch processes: the modules using one run on the same worker (once)
SHARED_FIXTURES = ("drill", "hetero_results")


class CoreLock:
    """A reader-writer ``flock`` shared by the workers of one test run, held while a test runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.pid = os.getpid()
        self.mode = fcntl.LOCK_UN
        self.one_core = False  # the running test is marked one_core

    def _set(self, mode: int) -> None:
        # a forked child (a test's own fork) shares the parent's lock: it never converts it
        if os.getpid() == self.pid and mode != self.mode:
            fcntl.flock(self.fd, mode)
            self.mode = mode

    def test_starts(self) -> None:
        self._set(fcntl.LOCK_SH)

    def process_starts(self) -> None:
        # outside a test (a plugin starting a process at configure time) there is no lock to take
        if self.mode == fcntl.LOCK_SH and not self.one_core:
            self._set(fcntl.LOCK_EX)

    def test_ends(self) -> None:
        self._set(fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink(missing_ok=True)  # the worker that ends last finds it gone


_LOCK: CoreLock | None = None


def _exclusive_first(start):
    def wrapped(self, *args, **kwargs):
        if _LOCK is not None:
            _LOCK.process_starts()
        return start(self, *args, **kwargs)
    return wrapped


def pytest_configure(config) -> None:
    global _LOCK
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or _LOCK is not None:
        return
    if not config.getvalue("loadgroup"):
        raise pytest.UsageError("run the suite's workers with --dist loadgroup (tests/core_sharing.py keeps "
                                "each module, and its module-scoped launches, on one worker)")
    _LOCK = CoreLock(Path(tempfile.gettempdir()) / f"pyg_sparsecomm-tests-{workerinput['testrunuid']}.lock")
    subprocess.Popen.__init__ = _exclusive_first(subprocess.Popen.__init__)  # type: ignore[method-assign]
    process = multiprocessing.process.BaseProcess
    process.start = _exclusive_first(process.start)  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items) -> None:
    if _LOCK is None:
        return
    group = {}  # module -> group: modules sharing a launching session fixture are one group
    for item in items:
        module = item.nodeid.split("::")[0]
        shared = [name for name in SHARED_FIXTURES if name in getattr(item, "fixturenames", ())]
        group.setdefault(module, Path(module).stem)  # shown after '@' in the node ids
        if shared:
            group[module] = shared[0]
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group[item.nodeid.split("::")[0]]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem) -> None:
    if _LOCK is not None:
        _LOCK.one_core = item.get_closest_marker("one_core") is not None


def pytest_runtest_logstart(nodeid, location) -> None:
    if _LOCK is not None:
        _LOCK.test_starts()


def pytest_runtest_logfinish(nodeid, location) -> None:
    if _LOCK is not None:
        _LOCK.test_ends()


def pytest_unconfigure(config) -> None:
    if _LOCK is not None and getattr(config, "workerinput", None) is not None:
        _LOCK.close()
