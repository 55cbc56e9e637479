"""The frames above a distributed layer, traced again by ``torch.compile`` once the layer has a
steady-state record (issue 57, item 6).

A compiled model's first step runs each distributed layer eagerly (one graph break,
:func:`~.steady_call.traced_call`) and leaves its :class:`~.steady_call.SteadyRecord`.  Dynamo cannot
resume a frame broken inside a loop (``BasicGNN.forward``'s loop over its layers): it then runs that
frame as Python and compiles each layer call as its own graphs, whose guards and wrappers cost more
than a small model's layers gain (``GraphSAGE`` at P = 2: about 1.16x the eager step).  So once a
layer leaves its first record, the ``forward`` code of every module above it in the model given to
:func:`~pyg_sparsecomm.distribute` is dropped from dynamo's cache
(:func:`~pyg_sparsecomm.compat.reset_compiled_code`): the next step traces the model's forward again,
through the records without a break, as one graph (about 1.0x eager).  Once per layer: the first
record only.
"""
import weakref
from typing import Any

import torch

from ...compat import reset_compiled_code
from .state import distributed_layers

#: a layer's state -> the ``forward`` codes of the modules above the layer
_ABOVE: "weakref.WeakKeyDictionary[Any, tuple[Any, ...]]" = weakref.WeakKeyDictionary()
#: the layer states whose first record made the frames above them traced again
_RETRACED: "weakref.WeakSet[Any]" = weakref.WeakSet()


def register(module: torch.nn.Module) -> None:
    """Notes the ``forward`` codes of the modules above each distributed layer of ``module``.

    Args:
        module (torch.nn.Module): a model :func:`~pyg_sparsecomm.distribute` converted.
    """
    modules = dict(module.named_modules())
    for name, state in distributed_layers(module):
        parts = name.split(".") if name else []
        above = (modules[".".join(parts[:i])] for i in range(len(parts)))
        codes = (getattr(type(m).forward, "__code__", None) for m in above
                 if type(m).forward is not torch.nn.Module.forward)
        _ABOVE[state] = tuple(dict.fromkeys(c for c in codes if c is not None))


def retrace_above(state: Any) -> None:
    """After an eager call of a compiled layer: if it left the layer's first record, the frames above the
    layer are traced again at their next call (once per layer: a layer recording again, e.g. between
    training and evaluation, never makes dynamo trace the model's forward anew every time).

    Args:
        state (LayerState): the layer's state.
    """
    if state.steady is None or state in _RETRACED:
        return
    _RETRACED.add(state)
    for code in _ABOVE.get(state, ()):
        reset_compiled_code(code)
