"""Making one PyG ``MessagePassing`` layer distributed, in place: :func:`attach`.

The hooks it installs, and why each is needed, are listed in :mod:`.call`; what the layer keeps
between calls is its :class:`~.state.LayerState` (``conv._sparsecomm``), whose
:class:`~.plan.LayerPlan` is compiled here, once.
"""
from torch_geometric.nn import MessagePassing

from .call import enter, install_overrides, leave
from .call_halos import RecordFirstOutput
from .checks import CACHE_ATTRIBUTES
from .plan import DistributedSettings
from .state import LayerState, distributed_layers
from .steady_call import SKIPPED_WHEN_TRACED

__all__ = ["attach", "distributed_layers", "DistributedSettings", "LayerState"]

for _hook in (enter, leave):  # a traced steady-state call runs neither (see steady_call)
    setattr(_hook, SKIPPED_WHEN_TRACED, True)


def attach(conv: MessagePassing, settings: DistributedSettings, own: bool = False) -> None:
    """Makes ``conv`` run distributed when called with a ``HaloAdj``.

    Idempotent: a second call replaces the settings, unless the first was ``own`` (a layer built
    distributed, like ``DistributedGCNConv``, keeps its constructor's settings inside a
    ``distribute()``d model).  The first empties what PyG's ``cached=True`` layers keep
    (``_cached_edge_index``, ...): a call before ``distribute()`` filled it from the graph of that
    call, not from the shard the layer runs on.

    Args:
        conv (MessagePassing): the layer.
        settings (DistributedSettings): how it runs.
        own (bool, optional): the settings are the layer's own constructor's. (default: ``False``)
    """
    if hasattr(conv, "_sparsecomm"):
        if not conv._sparsecomm.own_settings:
            conv._sparsecomm.settings = settings
        return
    conv._sparsecomm = LayerState(conv, settings, own)
    for name in CACHE_ATTRIBUTES:  # a cached=True layer called before (on a whole graph): its shard's comes next
        if getattr(conv, name, None) is not None:
            setattr(conv, name, None)
    conv.register_forward_pre_hook(enter, with_kwargs=True)
    conv.register_forward_hook(leave, always_call=True)
    install_overrides(conv)
    conv._sparsecomm.installed = True
    fused = conv._sparsecomm.plan.fused_source
    if fused is not None:
        getattr(conv, fused).register_forward_hook(RecordFirstOutput(conv))
