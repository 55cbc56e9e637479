"""Run a function on ``P`` local processes under gloo (tests, benchmarks, notebooks).

``launch(fn, P, *args)`` starts ``P`` spawned processes, initialises a gloo
process group through a file store (no ports to collide), calls
``fn(rank, world_size, *args)`` in each and returns the list of results by
rank.  A failing rank's traceback is raised as ``RuntimeError`` in the caller;
a job that does not finish within ``timeout`` seconds is killed and reported,
so a hang can never stall a test suite.

Processes are forked from a ``forkserver`` that imported torch, PyG and this package once and
built one instance of each PyG conv class (:mod:`~pyg_sparsecomm.testing.warm`; where the platform
has a fork server; else they are spawned): a spawned process spends seconds
importing torch before it runs anything (measured here: 34 s to start 4 ranks on a loaded
2-core machine, 0.3 s from the warm fork server), which dominated multi-process test time.
"""
import gc
import io
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .. import _EXPORTS
from ..comm.group import release_groups
from ..comm.peer_failure import report_error

#: how often :func:`launch` starts a job whose gloo mesh did not connect
CONNECT_ATTEMPTS = 3
_CONNECT_RACE = "connectFullMesh"
_OK, _FAILED, _CONNECT = "ok", "failed", "connect"


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


def _worker(fn, rank, world_size, store_path, args, results, threads, pg_timeout):
    # Everything this process inherited (torch, PyG, the package: millions of objects) is frozen
    # out of the garbage collector's reach: the job's own objects are still collected, but a full
    # collection (release_groups's, or an automatic one) no longer walks the imported modules, which
    # took 0.55-0.8 s per process and rank, most of a short job's time.
    gc.freeze()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["LOCAL_WORLD_SIZE"] = str(world_size)  # every rank on this host, as torchrun says
    torch.set_num_threads(threads)
    try:
        try:
            dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                                    world_size=world_size, timeout=timedelta(seconds=pg_timeout))
        except RuntimeError as e:
            if _CONNECT_RACE not in str(e):
                raise
            results.put((rank, _CONNECT, traceback.format_exc()))
            return
        out = fn(rank, world_size, *args)
        results.put((rank, _OK, _dumps(out)))
    except BaseException as error:  # noqa: BLE001 - report everything to the parent
        results.put((rank, _FAILED, traceback.format_exc()))
        if dist.is_initialized():  # the peers still waiting name this rank and its error (as under torchrun)
            report_error(error)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        release_groups()  # gloo's threads end before the interpreter does (see release_groups)


# the package's public names load lazily: preload the modules behind them, as a worker would import them; then
# PyG's per-class generated code (testing_warm: 0.1 s per conv class and process otherwise), METIS's binding and
# numpy.ma (numpy imports it lazily, at a process's first np.unique)
_PRELOAD = ["torch", "torch_geometric", "pyg_sparsecomm", *sorted({f"pyg_sparsecomm{m}" for m in _EXPORTS.values()}),
            # the root's names of the lazy nn/ and loader/ packages, by the modules defining them
            "pyg_sparsecomm.nn.distribute", "pyg_sparsecomm.loader.neighbor_loader",
            "pyg_sparsecomm.loader.node_subset_loader", "pyg_sparsecomm.testing.warm", "pymetis", "numpy.ma"]
_EXTRA_PRELOAD: list[str] = []
#: what the fork server was asked to import when this process first asked for it (None: not yet)
_SERVER_PRELOAD: list[str] | None = None


def preload(*modules: str) -> None:
    """Names modules the fork server imports once when it starts, besides torch, PyG and this package.

    A launched function is pickled by reference: every rank imports the module that defines it (and
    what that module imports) after the fork, in every launch.  Preloaded, those imports happen
    once, in the server (under pytest: ``pytest`` and the test modules).

    Args:
        modules (str): importable module names, already imported in the calling process: the
            server imports them by name and a failing import other than ``ImportError`` stops it.

    Takes effect when the fork server starts (the first :func:`launch` of the process): naming a
    module it did not import after that raises ``RuntimeError``; where there is no fork server
    (ranks are spawned and import everything themselves) it does nothing.  The server looks the
    modules up on its own ``sys.path``:
    Python 3.11's fork server does not take the caller's, so a module found only through a folder
    the caller added to ``sys.path`` needs that folder on ``PYTHONPATH`` too (else the server skips
    it silently and every rank imports it, as without ``preload``).
    """
    missing = [m for m in modules if m not in sys.modules]
    if missing:
        raise ValueError(f"preload(): {missing} are not imported in this process; import them first (the fork "
                         f"server imports each by name, and an import that fails there stops every launch)")
    late = [m for m in modules if _SERVER_PRELOAD is not None and m not in _SERVER_PRELOAD]
    if late:
        raise RuntimeError(f"preload(): the fork server already runs without {late}: call preload before the "
                           f"process's first launch")
    _EXTRA_PRELOAD.extend(m for m in modules if m not in _EXTRA_PRELOAD)


def start_fork_server() -> None:
    """Starts the fork server of :func:`launch` now, with what :func:`preload` named so far, and returns
    at once: the server imports its modules in the background (seconds of one core) while the caller
    goes on, instead of inside the first :func:`launch`, which would wait for it.

    Later :func:`preload` calls naming new modules raise ``RuntimeError``, as after a first launch.  Where
    there is no fork server (``spawn`` platforms), or once it was asked for (by a launch, an earlier
    call, or in the process this one was forked from), it does nothing.
    """
    if _SERVER_PRELOAD is None and _context().get_start_method() == "forkserver":
        import multiprocessing.forkserver
        multiprocessing.forkserver.ensure_running()


def _context():
    """A fork server with torch, PyG and this package imported (nothing initialised that a fork
    could break: no threads, no process group), or ``spawn`` where there is none."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    global _SERVER_PRELOAD
    ctx = mp.get_context("forkserver")
    if _SERVER_PRELOAD is None:  # the server starts with the first process started from this context
        _SERVER_PRELOAD = _PRELOAD + _EXTRA_PRELOAD
    ctx.set_forkserver_preload(_SERVER_PRELOAD)
    return ctx


def launch(fn: Callable[..., Any], world_size: int, *args, timeout: float = 300.0,
           threads: int = 1, pg_timeout: float = 60.0, settle: float = 0.5) -> list[Any]:
    """Runs ``fn(rank, world_size, *args)`` on ``world_size`` gloo processes; returns results by rank.

    A job whose gloo mesh failed to connect (``connectFullMesh`` ... ``Connection closed by peer``
    on loopback, a race in gloo that torch's own test suite meets too: pytorch/pytorch#53270;
    measured here at 4 in 120 launches on a loaded 2-core machine) is started again, at most
    :data:`CONNECT_ATTEMPTS` times: no rank has run ``fn`` then, so nothing is repeated.

    Args:
        fn (Callable): a module-level function ``fn(rank, world_size, *args)``; its return value
            comes back (picklable).
        world_size (int): the number of processes.
        *args (optional): further arguments of ``fn`` (picklable).
        timeout (float, optional): seconds the whole job may take before its processes are killed
            and an error names the ranks still running. (default: :obj:`300.0`)
        threads (int, optional): torch threads per process. (default: :obj:`1`)
        pg_timeout (float, optional): seconds every collective of the process group may wait.
            (default: :obj:`60.0`)
        settle (float, optional): seconds each other rank gets to end by itself once one failed, before it is
            killed (peers stuck in a collective); a test of what the peers do then gives them as long as they
            need, so that a loaded machine does not kill them first. (default: :obj:`0.5`)
    """
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        outputs, errors = _run_job(fn, world_size, args, timeout, threads, pg_timeout, settle)
        if not mesh_failed_to_connect(errors) or attempt == CONNECT_ATTEMPTS:
            break
    if errors:
        rank = min(errors)
        raise RuntimeError(f"rank {rank} of {world_size} failed:\n{errors[rank][1]}")
    return [outputs[r] for r in range(world_size)]


def mesh_failed_to_connect(errors: dict[int, tuple[str, str]]) -> bool:
    """Whether a job ended only by gloo's mesh failing to connect (no rank ran the function).

    Args:
        errors (dict[int, tuple[str, str]]): rank -> (status, message) of every rank that failed.
    """
    return bool(errors) and all(status == _CONNECT for status, _ in errors.values())


def _run_job(fn: Callable[..., Any], world_size: int, args: tuple, timeout: float, threads: int,
             pg_timeout: float, settle: float = 0.5) -> tuple[dict[int, Any], dict[int, tuple[str, str]]]:
    """One attempt: ``({rank: result}, {rank: (status, traceback)})``; stops at the first error
    (the failed rank's peers may be stuck in a collective) and kills what is left, each rank after
    ``settle`` seconds."""
    ctx = _context()
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_worker, args=(fn, r, world_size, store, args, results, threads,
                                                   pg_timeout), daemon=True)
                 for r in range(world_size)]
        for p in procs:
            p.start()
        outputs: dict[int, Any] = {}
        errors: dict[int, tuple[str, str]] = {}
        try:
            deadline = time.monotonic() + timeout
            while len(outputs) + len(errors) < world_size:
                try:
                    rank, status, payload = results.get(timeout=0.2)
                except queue.Empty:
                    dead = [r for r, p in enumerate(procs)
                            if not p.is_alive() and r not in outputs and r not in errors]
                    if dead and results.empty():
                        r = dead[0]
                        errors[r] = (_FAILED, f"process exited with code {procs[r].exitcode} without a result")
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"distributed job did not finish within {timeout:.0f}s; "
                                           f"ranks done: {sorted(outputs)}") from None
                    continue
                if status == _OK:
                    outputs[rank] = _loads(payload)
                else:
                    errors[rank] = (status, payload)
                    break  # peers of a failed rank may be stuck in a collective
        finally:
            for p in procs:
                p.join(timeout=5 if not errors else settle)
                if p.is_alive():
                    p.kill()
                    p.join()
    return outputs, errors
