r"""A rank's failure reaches its peers by name, through the job's store.

When one rank of a job fails, its peers learn it from their next collective, which fails with
what the backend saw: gloo's ``Connection closed by peer [127.0.0.1]:38789`` when the rank's
process ended, ``Timed out waiting 120000ms for recv operation`` when it stopped (``SIGSTOP``, a
debugger) or hangs.  Neither names the rank, nor its error.  Here every rank tells the others
through the key-value store of the default process group (the ``TCPStore`` of ``torchrun``'s
agent, the ``FileStore`` of :func:`~pyg_sparsecomm.testing.processes.launch`), which outlives the broken
connections:

* a rank *reports* its error before its process ends: its uncaught exception (the hooks of
  :func:`install_failure_hooks`, chained to ``sys.excepthook`` and ``threading.excepthook``;
  installed by :func:`~pyg_sparsecomm.launch.runtime.init_distributed` and a group's first collective),
  an error leaving :func:`~pyg_sparsecomm.launch.runtime.distributed_job`, or that it *left* the job
  without one (the end of its script, ``sys.exit``: :func:`report_left`);
* the package's collectives run inside :class:`failures_named`: when one fails, this rank
  reports that it is *waiting* and reads the reports, giving the others a grace period to report
  (:func:`grace_seconds`), and raises :class:`PeerFailedError` naming the ranks that failed
  (with their error's type and message), left, or sent no report (stopped, hung or killed): a
  rank that does not arrive at a timed-out collective is one that did not report waiting.

Nothing is paid while collectives succeed (a ``with`` block around each); the store is written
once per rank at the end of a job, and read only after a collective failed.  Reports are keyed
by default-group rank; a job's store holds one job's reports (``torchrun`` restarts use keys of
their own, :mod:`~pyg_sparsecomm.launch.attempts`).
"""
import atexit
import functools
import os
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar

import torch
import torch.distributed as dist

from ..compat import default_store, process_group_timeout
from . import error_file

_ROOT = "pyg_sparsecomm/failures/"
#: what a report says about a rank, weakest first: it left the job without an error, it waits in
#: a collective that failed (a consequence), it raised an error (a cause)
LEFT, WAITING, ERROR = "left", "waiting", "error"
_STRENGTH = {LEFT: 0, WAITING: 1, ERROR: 2}
#: seconds a store operation of a report may take (a store whose host is stopped never answers)
STORE_SECONDS = 3.0
_POLL_SECONDS = 0.05
#: how much of a rank's error message its report carries
_MESSAGE_LINES, _MESSAGE_CHARS = 4, 600
#: words of gloo's (and the c10d socket layer's) errors when a peer is gone or late
_BACKEND_FAILURES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Timed out waiting",
                     "Application timeout caused pair closure", "gloo/transport", "timed out")
_TIMEOUT_WORDS = ("Timed out waiting", "Application timeout", "timed out", "Timeout", "timeout")

T = TypeVar("T")


class PeerFailedError(dist.DistBackendError):
    """A collective failed on this rank because other ranks failed, left the job or did not
    arrive; the message names them, with each failed rank's error (type and message).  A
    ``RuntimeError`` (``torch.distributed.DistBackendError``), as the backend's own error was."""


#: what this process reported in the current job: (the store's id, the strongest kind)
_reported: dict[str, Any] = {"store": None, "kind": None}


def forget_job() -> None:
    """Forgets what this process reported (a new job starts afresh; called when the job's groups
    are released, :func:`~pyg_sparsecomm.comm.group.release_groups`)."""
    _reported.update(store=None, kind=None)


def is_collective_failure(error: BaseException) -> bool:
    """Whether ``error`` is a backend's failure of a collective (a peer gone or late), not an
    error of the code around it: ``torch.distributed``'s ``DistError`` or gloo's ``RuntimeError``."""
    if isinstance(error, PeerFailedError):
        return False
    if isinstance(error, dist.DistError):
        return True
    return isinstance(error, RuntimeError) and any(words in str(error) for words in _BACKEND_FAILURES)


def _bounded(fn: Callable[[], T], seconds: float) -> T:
    """``fn()`` on a helper thread, given up after ``seconds`` (``TimeoutError``): a store whose
    host is stopped blocks its clients' calls far beyond the store's own timeout."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    helper = threading.Thread(target=run, name="pyg_sparsecomm failure report", daemon=True)
    try:
        helper.start()
    except RuntimeError:  # no new threads (interpreter shutting down): call it here
        return fn()
    helper.join(seconds)
    if helper.is_alive():
        raise TimeoutError(f"the job's store did not answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _write(store: Any, kind: str, text: str) -> None:
    index = store.add(_ROOT + "count", 1)
    store.set(f"{_ROOT}{index}", f"{dist.get_rank()}\n{kind}\n{text}")
    store.check([f"{_ROOT}{index}"])  # a round trip: the store holds the report before this rank goes on (and exits)


def report(kind: str, text: str) -> None:
    """Writes ``kind`` (:data:`LEFT`, :data:`WAITING` or :data:`ERROR`) and ``text`` as this rank's
    report into the job's store, unless this rank already reported as much; never raises (a
    failing hook must not hide the error it reports) and gives up after :data:`STORE_SECONDS`."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        store = default_store()
        if _reported["store"] is not store:
            _reported.update(store=store, kind=None)
        known = _reported["kind"]
        if known is not None and _STRENGTH[known] >= _STRENGTH[kind]:
            return
        _bounded(lambda: _write(store, kind, text), STORE_SECONDS)
        _reported["kind"] = kind
    except Exception:  # noqa: BLE001, S110 - the store is gone or stopped: the peers report "no report"
        pass


@functools.lru_cache(maxsize=1)
def _foreign_roots() -> tuple[str, ...]:
    """The folders whose code is not the user's: this package's, the standard library's and the
    installed packages' (torch, PyG) -- by location, not by name: a checkout of this repository is
    itself a folder named ``pyg_sparsecomm`` holding the user's tests and examples."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sysconfig.get_paths()
    roots = {package, *(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))}
    for name in ("torch", "torch_geometric"):
        module = sys.modules.get(name)
        if module is not None and module.__file__:
            roots.add(os.path.dirname(os.path.abspath(module.__file__)))
    return tuple(os.path.join(root, "") for root in roots)


def _is_users(filename: str) -> bool:
    return not os.path.abspath(filename).startswith(_foreign_roots())


def describe(error: BaseException, where: str = "") -> str:
    """``"Type: message"`` of ``error`` (its first lines: the rank's own log holds the rest), with
    the innermost line of the user's code it passed (not torch's, PyG's or this package's) and
    ``where`` it ran."""
    text = f"{type(error).__name__}: {error}"
    short = "\n".join(text.splitlines()[:_MESSAGE_LINES])[:_MESSAGE_CHARS]
    text = short if short == text else short + " ..."
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _is_users(f.filename)]
    if frames:
        text += f" (at {frames[-1].filename}:{frames[-1].lineno})"
    return text + (f" {where}" if where else "")


def report_error(error: BaseException, where: str = "") -> None:
    """Reports ``error`` as this rank's: a collective's failure as :data:`WAITING` (a consequence
    of another rank's), anything else as :data:`ERROR` (see :func:`report`)."""
    consequence = isinstance(error, PeerFailedError) or is_collective_failure(error)
    report(WAITING if consequence else ERROR, describe(error, where))


def report_left() -> None:
    """Reports that this rank leaves the job without an error (its group is being destroyed at the
    end of its script), unless it reported an error or a failed collective before."""
    report(LEFT, "left the job without an error (its script ended, called sys.exit or destroyed the process group)")


def _read(store: Any, seen: dict[int, str], reports: dict[int, tuple[str, str]]) -> int:
    """Adds the store's reports not in ``seen`` (index -> raw) to ``reports`` (rank -> the strongest);
    returns how many are being written (their index drawn, their text not yet set)."""
    count, writing = store.add(_ROOT + "count", 0), 0
    for index in range(1, count + 1):
        if index in seen:
            continue
        if not store.check([f"{_ROOT}{index}"]):
            writing += 1  # read next round
            continue
        seen[index] = store.get(f"{_ROOT}{index}").decode(errors="replace")
        rank, kind, text = seen[index].split("\n", 2)
        known = reports.get(int(rank))
        if known is None or _STRENGTH[kind] > _STRENGTH[known[0]]:
            reports[int(rank)] = (kind, text)
    return writing


def collect_reports(seconds: float, timed_out: bool = True) -> dict[int, tuple[str, str]]:
    """The reports of the job's ranks (rank -> (kind, text), the strongest each), read until

    * a rank other than this one reported an error or that it left (the cause is known),
    * every rank reported, or after a lost connection (not ``timed_out``) every rank but one, with
      no report being written (a rank reports before it closes its connections: the one left is
      the rank whose process ended without a report),
    * or ``seconds`` passed.
    """
    store, me, size = default_store(), dist.get_rank(), dist.get_world_size()
    seen: dict[int, str] = {}
    reports: dict[int, tuple[str, str]] = {}
    deadline = time.monotonic() + seconds
    while True:
        writing = _read(store, seen, reports)
        decided = any(r != me and kind != WAITING for r, (kind, _) in reports.items())
        missing = size - len(reports) - (me not in reports)
        enough = missing == 0 or (not timed_out and missing == 1 and not writing)
        if decided or enough or time.monotonic() >= deadline:
            return reports
        time.sleep(_POLL_SECONDS)


def grace_seconds(group: dist.ProcessGroup | None, timed_out: bool) -> float:
    """At most how long a rank whose collective failed waits for its peers' reports
    (:func:`collect_reports`): a quarter of the group's timeout within [1, 10] s after a timeout
    (ranks that entered the collective later time out later), a sixteenth within [0.25, 2] s after
    a lost connection (the peers notice within milliseconds)."""
    timeout = None
    for device in ("cpu", "cuda"):
        timeout = timeout or process_group_timeout(group or dist.group.WORLD, torch.device(device))
    seconds = (timeout or timedelta(seconds=120)).total_seconds()
    return min(10.0, max(1.0, seconds / 4)) if timed_out else min(2.0, max(0.25, seconds / 16))


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:10])) + (", ..." if len(ranks) > 10 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def _headline(by_kind: dict[str, list[int]], silent: list[int], timed_out: bool) -> str:
    if by_kind[ERROR]:
        return f"{_ranks(by_kind[ERROR])} failed"
    if by_kind[LEFT]:
        return (f"{_ranks(by_kind[LEFT])} left the job while this rank still waited in a collective: every rank must "
                f"run the same collectives (the same epochs, batches and evaluations)")
    if silent:
        return f"{_ranks(silent)} {'did not arrive' if timed_out else 'closed its connections without a report'}"
    return ("every rank waits in a collective that failed: the ranks called different collectives (one skipped or "
            "added one, or their order differs)")


def explain(error: BaseException, what: str, group: dist.ProcessGroup | None = None) -> PeerFailedError:
    """The error a rank raises for its collective's failure ``error`` (in ``what``): reports that
    it waits, reads its peers' reports (:func:`collect_reports`, :func:`grace_seconds`) and names
    the ranks that failed, left or sent no report."""
    me, size = dist.get_rank(), dist.get_world_size()
    timed_out = any(words in str(error) for words in _TIMEOUT_WORDS)
    report(WAITING, describe(error))
    seconds = grace_seconds(group, timed_out)
    own = f"This rank's collective raised {type(error).__name__}: {str(error)[:500]}"
    try:
        reports = _bounded(lambda: collect_reports(seconds, timed_out), seconds + 2 * STORE_SECONDS)
    except Exception as e:  # noqa: BLE001 - the store, not a peer, is what failed to answer
        return PeerFailedError(f"{what} failed on rank {me} of {size}, and the job's store did not answer "
                               f"({type(e).__name__}: {e}): its host (torchrun's agent, or rank 0 under a plain "
                               f"env:// launch) is stopped or gone.\n{own}")
    by_kind: dict[str, list[int]] = {ERROR: [], LEFT: [], WAITING: []}
    for r, (kind, text) in sorted(reports.items()):
        if r != me:
            by_kind[kind].append(r)
            # gloo closes a pair whose operation timed out: this rank may see a peer's timeout as a
            # lost connection, and the rank that peer waited for did not arrive rather than die
            timed_out = timed_out or (kind == WAITING and any(words in text for words in _TIMEOUT_WORDS))
    # ranks yet to report are named only when no rank's report gives the cause
    silent = [] if by_kind[ERROR] or by_kind[LEFT] else [r for r in range(size) if r != me and r not in reports]
    lines = [f"  rank {r}: {reports[r][1]}" for r in by_kind[ERROR] + by_kind[LEFT]]
    if silent and timed_out:
        lines.append(f"  {_ranks(silent)}: did not arrive, and sent no report within {seconds:.1f} s of this rank's "
                     f"failure: stopped (SIGSTOP, a debugger), hung, or still computing outside any collective")
        lines += _stalled(silent, what)
    elif silent:
        lines.append(f"  {_ranks(silent)}: closed its connections without a report: killed (a signal, the "
                     f"out-of-memory killer), crashed in native code, or called dist.destroy_process_group() "
                     f"while this rank still waited; its log, or the launcher's, says which")
    if by_kind[WAITING]:
        lines.append(f"  {_ranks(by_kind[WAITING])}: waiting in a collective that failed, as this rank")
    return PeerFailedError(f"{what} failed on rank {me} of {size} because {_headline(by_kind, silent, timed_out)}:\n"
                           + "\n".join(lines) + f"\n{own}")


def _stalled(silent: list[int], what: str) -> list[str]:
    """A line per rank that did not arrive: its host, pid and what shows where it is stuck; its
    error file (on this host) says so for torchrun's summary (:mod:`.error_file`)."""
    try:
        processes = _bounded(lambda: {r: error_file.process_of(r) for r in silent}, STORE_SECONDS)
    except Exception:  # noqa: BLE001 - the store is gone: the ranks stay named without where they are
        return []
    for r in silent:
        error_file.write_for_stalled(r, processes[r], f"rank {r} did not arrive at {what} of rank {dist.get_rank()}: "
                                                      f"{error_file.where(processes[r])}")
    return [f"  rank {r}: {error_file.where(processes[r])}" for r in silent]


def raise_named(error: BaseException, what: str, group: dist.ProcessGroup | None = None) -> None:
    """Raises :class:`PeerFailedError` (:func:`explain`) from ``error`` if it is a collective's
    failure in a job; returns otherwise.  What :class:`failures_named` does at the end of its
    block, for the collectives of every layer call (the halo exchange's wait, ``host_all_reduce``),
    which spell it ``try: ... except BaseException as e: raise_named(e, what, group); raise``:
    a ``try`` costs nothing while collectives succeed.

    Args:
        error (BaseException): the error a collective (or the code around it) raised.
        what (str): the collective, for the message.
        group (ProcessGroup, optional): its group (for the grace period). (default: the default group)
    """
    if is_collective_failure(error) and dist.is_initialized():
        raise explain(error, what, group) from error


class failures_named:  # noqa: N801 - a context manager, named for its ``with`` statement
    """``with failures_named("the halo exchange", group): ...`` raises :class:`PeerFailedError`
    (:func:`explain`) in place of a collective's failure inside the block; other errors pass
    unchanged.  Costs a ``with`` block while collectives succeed (:func:`raise_named` is the same
    for hot paths, at no cost).

    Args:
        what (str): the collective, for the message.
        group (ProcessGroup, optional): its group (for the grace period). (default: the default group)
    """

    __slots__ = ("what", "group")

    def __init__(self, what: str, group: dist.ProcessGroup | None = None) -> None:
        self.what, self.group = what, group

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> Literal[False]:
        if error is not None:
            raise_named(error, self.what, self.group)
        return False


def uncaught(error: BaseException) -> BaseException:
    """What an uncaught ``error`` is shown as, after reporting it (:func:`report_error`): a
    collective's failure outside :class:`failures_named` (``torch.distributed`` called directly)
    explained (:func:`explain`), anything else itself."""
    if not dist.is_initialized():
        return error
    if is_collective_failure(error):
        explained = explain(error, "a torch.distributed call outside pyg_sparsecomm")
        explained.__cause__ = error
        return explained
    report_error(error)
    return error


_hooks: dict[str, Any] = {}


def install_failure_hooks(announce: bool = True) -> None:
    """Chains the reporting of uncaught errors (:func:`uncaught`) to ``sys.excepthook`` and
    ``threading.excepthook`` (once per process): a rank's uncaught error reaches the store before
    its process ends and closes its connections, and under ``torchrun`` to its elastic error file
    (:mod:`.error_file`: the rank that failed first is torchrun's root cause).  A process that ends
    with the job's group still initialised (a script that called ``init_process_group`` itself)
    reports that it left.  ``announce``: also write where this rank runs into the job's store, for a
    peer it may stall (once per job; a layer call's per-call check passes ``False``: a store read per
    call)."""
    if announce:
        error_file.announce()
    if _hooks:
        return
    _hooks.update(sys=sys.excepthook, threading=threading.excepthook)

    def excepthook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        shown = error
        try:
            shown = uncaught(error)
        finally:
            error_file.write_error_file(shown, isinstance(shown, PeerFailedError) or is_collective_failure(error))
            if shown is error:
                _hooks["sys"](kind, error, tb)
            else:
                _hooks["sys"](type(shown), shown, None)

    def thread_excepthook(args: Any) -> None:
        try:
            if args.exc_value is not None and dist.is_initialized():
                report_error(args.exc_value, f"in thread {getattr(args.thread, 'name', '?')}")
        finally:
            _hooks["threading"](args)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    atexit.register(_left_at_exit)


def _left_at_exit() -> None:
    if dist.is_initialized():
        report_left()
