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
(:class:`~.port.StaticHalo`).  All of it goes through the layer's :class:`~.port.HaloPort`.

For ``propagate`` the exchange runs in a hook registered with PyG's
:meth:`~torch_geometric.nn.conv.MessagePassing.register_propagate_forward_pre_hook`, which PyG's
``explain``/``decomposed_layers`` setters leave in place.  PyG's generated ``edge_updater`` calls
its pre-hooks only after gathering ``*_j`` (an index check on the owned rows fires first), so the
``edge_updater`` override (:mod:`.call`) calls :func:`with_halo` itself.  An
``"attention"`` aggregation completes ``x`` here too and runs one CSR SpMM per head
(:func:`attention_propagate`).
"""
import math
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...plan.halo_adj import spmm_values
from .aggregation import AdjacencyCache, aggregation_weights
from .call_halos import CallHalos
from .port import HaloPort, Shard


def propagate_sources(conv: MessagePassing, inputs: tuple, call: Shard, halos: CallHalos, port: HaloPort,
                      names: tuple[str, ...]) -> tuple:
    """The propagate forward pre-hook's work on a shard.

    Args:
        conv (MessagePassing): the layer.
        inputs (tuple): ``(edge_index, size, kwargs)`` of its ``propagate`` call.
        call (Shard): the shard of the call.
        halos (CallHalos): the halos of the call.
        port (HaloPort): the layer's port.
        names (tuple[str, ...]): the tensors ``message`` reads at sources.

    Returns ``(edge_index, (owned + halo, owned), kwargs)`` with every source tensor of ``message``
    completed with its halo rows.
    """
    if getattr(conv, "decomposed_layers", 1) > 1:
        raise ValueError(f"{type(conv).__name__}: decomposed_layers={conv.decomposed_layers} (PyG's inference "
                         f"decomposition) splits the source tensors of the messages into feature chunks, which "
                         f"distribute() does only for linear aggregations; set decomposed_layers = 1 (same result)")
    edge_index, size, kwargs = inputs
    size = call.check_propagation(conv, edge_index, size)
    return edge_index, size, with_halo(conv, kwargs, names, call, halos, port, "propagate")


def with_halo(conv: MessagePassing, kwargs: dict[str, Any], names: tuple[str, ...] | list[str], call: Shard,
              halos: CallHalos, port: HaloPort, key: str) -> dict[str, Any]:
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
        if src.size(conv.node_dim) != call.num_owned:
            raise ValueError(f"{type(conv).__name__}: the message reads '{name}_j' from a tensor with "
                             f"{src.size(conv.node_dim)} rows in dimension {conv.node_dim}, but this rank owns "
                             f"{call.num_owned} rows: pass the shard's rows (local.x)")
        first = src.movedim(conv.node_dim, 0)  # (node_rows, inline: the same tensor ops, the same autograd graph)
        rows, moved = first.reshape(first.size(0), math.prod(first.shape[1:])), tuple(first.shape)
        sources.append((name, src, rows, dst, moved))
    if not sources:
        return kwargs
    fetched = fetch_halos(conv, sources, call, halos, port, key)
    out = dict(kwargs)
    for (name, _, rows, dst, moved), halo in zip(sources, fetched, strict=True):
        ext_shape = (rows.size(0) + halo.size(0),) + moved[1:]
        out[name] = (torch.cat([rows, halo], 0).reshape(ext_shape).movedim(0, conv.node_dim), dst)  # (from_node_rows)
    return out


def fetch_halos(conv: MessagePassing, sources: list[tuple[str, Tensor, Tensor, Any, tuple[int, ...]]], call: Shard,
                halos: CallHalos, port: HaloPort, key: str) -> list[Tensor]:
    """The ``[halo_size, width]`` halo rows of each source: kept from earlier in this call, cached
    across calls (:class:`~.port.StaticHalo`, sources needing no gradient), or fetched now in
    one exchange together with the layer's recorded source-module output."""
    found: dict[str, Tensor] = {}
    for name, src, rows, _, _ in sources:
        kept = halos.lookup(src, conv.node_dim)
        if kept is not None:
            found[name] = kept
        elif not rows.requires_grad:
            found[name] = port.static_halo(name, _source(src), rows, call)
    moving, tensors = [], []  # (loops, not comprehensions: no frame per call)
    for name, src, rows, _, _ in sources:
        if name not in found:
            moving.append((name, src, rows))
            tensors.append(rows)
    recorded = halos.recorded if moving and halos.fuse else None  # (CallHalos.take_recorded, inline)
    for entry in halos.entries if recorded is not None else ():
        if entry[0] is recorded:  # exchanged already
            recorded = None
            break
    if recorded is not None and recorded.size(0) == call.num_owned and recorded.is_floating_point():
        for _, src, _ in moving:  # (not one of the sources already)
            if src is recorded:
                break
        else:
            moving.append(("", recorded, recorded))  # fused: exchanged now, kept for propagate
            tensors.append(recorded)
    if moving:
        width = 0
        for t in tensors:
            width += math.prod(t.shape[1:])
        port.state.exchanged_width = (width, tensors[0].element_size())  # (halo_width, inline)
        for (name, src, _), halo in zip(moving, port.exchange_many(tensors, key), strict=True):
            if name:
                halos.add(src, conv.node_dim, halo)
                found[name] = halo
            else:
                halos.add(src, 0, halo)  # (add_fused, inline)
                halos.fused = src
    for name, src, _, _, _ in sources:
        if halos.lookup(src, conv.node_dim) is None:
            halos.add(src, conv.node_dim, found[name])
    out = []
    for name, _, _, _, _ in sources:
        out.append(found[name])
    return out


def _source(value: Any) -> Tensor:
    return value[0] if isinstance(value, (tuple, list)) else value


def attention_propagate(conv: MessagePassing, call: Shard, halos: CallHalos, port: HaloPort,
                        adjacency: AdjacencyCache, edge_index: Tensor, size: Any, kwargs: dict[str, Any],
                        alpha_arg: str) -> Tensor:
    r"""``out[:, h] = A_h x[:, h]`` with ``A_h[i, j] = alpha[e, h]`` over ``[owned | halo]`` rows of
    ``x`` (exchanged as for any ``x_j``): one CSR SpMM per head.

    Shapes:
        - **input:** ``x``: ``[num_owned, heads, C]``, ``alpha``: ``[E, heads]``
        - **output:** ``[num_owned, heads, C]``
    """
    call.check_propagation(conv, edge_index, size)
    x = with_halo(conv, kwargs, ["x"], call, halos, port, "propagate")["x"][0]
    alpha = kwargs[alpha_arg]
    heads = x.size(-2)
    if x.dim() != 3 or conv.node_dim not in (0, -3) or alpha.shape != (edge_index.size(1), heads):
        raise ValueError(f"{type(conv).__name__}: expected x of shape [N, heads, C] and {alpha_arg} of shape "
                         f"[E, heads], got {list(x.shape)} and {list(alpha.shape)}")
    if conv.aggr == "mean":
        value = aggregation_weights(edge_index, alpha, conv.aggr, call.num_owned, x.dtype)
    else:  # (aggregation_weights of a sum, inline: alpha in the wider of its dtype and x's)
        value = alpha.to(torch.promote_types(alpha.dtype, x.dtype) if alpha.is_floating_point() else x.dtype)
    assert value is not None  # alpha is given
    structure, perm = adjacency.ordered(edge_index, call.adj)
    value = value if perm is None else value[perm]  # in CSR order, every head's
    outs = []
    for h in range(heads):  # (a loop: no comprehension frame per call)
        outs.append(spmm_values(structure, value[:, h], x[:, h].contiguous()))
    return torch.stack(outs, dim=1)
