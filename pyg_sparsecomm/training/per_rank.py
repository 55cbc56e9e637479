r"""This rank's share where a script expects the whole graph's number, and the one warning the
package gives where it can tell.

A mini-batch's ``batch.batch_size`` is *this rank's* seed rows (``out[:batch.batch_size]`` are the
rows this rank scores), while :func:`~pyg_sparsecomm.distributed_loss` returns the whole graph's
loss and ``len(loader.dataset)`` is the global number of seeds.  Two habits of single-process PyG
scripts then print numbers that differ from rank to rank, with no error:

* an epoch loss weighted by the local count, ``total_loss += loss.item() * batch_size``: the
  batches' whole-graph losses weighted by this rank's seeds (the single-process loop weighs them
  by ``batch.global_batch_size``);
* a progress bar over seeds, ``tqdm(total=len(loader.dataset))`` advanced by
  ``pbar.update(batch.batch_size)``: it ends at this rank's share (86 of 140 seeds), where
  ``pbar.update(batch.global_batch_size)`` (or ``tqdm(loader)``: ``len(loader)`` is the same on
  every rank) ends at the total.

``batch.batch_size`` is a :class:`LocalCount`, an ``int`` (slicing, arithmetic and printing are
unchanged; ``torch.load(weights_only=True)`` reads it back), so that these two uses can be told
apart from the legitimate ones and warned about once per process (:class:`PerRankValueWarning`,
naming what to use instead):

* a :class:`~pyg_sparsecomm.training.whole_graph.WholeGraphLoss` (or its ``loss.item()``) multiplied by a
  local count: the product of a whole-graph mean and one rank's count has no meaning in any
  script;
* a local count added up inside a progress bar (``tqdm``'s ``update``, which adds ``n`` to its
  counter): a bar's total is the global number of seeds, or its length the loader's.

Not flagged, and why: adding local counts in the script itself (``total_examples +=
batch.batch_size``) is how a correct global count starts (``global_count(total_examples)``, or
local correct counts over ``global_sum``); ``float(loss) * batch.batch_size`` cannot be seen
(``float()`` must return an exact ``float``, and ``float * int`` never consults the ``int``
subclass), which is why the README's recipe names ``global_batch_size``; an accuracy over this
rank's rows is a number a script may want.  On one process every count is the global one, and
nothing warns.
"""
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist


class PerRankValueWarning(UserWarning):
    """A number that holds this rank's share where the script likely wants the whole graph's
    (see :mod:`~pyg_sparsecomm.training.per_rank`); given once per process and case."""


_WARNED: set[str] = set()

_LOSS_TIMES_LOCAL = ("a whole-graph loss (distributed_loss's result: the same on every rank) multiplied by "
                     "batch.batch_size, this rank's seed rows: an epoch loss weighted so differs from rank to rank; "
                     "weigh by batch.global_batch_size (the batch's seeds over all ranks), as the single-process "
                     "loop weighs by its batch_size")
_PROGRESS_BY_LOCAL = ("a progress bar advanced by batch.batch_size (this rank's seed rows) ends at this rank's share "
                      "of len(loader.dataset); advance it by batch.global_batch_size, or iterate tqdm(loader) "
                      "(len(loader) is the same on every rank)")


def _several_ranks() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def warn_once(case: str, message: str, stacklevel: int = 3) -> None:
    """Warns ``message`` as :class:`PerRankValueWarning` the first time ``case`` occurs in this
    process, when it runs with other ranks (on one process every count is global); ``stacklevel``
    1 names the line calling this function, the default 3 the script's line behind the two frames
    of the callers here (``check_product`` under the loss's ``__mul__``, tqdm under ``__radd__``)."""
    if case in _WARNED or not _several_ranks():
        return
    _WARNED.add(case)
    warnings.warn(message, PerRankValueWarning, stacklevel=stacklevel + 1)


def check_product(whole: Any, other: Any) -> None:
    """Warns once if a whole-graph value ``whole`` is multiplied by a :class:`LocalCount` ``other``."""
    if isinstance(other, LocalCount):
        warn_once("loss * local count", _LOSS_TIMES_LOCAL)


def _caller_module(depth: int) -> str:
    return sys._getframe(depth + 1).f_globals.get("__name__", "")


class LocalCount(int):
    """An ``int`` counting this rank's share of a batch (``batch.batch_size``): behaves as the
    ``int`` it is (``torch.load(weights_only=True)`` reads it back: an allowed global), and warns
    once where a script adds it to a progress bar (see the module doc; multiplying a whole-graph
    loss by it is checked by the loss)."""

    __slots__ = ()

    def __radd__(self, other: Any) -> Any:
        # ``int + LocalCount`` asks this method first (a subclass's reflected method wins): tqdm's
        # ``self.n += n``; a script's own sums of local counts are left alone (see the module doc)
        if _caller_module(1).split(".")[0] == "tqdm":
            warn_once("progress bar by local count", _PROGRESS_BY_LOCAL)
        return int.__radd__(self, other)


torch.serialization.add_safe_globals([LocalCount])
