"""The one entry point layers use to fetch halo rows, honouring a layer's :class:`HaloOptions`.

Exact options (the default) go straight to :func:`~pyg_sparsecomm.comm.halo.halo_exchange`, so
results are bitwise those of the plain exchange.  Compressed payloads go through
:func:`~pyg_sparsecomm.comm.halo.halo_exchange`'s codec step, pipelined ones through :mod:`pyg_sparsecomm.comm.stale`.
Exchanges of degrees and other normalisation statistics never come here: they stay exact.

What stays exact when a layer compresses, by design: exchanges that do not come through here
(degrees of the normalisations, 1.5D's row all-reduce of partial sums), tensors that are not
floating point, and the cached halos of source tensors that need no gradient
(``nn.shard_context.StaticHalo``, e.g. the input features): fetched once and reused every
epoch, compressing them would save bytes once but freeze one rounding draw into every step.
"""
import math

import torch
import torch.distributed as dist
from torch import Tensor

from ..plan import RankPlan
from .halo import halo_exchange
from .halo_options import ExchangeSlots, HaloOptions


def halo_exchange_with(x: Tensor, plan: RankPlan, group: dist.ProcessGroup | None = None,
                       options: HaloOptions | None = None, slots: ExchangeSlots | None = None,
                       key: str = "x") -> Tensor:
    """:func:`~pyg_sparsecomm.comm.halo.halo_exchange` under ``options``.

    Args:
        x: ``[num_owned, ...]`` owned rows.
        plan: this rank's plan.
        group: the exchange's process group.
        options: the layer's :class:`HaloOptions` (``None``: exact).
        slots: the layer's state across calls (needed by ``staleness``).
        key: the call site's name within the layer (one pipeline per key).

    Returns:
        the ``[halo_size, ...]`` halo rows, differentiable like the exact exchange.
    """
    if options is None or options.exact:
        return halo_exchange(x, plan, group)
    if options.staleness:
        from .stale import stale_halo_exchange
        if slots is None:
            raise ValueError("staleness needs the layer's ExchangeSlots (the previous step's halos live there)")
        return stale_halo_exchange(x, plan, group, options, slots, key)
    return halo_exchange(x, plan, group, options.precision, options.grad_precision)


def halo_exchange_many(tensors: list[Tensor], plan: RankPlan, group: dist.ProcessGroup | None = None,
                       options: HaloOptions | None = None, slots: ExchangeSlots | None = None,
                       key: str = "x") -> list[Tensor]:
    """:func:`halo_exchange_with` of several ``[num_owned, ...]`` tensors in one exchange per dtype.

    The tensors are flattened to rows and concatenated column-wise, so a message function
    reading several source tensors (``x_j``, ``alpha_j``, ...) costs one collective with the
    sum of their widths per row.  Returns the halo rows of every tensor, in order.
    """
    out: list[Tensor | None] = [None] * len(tensors)
    by_dtype: dict = {}
    for k, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(k)
    for dtype, ks in by_dtype.items():
        flat = [tensors[k].reshape(tensors[k].size(0), math.prod(tensors[k].shape[1:])) for k in ks]
        widths = [f.size(1) for f in flat]
        rows = flat[0] if len(flat) == 1 else torch.cat(flat, dim=1)
        halo = halo_exchange_with(rows, plan, group, options, slots, f"{key}:{dtype}")
        for k, part in zip(ks, torch.split(halo, widths, dim=1), strict=False):
            out[k] = part.reshape((part.size(0),) + tuple(tensors[k].shape[1:]))
    return out  # type: ignore[return-value]
