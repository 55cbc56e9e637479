"""What the gradient synchronisation of ``distribute()`` and the loss of ``distributed_loss`` tell
each other, without importing each other: which parameters are summed over ranks in backward,
and which backward calls started from a loss normalised by the global row count."""
import weakref
from collections import deque

from torch import Tensor

from ..compat import current_graph_task_id

#: ``id(parameter) -> (weakref to it, weakref to the object summing its gradient)``
_SYNCED: dict[int, tuple[weakref.ref, weakref.ref]] = {}
#: the latest graph tasks (backward calls) whose root went through :func:`mark_normalised`: kept,
#: not consumed, since every ``distribute()``d part of a model (nested ones too) asks at the end of
#: the same backward; the oldest are forgotten (backward calls running at once are few)
_NORMALISED_TASKS: deque[int] = deque(maxlen=64)


def register_synced(param: Tensor, owner: object) -> None:
    """Marks ``param``'s gradient as summed over ranks in backward by ``owner`` (while both live)."""
    key = id(param)
    _SYNCED[key] = (weakref.ref(param, lambda _: _SYNCED.pop(key, None)), weakref.ref(owner))


def is_synced(param: Tensor) -> bool:
    """Whether ``distribute()`` already sums ``param``'s gradient over ranks after every backward."""
    refs = _SYNCED.get(id(param))
    return refs is not None and refs[0]() is param and refs[1]() is not None


def mark_normalised(loss: Tensor) -> Tensor:
    """Records, when backward passes through ``loss``, that the loss was normalised by the global
    row count (:func:`~pyg_sparsecomm.distributed_loss` calls it); returns ``loss``."""
    if loss.grad_fn is not None:
        loss.grad_fn.register_prehook(_record_normalised)
    return loss


def _record_normalised(grad_outputs):
    task = current_graph_task_id()
    if task not in _NORMALISED_TASKS:
        _NORMALISED_TASKS.append(task)


def was_normalised(task: int) -> bool:
    """Whether backward call ``task`` passed through a :func:`mark_normalised` loss."""
    return task in _NORMALISED_TASKS
