r"""The one object layers and SpMM algorithms ask for halo rows: :class:`HaloExchanger`.

It is bound to what every exchange of one layer call shares -- the shard's
:class:`~pyg_sparsecomm.plan.homogeneous.RankPlan`, the exchange's process group, the layer's
:class:`~pyg_sparsecomm.comm.halo_options.HaloOptions` and its
:class:`~pyg_sparsecomm.comm.halo_options.ExchangeSlots` -- so no caller threads them
one by one.  Behind :meth:`HaloExchanger.exchange` sit the three ways rows travel:

* exact (the default): :func:`~pyg_sparsecomm.comm.halo.halo_exchange`, bitwise the plain
  all-to-allv;
* compressed (``halo_precision``): the same exchange with its codec step
  (:mod:`~pyg_sparsecomm.comm.quantize`);
* pipelined (``staleness=1``): :mod:`~pyg_sparsecomm.comm.stale`.

What stays exact when a layer compresses, by design: exchanges of degrees and other
normalisation statistics (they use :attr:`HaloExchanger.exact`), 1.5D's row all-reduce of
partial sums, tensors that are not floating point, and the cached halos of source tensors
that need no gradient (:class:`~pyg_sparsecomm.nn.runtime.port.StaticHalo`, e.g. the input features): fetched once
and reused every epoch, compressing them would save bytes once but freeze one rounding draw
into every step.
"""
import math
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property, partial
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ..plan.homogeneous import RankPlan
from .exchange_site import ExchangeSite
from .halo import halo_exchange, halo_reduce
from .halo_options import EXACT, ExchangeSlots, HaloOptions
from .stale import is_training, stale_halo_exchange

#: "not given" for :meth:`HaloExchanger.bind` (``None`` is a valid group and a valid slots value)
_KEEP: Any = object()


class HaloExchanger(ExchangeSite):
    r"""Halo exchanges of one shard, under one layer's options.

    Row :math:`k` of the halo is row ``plan.halo_remote_index[k]`` of the owned rows of rank
    ``plan.halo_owner[k]``; :meth:`exchange` returns them for ``x`` (differentiable: the
    backward sends halo gradients back to their owners), :meth:`reduce` is its adjoint.

    Args:
        plan (RankPlan): this rank's plan (which rows it sends and receives).
        group (torch.distributed.ProcessGroup, optional): the exchange's process group; on a
            1.5D grid the grid's column group. (default: :obj:`None`, the default group)
        options (HaloOptions, optional): how rows travel (compressed, stale).
            (default: :obj:`None`, exact)
        slots (ExchangeSlots, optional): the layer's state across calls; needed by
            ``staleness=1`` (the previous step's halos live there). (default: :obj:`None`)

    Shapes:
        - :meth:`exchange`: ``[num_owned, *] -> [halo_size, *]``
        - :meth:`reduce`: ``[num_owned + halo_size, *] -> [num_owned, *]``
    """

    def bind(self, plan: RankPlan = _KEEP, group: dist.ProcessGroup | None = _KEEP,
             options: HaloOptions | None = _KEEP, slots: ExchangeSlots | None = _KEEP) -> "HaloExchanger":
        """This exchanger with the given fields replaced (``self`` when none changes).

        Used where the same layer exchanges over another plan (a 1.5D stage's restricted
        plan) or a layer takes the shard's exchanger with its own options and slots.
        """
        changes: dict[str, Any] = {name: value for name, value in
                   (("plan", plan), ("group", group), ("options", options), ("slots", slots))
                   if value is not _KEEP and value is not getattr(self, name)}
        return replace(self, **changes) if changes else self

    @property
    def exact(self) -> "HaloExchanger":
        """This exchanger without options or slots: exact, synchronous exchanges (degrees,
        cached static halos)."""
        return self.bind(options=EXACT, slots=None)

    @property
    def world_size(self) -> int:
        """Ranks of the partition the plan belongs to (1: nothing is ever exchanged)."""
        return self.plan.world_size

    @property
    def training(self) -> bool:
        """Whether a stale exchange would pipeline now (gradients on, layer in training mode)."""
        return is_training(self.slots)

    def exchange(self, x: Tensor, key: str = "x") -> Tensor:
        r"""The halo rows of ``x`` under :attr:`options`.

        Args:
            x (torch.Tensor): this rank's owned rows.
            key (str, optional): the call site's name within the layer (one stale pipeline per
                key and call, :meth:`ExchangeSlots.call_site`). (default: ``"x"``)

        Shapes:
            - **input:** ``[num_owned, *]``
            - **output:** ``[halo_size, *]``, differentiable like the exact exchange
        """
        options = self.options
        if options.exact:
            return halo_exchange(x, self.plan, self.group)
        if options.staleness:
            return stale_halo_exchange(x, self, key)
        return halo_exchange(x, self.plan, self.group, options.precision, options.grad_precision)

    @cached_property
    def halo_of(self) -> Callable[[Tensor], Tensor]:
        r""":meth:`exchange` of the call site ``"x"`` with the branch on :attr:`options` taken once
        (the exchanger never changes): exact options give
        :func:`~pyg_sparsecomm.comm.halo.halo_exchange` bound to the plan and group, so a caller
        exchanging at every call (an SpMM algorithm) pays no dispatch per call.

        Shapes:
            - **input:** ``[num_owned, *]``
            - **output:** ``[halo_size, *]``, as :meth:`exchange`'s
        """
        if self.options.exact:
            return partial(halo_exchange, plan=self.plan, group=self.group)
        return self.exchange

    def exchange_many(self, tensors: list[Tensor], key: str = "x") -> list[Tensor]:
        """:meth:`exchange` of several tensors in one exchange per dtype.

        The tensors are flattened to rows and concatenated column-wise, so a message function
        reading several source tensors (``x_j``, ``alpha_j``, ...) costs one collective with the
        sum of their widths per row.

        Args:
            tensors (list[torch.Tensor]): ``[num_owned, *]`` tensors, any trailing shapes.
            key (str, optional): the call site's name (suffixed with the dtype). (default: ``"x"``)

        Shapes:
            - **output:** the ``[halo_size, *]`` halo rows of every tensor, in order
        """
        out: list[Tensor | None] = [None] * len(tensors)
        by_dtype: dict[torch.dtype, list[int]] = {}
        for k, t in enumerate(tensors):
            by_dtype.setdefault(t.dtype, []).append(k)
        for dtype, ks in by_dtype.items():
            flat, widths = [], []  # (a loop, not comprehensions: a hot path)
            for k in ks:
                flat.append(tensors[k].reshape(tensors[k].size(0), math.prod(tensors[k].shape[1:])))
                widths.append(flat[-1].size(1))
            rows = flat[0] if len(flat) == 1 else torch.cat(flat, dim=1)
            halo = self.exchange(rows, f"{key}:{dtype}")
            for k, part in zip(ks, torch.split(halo, widths, dim=1), strict=False):
                out[k] = part.reshape((part.size(0),) + tuple(tensors[k].shape[1:]))
        return out  # type: ignore[return-value]

    def reduce(self, x_ext: Tensor) -> Tensor:
        r"""Folds values over ``[owned | halo]`` columns into the owners' rows, always exactly.

        Row :math:`c` of the result is ``x_ext[c]`` plus every peer's ``x_ext`` row of the halo
        column that is this rank's node :math:`c` (e.g. a node's out-degree, whose edges live on
        the ranks owning their targets).  Differentiable; the adjoint of :meth:`exchange`.

        Shapes:
            - **input:** ``[num_owned + halo_size, *]``
            - **output:** ``[num_owned, *]``
        """
        return halo_reduce(x_ext, self.plan, self.group)
