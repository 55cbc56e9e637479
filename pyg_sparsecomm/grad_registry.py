"""What the gradient synchronisation of ``distribute()`` and the loss of ``distributed_loss`` tell
each other, without importing each other: which parameters are summed over ranks in backward,
and which backward calls started from a loss normalised by the global row count."""
import weakref

import torch
from torch import Tensor

#: ``id(parameter) -> weakref``: parameters whose gradients ``distribute()`` sums in backward
_SYNCED: dict[int, weakref.ref] = {}
#: graph tasks (backward calls) whose root went through :func:`mark_normalised`
_NORMALISED_TASKS: set[int] = set()


def register_synced(param: Tensor) -> None:
    """Marks ``param``'s gradient as summed over ranks in backward (until ``param`` dies)."""
    key = id(param)
    _SYNCED[key] = weakref.ref(param, lambda _: _SYNCED.pop(key, None))


def is_synced(param: Tensor) -> bool:
    """Whether ``distribute()`` already sums ``param``'s gradient over ranks after every backward."""
    ref = _SYNCED.get(id(param))
    return ref is not None and ref() is param


def mark_normalised(loss: Tensor) -> Tensor:
    """Records, when backward passes through ``loss``, that the loss was normalised by the global
    row count (:func:`~pyg_sparsecomm.distributed_loss` calls it); returns ``loss``."""
    if loss.grad_fn is not None:
        loss.grad_fn.register_prehook(_record_normalised)
    return loss


def _record_normalised(grad_outputs):
    _NORMALISED_TASKS.add(torch._C._current_graph_task_id())


def take_normalised(task: int) -> bool:
    """Whether backward call ``task`` passed through a :func:`mark_normalised` loss (forgets it)."""
    found = task in _NORMALISED_TASKS
    _NORMALISED_TASKS.discard(task)
    return found
