"""``PYG_SPARSECOMM_OFFLINE``: a PyG dataset whose raw files are missing raises at once, naming
them and their folder, instead of trying to download them.

PyG's ``Dataset.__init__`` downloads through ``self.download()`` when its raw files are missing
(from ``_download``, or from ``process`` in a few datasets).  Inside :func:`refusing_downloads`
every dataset constructed gets, for the time of its ``__init__``, an instance attribute
``download`` that raises instead: an instance attribute comes before the class's method, so
the user's class itself is never changed.
"""
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: set (to anything but ``""`` or ``"0"``) to make a missing raw file an error at once, never a
#: download attempt: in :func:`~pyg_sparsecomm.launch.datasets.load_dataset`, in every PyG dataset
#: built under :func:`~pyg_sparsecomm.rank_zero_first`, and in every one built once the package is
#: imported (:mod:`~pyg_sparsecomm.graph.dataset_lock`)
OFFLINE_ENV = "PYG_SPARSECOMM_OFFLINE"

_lock = threading.Lock()
_depth = 0  # the blocks inside refusing_downloads(), over all threads: the first patches, the last restores
_original_init: Any = None


def is_offline() -> bool:
    """Whether the environment sets :data:`OFFLINE_ENV` (to anything but ``""`` or ``"0"``)."""
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


@contextmanager
def refusing_downloads() -> Iterator[None]:
    """While offline (:func:`is_offline`), every PyG dataset constructed in the block raises
    ``FileNotFoundError`` naming its missing raw files and its ``raw_dir`` where it would
    download them; otherwise the block just runs."""
    if not is_offline():
        yield
        return
    _patch(+1)
    try:
        yield
    finally:
        _patch(-1)


def _patch(step: int) -> None:
    """Counts a block in (``+1``) or out (``-1``); ``Dataset.__init__`` is wrapped while any is in
    (threads may build datasets in blocks of their own at once)."""
    global _depth, _original_init
    from torch_geometric.data import Dataset
    with _lock:
        if step > 0 and _depth == 0:
            _original_init = Dataset.__init__
            Dataset.__init__ = _init_refusing_download
        _depth += step
        if step < 0 and _depth == 0:
            Dataset.__init__ = _original_init


def _init_refusing_download(self, *args, **kwargs) -> None:
    with refusing_download_of(self):
        _original_init(self, *args, **kwargs)


@contextmanager
def refusing_download_of(dataset: Any) -> Iterator[None]:
    """While offline (:func:`is_offline`), ``dataset.download()`` raises ``FileNotFoundError``
    naming the missing raw files (an instance attribute over the class's method, for the block)."""
    if not is_offline() or "download" in vars(dataset):  # online, or an enclosing block refuses already
        yield
        return
    dataset.download = lambda: _refuse_download(dataset)
    try:
        yield
    finally:
        del dataset.download


def _refuse_download(dataset) -> None:
    from torch_geometric.data.dataset import to_list
    raw_dir = str(dataset.raw_dir)
    names = [str(name) for name in to_list(dataset.raw_file_names)]
    missing = [name for name in names if not os.path.exists(os.path.join(raw_dir, name))] or names
    what = f"raw files missing in {raw_dir}/: {', '.join(missing)}" if missing \
        else f"the files its download() fetches are missing in {raw_dir}/"
    url = getattr(dataset, "url", None)
    source = f" (from {url})" if isinstance(url, str) else ""
    raise FileNotFoundError(f"{type(dataset).__name__}: {what}; not downloaded: {OFFLINE_ENV} is set. Copy them "
                            f"into {raw_dir}/{source}, or unset {OFFLINE_ENV} to let {type(dataset).__name__} "
                            f"download them")
