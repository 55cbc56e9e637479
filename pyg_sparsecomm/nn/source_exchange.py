r"""The source tensors of a layer's messages, completed with halo rows: PyG's propagate and
edge-update pre-hooks.

On a shard a layer propagates over a local ``edge_index`` whose targets are the owned rows and
whose sources are ``[owned | halo]`` columns.  Every tensor its ``message`` (or ``edge_update``)
reads at sources (``x_j``, ``alpha_j``, ``key_j``, ...) is passed as ``(cat[owned, halo], owned)``
and the call propagates over ``size = (owned + halo, owned)``: PyG's own code then gathers, softmaxes
and aggregates exactly a target's in-edges, which its owner holds.  The halo rows of all of a call's
sources arrive in one all-to-allv (one per dtype), after the layer's own transform, so bytes per
row are the transformed widths; a source already exchanged in the call reuses its halo
(:mod:`.call_halos`), a source needing no gradient that did not change is fetched once
(:class:`~.shard_context.StaticHalo`).

For ``propagate`` the exchange runs in a hook registered with PyG's
:meth:`~torch_geometric.nn.conv.MessagePassing.register_propagate_forward_pre_hook`, which PyG's
``explain``/``decomposed_layers`` setters leave in place.  PyG's generated ``edge_updater`` calls
its pre-hooks only after gathering ``*_j`` (an index check on the owned rows fires first), so the
``edge_updater`` override (:mod:`.overrides`) calls :func:`exchange_edge_update_sources` itself.
"""
import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ..compat import edge_update_arguments, message_arguments
from . import shard_context
from .linear_aggregation import from_node_rows, node_rows

if TYPE_CHECKING:
    from .distributed_layer import LayerState


def running(conv: MessagePassing) -> shard_context.ShardContext | None:
    """The shard ``conv`` is running on, or ``None`` when this call is plain PyG."""
    return shard_context.current() if conv._sparsecomm.active else None


def source_names(arg_names: list[str]) -> list[str]:
    """The tensors read at sources: ``x`` of ``x_j``, ..."""
    return sorted({a[:-2] for a in arg_names if a.endswith("_j")})


@torch.compiler.disable
def exchange_propagate_sources(conv: MessagePassing, inputs: tuple) -> tuple | None:
    """PyG's propagate forward pre-hook of a distributed layer.

    Args:
        conv (MessagePassing): the layer.
        inputs (tuple): ``(edge_index, size, kwargs)`` of its ``propagate`` call.

    Returns ``(edge_index, (owned + halo, owned), kwargs)`` with every source tensor of ``message``
    completed with its halo rows, or ``None`` (plain PyG) off a shard.
    """
    context = running(conv)
    if context is None:
        return None
    if getattr(conv, "decomposed_layers", 1) > 1:
        raise ValueError(f"{type(conv).__name__}: decomposed_layers={conv.decomposed_layers} (PyG's inference "
                         f"decomposition) splits the source tensors of the messages into feature chunks, which "
                         f"distribute() does only for linear aggregations; set decomposed_layers = 1 (same result)")
    edge_index, size, kwargs = inputs
    size = check_call(conv, edge_index, size, context)
    return edge_index, size, with_halo(conv, kwargs, source_names(message_arguments(conv)), context, "propagate")


def exchange_edge_update_sources(conv: MessagePassing, edge_index: Any, size: Any, kwargs: dict[str, Any],
                                 context: shard_context.ShardContext) -> tuple:
    """As :func:`exchange_propagate_sources`, for the sources ``edge_update`` reads; called by the
    ``edge_updater`` override (:mod:`.overrides`): PyG's generated ``edge_updater`` runs its
    pre-hooks after gathering ``*_j``, too late to complete the sources.

    Args:
        conv (MessagePassing): the layer.
        edge_index (Tensor): the local edge index.
        size (tuple, optional): the call's size.
        kwargs (dict): the ``edge_updater`` arguments.
        context (ShardContext): the shard the call runs on.
    """
    size = check_call(conv, edge_index, size, context)
    names = source_names(edge_update_arguments(conv))
    return edge_index, size, with_halo(conv, kwargs, names, context, "edge_updater")


def with_halo(conv: MessagePassing, kwargs: dict[str, Any], names: list[str],
               context: shard_context.ShardContext, key: str) -> dict[str, Any]:
    """``kwargs`` where every tensor read at sources is ``(cat[owned, halo], targets)``; the halo
    rows of all of them arrive in one all-to-allv (one per dtype), with the recorded output of the
    layer's source module (``GATConv``'s ``x_src``, see :mod:`.call_halos`); tensors whose halo this
    call already fetched reuse it."""
    sources: list[tuple[str, Tensor, Tensor, Any, tuple[int, ...]]] = []
    for name in names:
        value = kwargs.get(name)
        src, dst = value if isinstance(value, (tuple, list)) else (value, value)
        if not isinstance(src, Tensor):
            continue
        if src.size(conv.node_dim) != context.num_owned:
            raise ValueError(f"{type(conv).__name__}: the message reads '{name}_j' from a tensor with "
                             f"{src.size(conv.node_dim)} rows in dimension {conv.node_dim}, but this rank owns "
                             f"{context.num_owned} rows: pass the shard's rows (local.x)")
        rows, moved = node_rows(src, conv.node_dim)
        sources.append((name, src, rows, dst, moved))
    if not sources:
        return kwargs
    halos = fetch_halos(conv, sources, context, key)
    out = dict(kwargs)
    for (name, _, rows, dst, moved), halo in zip(sources, halos, strict=True):
        ext_shape = (rows.size(0) + halo.size(0),) + moved[1:]
        out[name] = (from_node_rows(torch.cat([rows, halo], 0), ext_shape, conv.node_dim), dst)
    return out


def fetch_halos(conv: MessagePassing, sources: list[tuple[str, Tensor, Tensor, Any, tuple[int, ...]]],
                 context: shard_context.ShardContext, key: str) -> list[Tensor]:
    """The ``[halo_size, width]`` halo rows of each source: kept from earlier in this call, cached
    across calls (:class:`~.shard_context.StaticHalo`, sources needing no gradient), or fetched now in
    one exchange together with the layer's recorded source-module output."""
    state: LayerState = conv._sparsecomm
    call = state.call_halos
    halos: dict[str, Tensor] = {}
    for name, src, rows, _, _ in sources:
        kept = call.lookup(src, conv.node_dim)
        if kept is not None:
            halos[name] = kept
        elif not rows.requires_grad:
            halos[name] = state.static_halo.fetch(name, _source(src), rows, context)
    moving = [(name, src, rows) for name, src, rows, _, _ in sources if name not in halos]
    recorded = call.take_recorded() if moving else None
    if (recorded is not None and recorded.size(0) == context.num_owned and recorded.is_floating_point()
            and not any(src is recorded for _, src, _ in moving)):
        moving.append(("", recorded, recorded))  # fused: exchanged now, kept for propagate
    if moving:
        tensors = [rows for _, _, rows in moving]
        state.exchanged_width = (sum(math.prod(r.shape[1:]) for r in tensors), tensors[0].element_size())
        fetched = state.exchanger(context).exchange_many(tensors, key)
        for (name, src, _), halo in zip(moving, fetched, strict=True):
            if name:
                call.add(src, conv.node_dim, halo)
                halos[name] = halo
            else:
                call.add_fused(src, halo)
    for name, src, _, _, _ in sources:
        if call.lookup(src, conv.node_dim) is None:
            call.add(src, conv.node_dim, halos[name])
    return [halos[name] for name, _, _, _, _ in sources]


def _source(value: Any) -> Tensor:
    return value[0] if isinstance(value, (tuple, list)) else value


def check_call(conv: MessagePassing, edge_index: Any, size: Any, context: shard_context.ShardContext) -> tuple:
    if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
        raise ValueError(f"{type(conv).__name__} turned the local edge_index into a {type(edge_index).__name__} "
                         f"before propagating; distribute() supports layers that propagate over edge_index")
    if size is not None and size[1] not in (None, context.num_owned):
        raise ValueError(f"{type(conv).__name__} propagates with size={tuple(size)}, but this rank owns "
                         f"{context.num_owned} target rows")
    return (context.num_cols, context.num_owned)


