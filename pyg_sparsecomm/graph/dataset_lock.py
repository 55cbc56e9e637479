"""A PyG dataset's download and processing run in one process at a time, so a script's own dataset
call (``Planetoid(root, "Cora")``, OGB's ``PygNodePropPredDataset(name)``) works unchanged under
``torchrun``, ``mp.spawn`` or any launcher.

Every rank of a job constructs the dataset.  On a fresh root they would all download the raw files
and write the processed ones at once (``PytorchStreamReader failed reading file``, a half-written
zip).  PyG's ``Dataset.__init__`` does both in two methods, ``_download`` and ``_process``, and each
begins by returning when its files exist.  Importing ``pyg_sparsecomm`` wraps the two (when
``torch_geometric`` is imported, before or after) in an exclusive file lock (``fcntl.flock``) on
``<root>/.pyg_sparsecomm.lock``: the first process downloads and processes, the others wait for the
lock, find the files and load them.  A dataset whose files exist takes the lock and returns at once.

A file lock, not a collective: it needs no process group (the dataset is built before one is
joined, or on some ranks only), cannot pair wrongly, and a rank that crashes holding it releases it.
It serialises the processes of one machine, and of several where the root is on a file system with
``flock`` (NFS v4, Lustre with ``flock``); elsewhere, and for datasets that are not PyG's
(``ogb``'s NumPy ones), :func:`~pyg_sparsecomm.rank_zero_first` does the same with a broadcast.
``force_reload=True`` makes every rank reprocess in turn.  With ``PYG_SPARSECOMM_OFFLINE`` set, a
missing raw file is an error naming it on every rank (:mod:`~pyg_sparsecomm.graph.offline`), never a
download attempt.  Without ``fcntl`` (Windows) nothing is wrapped.
"""
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: the lock file, in the dataset's ``root``
LOCK_NAME = ".pyg_sparsecomm.lock"
#: the module defining PyG's ``Dataset``
DATASET_MODULE = "torch_geometric.data.dataset"

_held = threading.local()  # lock paths this thread holds: a dataset built inside another's process()


def lock_dataset_files_once_loaded() -> None:
    """Wraps PyG's ``Dataset`` methods now if ``torch_geometric`` is imported, else right after its
    dataset module is (an import hook that removes itself), so importing this package does not
    import PyG."""
    if DATASET_MODULE in sys.modules:
        lock_dataset_files()
    elif not any(isinstance(finder, _AfterDatasetModule) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterDatasetModule())


class _AfterDatasetModule(importlib.abc.MetaPathFinder):
    """Finds PyG's dataset module as the path finder does, and wraps its ``Dataset`` once executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != DATASET_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            lock_dataset_files()
        spec.loader.exec_module = exec_module
        return spec


def lock_dataset_files() -> None:
    """Wraps ``torch_geometric.data.Dataset._download`` and ``_process`` in the root's file lock
    (once; a no-op without ``fcntl``)."""
    try:
        import fcntl  # noqa: F401  (POSIX only)
    except ImportError:  # pragma: no cover
        return
    Dataset = sys.modules[DATASET_MODULE].Dataset
    for name in ("_download", "_process"):
        method = getattr(Dataset, name)
        if not getattr(method, "_pyg_sparsecomm_locked", False):
            setattr(Dataset, name, _locked(method))


def _locked(method: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(method)
    def run(dataset: Any) -> None:
        from .offline import refusing_download_of  # (loaded at a dataset's first construction, not at import)
        root = getattr(dataset, "root", None)
        if not isinstance(root, str) or root in ("", sys.modules[DATASET_MODULE].MISSING):  # no files
            return method(dataset)
        with root_lock(root), refusing_download_of(dataset):  # PYG_SPARSECOMM_OFFLINE: an error, not a download
            return method(dataset)
    run._pyg_sparsecomm_locked = True  # type: ignore[attr-defined]
    return run


@contextmanager
def root_lock(root: str) -> Iterator[None]:
    """Holds the exclusive file lock of a dataset root (re-entered freely by the thread holding it).

    A root where the lock file cannot be made (read-only) is not locked: no process can write its
    files there either.

    Args:
        root (str): the dataset's root folder (made if missing).
    """
    import fcntl
    path = os.path.join(os.path.abspath(root), LOCK_NAME)
    held = _held.__dict__.setdefault("paths", set())
    if path in held:
        yield
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = open(path, "a")
    except OSError:  # a read-only root (datasets kept ready on a shared volume): nothing can be written there
        yield        # to race on, and PyG finds its files or fails to write them as without the lock
        return
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
