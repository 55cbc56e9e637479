"""What the instance-level ``propagate`` and ``edge_updater`` of a distributed layer
(:class:`~.call.InstanceMethod`) run outside the fast dispatch of a call on a shard (a plain PyG
call, or dynamo's eager fallback): the running :class:`~.call.LayerCall`'s stage, else PyG's.
"""
from typing import Any

from torch_geometric.nn import MessagePassing

from ...compat import pyg_edge_updater, pyg_propagate


def running(conv: MessagePassing) -> Any:
    """``conv``'s running :class:`~.call.LayerCall` on a shard, or ``None`` when this call is plain PyG."""
    calls = conv._sparsecomm.calls
    return calls[-1] if calls else None


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
