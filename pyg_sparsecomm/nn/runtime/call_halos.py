r"""Halo rows fetched once per layer call, and the fused exchange of attention layers.

A layer's ``edge_updater`` and ``propagate`` may read the same source rows: ``GATv2Conv``
passes ``x = (x_l, x_r)`` to both, so within one call a source tensor already exchanged (the
same object at the same version) reuses its halo (:class:`CallHalos`); autograd then sums the
gradients of both uses and sends them back in one reverse exchange.

``GATConv`` reads different tensors: its ``edge_updater`` reads :math:`\alpha^{src}_j` (width
``heads``), its ``propagate`` reads :math:`x^{src}_j` (width ``heads * C``), and
:math:`\alpha^{src} = \langle x^{src}, a^{src} \rangle` is computed from :math:`x^{src}` before
either runs, so :math:`x^{src}` exists when ``edge_updater`` is called but is not one of its
arguments.  The layer's rule declares where it comes from
(:attr:`~pyg_sparsecomm.nn.rules.registry.LayerRule.fused_source`: the output of ``lin_src``, else
``lin``); a forward hook on that module (:class:`RecordFirstOutput`) keeps its first output of
the call, ``edge_updater`` exchanges ``[alpha_src | x_src]`` rows in ONE all-to-allv (one row
header when compressed: ``heads * C + heads + 4`` bytes per int8 row instead of
``heads * C + heads + 8``), and ``propagate`` reuses the kept halo when its source is that
output (a view of the same memory at the same version).  Anything else, e.g. a subclass editing
``x_src`` before ``propagate``, misses and is exchanged as usual: the reuse is exact or not taken.
A layer whose fused rows went unused in a call stops fusing (the first call sent them for nothing).
"""
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...compat import tensor_version


class CallHalos:
    """The halos of one layer call: ``(tensor, version, node_dim, halo rows)``, plus the recorded
    output of the layer's fused source module (a part of its
    :class:`~pyg_sparsecomm.nn.runtime.call.LayerCall`, gone when the call ends).

    Args:
        fuse (bool, optional): exchange the recorded output with ``edge_update``'s sources (the
            layer's earlier calls used the fused rows). (default: ``True``)
    """

    def __init__(self, fuse: bool = True) -> None:
        self.entries: list[tuple[Tensor, object, int, Tensor]] = []
        self.recorded: Tensor | None = None
        self.fused: Tensor | None = None  # the recorded output, once exchanged in this call
        self.fused_used = False
        self.fuse = fuse

    def unused_fusion(self) -> bool:
        """Whether this call sent fused rows for nothing (the same code on every rank: every rank
        then stops fusing together)."""
        return self.fused is not None and not self.fused_used

    def record(self, output: Any) -> None:
        if self.recorded is None and isinstance(output, Tensor) and output.dim() == 2:
            self.recorded = output

    def take_recorded(self) -> Tensor | None:
        """The recorded output to exchange along, unless it was exchanged already."""
        t = self.recorded
        if t is None or not self.fuse:
            return None
        for entry in self.entries:  # (a loop: no generator frame per call)
            if entry[0] is t:
                return None
        return t

    def add_fused(self, recorded: Tensor, halo: Tensor) -> None:
        """Keeps the halo of the recorded output, exchanged along with the call's sources."""
        self.add(recorded, 0, halo)
        self.fused = recorded

    def add(self, src: Tensor, node_dim: int, halo: Tensor) -> None:
        """Keeps ``halo`` (``[halo_size, width]`` rows of ``src`` with ``node_dim`` first) for the call."""
        self.entries.append((src, tensor_version(src), node_dim % src.dim(), halo))

    def lookup(self, src: Tensor, node_dim: int) -> Tensor | None:
        """The kept halo rows of ``src`` (``[halo_size, width]``), or ``None``."""
        node_dim %= src.dim()
        now = tensor_version(src)
        for t, version, dim, halo in self.entries:
            if now != version:
                continue
            if (src is t and node_dim == dim) or (dim == 0 and node_dim == 0 and _same_rows(src, t)):
                self.fused_used = self.fused_used or t is self.fused
                return halo
        return None


def _same_rows(src: Tensor, t: Tensor) -> bool:
    """Whether ``src`` is a view of ``t`` over all of its memory, row for row.

    The test is structural (``src._base is t``, offsets and shapes), not by address: every rank
    must take the same decision, the exchanges being collectives, and a rank owning no rows has
    no address to compare."""
    if not (src._base is t and src.dtype == t.dtype and src.size(0) == t.size(0) and src.numel() == t.numel()
            and src.storage_offset() == t.storage_offset()):
        return False
    for u in (src, t):  # row-major strides by the shape alone (is_contiguous is true of any empty tensor)
        expected, stride = [], 1
        for n in reversed(u.shape):
            expected.append(stride)
            stride *= n
        if u.stride() != tuple(reversed(expected)):
            return False
    return True


class RecordFirstOutput:
    """Forward hook on a layer's fused source module: hands its output to the layer's running call
    on a shard (picklable, like the layer's other hooks)."""

    def __init__(self, conv: MessagePassing) -> None:
        self.conv = conv

    def __call__(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if torch.compiler.is_compiling():
            if self.conv._sparsecomm.tracing is None:  # a traced steady-state call exchanges its sources itself
                _record_eagerly(self, output)
            return
        calls = self.conv._sparsecomm.calls
        call = calls[-1] if calls else None
        if call is not None and isinstance(output, Tensor) and output.dim() == 2:  # (CallHalos.record, inline)
            halos = call.halos
            if halos is None:  # (LayerCall.call_halos, inline)
                halos = call.halos = CallHalos(call.state.fuse)
            if halos.recorded is None:
                halos.recorded = output


@torch.compiler.disable  # per-call Python state, like the layer's other hooks
def _record_eagerly(hook: RecordFirstOutput, output: Any) -> None:
    hook(hook.conv, (), output)
