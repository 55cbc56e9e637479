"""The layer's interception points that are not forward hooks: :class:`InstanceMethod` (the
instance-level ``propagate`` and ``edge_updater``), :class:`EagerCall` (``conv._compiled_call_impl``)
and :func:`install_overrides`; on a shard each hands over to the running
:class:`~.call.LayerCall` (``conv._sparsecomm.calls``), else to PyG (see :mod:`.call`).
"""
from typing import Any

import torch
from torch_geometric.nn import MessagePassing

from ...compat import compiled_call, module_call, pyg_edge_updater, pyg_propagate, set_compiled_call
from .steady_call import traced_call, traced_method


def running(conv: MessagePassing) -> Any:
    """``conv``'s running :class:`~.call.LayerCall` on a shard, or ``None`` when this call is plain PyG."""
    calls = conv._sparsecomm.calls
    return calls[-1] if calls else None


class InstanceMethod:
    """``conv.propagate`` / ``conv.edge_updater`` of a distributed layer: a picklable bound call."""

    def __init__(self, conv: MessagePassing, function, traced: bool = False) -> None:
        self.conv, self.function, self.traced = conv, function, traced  # traced: the propagate override

    def __call__(self, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
        state = self.conv._sparsecomm
        if torch.compiler.is_compiling() or state.tracing is not None:  # (dynamo fell back)
            return traced_method(self, edge_index, size, kwargs)
        call = state.calls[-1] if state.calls else None
        if call is None:  # plain PyG
            return self.function(self.conv, edge_index, size, **kwargs)
        if self.traced:  # propagate on a shard: the call's propagate stage
            return call.propagate(edge_index, size, kwargs)
        edge_index, size, kwargs = call.edge_update(edge_index, size, kwargs)  # edge_updater: sources first
        return pyg_edge_updater(self.conv)(edge_index, size=size, **kwargs)


class EagerCall:
    """``conv._compiled_call_impl`` of a distributed layer (``Module.__call__`` runs it in place of
    ``conv._call_impl``): traced, :func:`~.steady_call.traced_call`; eagerly, the layer's call."""

    def __init__(self, conv: MessagePassing) -> None:
        self.conv = conv
        self.call = module_call(conv)  # bound once

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return traced_call(self.conv, args, kwargs)
        return self.call(*args, **kwargs)


def propagate(conv: MessagePassing, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
    """The ``propagate`` override: the call's propagate stage on a shard, else PyG's ``propagate``."""
    call = running(conv)
    return pyg_propagate(conv)(edge_index, size=size, **kwargs) if call is None else \
        call.propagate(edge_index, size, kwargs)


def edge_updater(conv: MessagePassing, edge_index: Any, size: Any = None, **kwargs: Any) -> Any:
    """The ``edge_updater`` override: PyG's, on a shard with the sources completed first."""
    call = running(conv)
    if call is not None:
        edge_index, size, kwargs = call.edge_update(edge_index, size, kwargs)
    return pyg_edge_updater(conv)(edge_index, size=size, **kwargs)


def install_overrides(conv: MessagePassing) -> None:
    """Sets ``conv.propagate`` and ``conv.edge_updater`` to the distributed versions unless they
    are (idempotent), and :class:`EagerCall` unless a call implementation is set (the user's
    ``conv.compile()``).  ``Module.__getstate__`` drops it from copies, whose first call sets it
    again: a copy compiled before any call traces into its layers as without it."""
    for name, function in (("propagate", propagate), ("edge_updater", edge_updater)):
        current_method = conv.__dict__.get(name)
        if not (isinstance(current_method, InstanceMethod) and current_method.conv is conv):
            setattr(conv, name, InstanceMethod(conv, function, traced=function is propagate))
    if compiled_call(conv) is None:
        set_compiled_call(conv, EagerCall(conv))
