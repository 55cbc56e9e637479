"""A rank's error in ``torchrun``'s summary: the elastic error file, stamped so that the rank that
failed first is its "Root Cause".

``torchrun`` gives every worker a file to write its error to (``TORCHELASTIC_ERROR_FILE``, what
``torch.distributed.elastic.multiprocessing.errors.record`` writes) and names as the root cause
the failure with the earliest timestamp, in whole seconds, the lowest rank among equal ones; a
worker without a file is stamped when the agent notices it.  So after rank 1 raised, rank 0 --
which only stopped because rank 1 did -- was named in 6 of 7 runs (issue 55).  Here

* a rank's uncaught error is written to its file (:func:`write_error_file`, from the excepthook of
  :func:`~pyg_sparsecomm.comm.peer_failure.install_failure_hooks`): a cause stamped when it happened,
  a *consequence* (a collective that failed because a peer failed:
  :class:`~pyg_sparsecomm.comm.peer_failure.PeerFailedError`) one second later, and saying so;
* every rank announces its host, process id and error file in the job's store (:func:`announce`),
  so that a rank whose peer did not arrive names where it is (``py-spy dump --pid N``) and, on the
  same host, writes the stalled peer's file for it (:func:`write_for_stalled`): the agent then
  stops that peer, and its failure carries the explanation and the earlier time.
"""
from __future__ import annotations

import json
import os
import socket
import time
import traceback
from typing import Any

import torch.distributed as dist

from ..compat import default_store

_ROOT = "pyg_sparsecomm/processes/"
#: seconds a consequence is stamped after the time it happened (torchrun compares whole seconds)
CONSEQUENCE_DELAY = 1
#: the last store this process announced itself in
_announced: dict[str, Any] = {"store": None}


def announce() -> None:
    """Writes this rank's host, process id and error file into the job's store (once per job);
    never raises."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        store = default_store()
        if _announced["store"] is store:
            return
        store.set(f"{_ROOT}{dist.get_rank()}", json.dumps({
            "host": socket.gethostname(), "pid": os.getpid(), "error_file": os.environ.get("TORCHELASTIC_ERROR_FILE")}))
        _announced["store"] = store
    except Exception:  # noqa: BLE001, S110 - without it a stall is named without host and pid
        pass


def process_of(rank: int) -> dict[str, Any] | None:
    """What ``rank`` announced (``host``, ``pid``, ``error_file``), or ``None`` (it did not)."""
    store = default_store()
    key = f"{_ROOT}{rank}"
    if not store.check([key]):
        return None
    return json.loads(store.get(key).decode())


def where(process: dict[str, Any] | None) -> str:
    """``"pid N on host H"`` of an announced process, and what shows where it is stuck."""
    if process is None:
        return "it did not announce its host and process id (init_distributed does)"
    return (f"pid {process['pid']} on host {process['host']}; to see where it is stuck: "
            f"py-spy dump --pid {process['pid']} (on {process['host']})")


def _payload(message: str, callstack: str, timestamp: int) -> str:
    """An error file as torch's ``ErrorHandler.record_exception`` writes it."""
    return json.dumps({"message": {"message": message,
                                   "extraInfo": {"py_callstack": callstack, "timestamp": str(timestamp)}}})


def write_error_file(error: BaseException, consequence: bool) -> None:
    """Writes ``error`` to this worker's ``TORCHELASTIC_ERROR_FILE`` (nothing outside ``torchrun``),
    stamped now, or :data:`CONSEQUENCE_DELAY` later for a ``consequence`` of another rank's
    failure; never raises."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        callstack = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        stamp = int(time.time())
        if consequence:
            stamp += CONSEQUENCE_DELAY
            callstack += (f"pyg_sparsecomm: this rank stopped because of another rank's failure (named above); its "
                          f"time is stamped {CONSEQUENCE_DELAY} s late so that torchrun's Root Cause names the rank "
                          f"that failed first\n")
        with open(path, "w") as f:
            f.write(_payload(f"{type(error).__name__}: {error}", callstack, stamp))
    except Exception:  # noqa: BLE001, S110 - the error is still printed and reported to the peers
        pass


def write_for_stalled(rank: int, process: dict[str, Any] | None, text: str) -> None:
    """Writes ``text`` as the error of ``rank``, which did not arrive at a collective, to its error
    file if it runs on this host and has none yet (stamped now: before this rank's own
    consequence); never raises."""
    if process is None or process.get("host") != socket.gethostname() or not process.get("error_file"):
        return
    try:
        path = process["error_file"]
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(_payload(text, text + "\n", int(time.time())))
    except Exception:  # noqa: BLE001, S110 - torchrun then names this rank's consequence instead
        pass
