r"""The exchanger of a layer's :class:`~.port.HaloPort`: :class:`WatchedExchanger`, whose call's first
exact exchange carries the agreement header of :class:`~.checks.AgreementWatch`.

A steady-state call (the :func:`~.checks.call_key` of the last agreed call) runs no collective but its
halo exchange; its first exchange sends one header row per peer
(:func:`~pyg_sparsecomm.comm.halo.headered_exchange`).  A peer's set flag (a rank whose key changed,
``HaloPort.announce_change``) runs the call's agreed checks on this rank too, then the exchange again.
Under ``torch.compile`` an exact exchange is one op of the traced graph
(:mod:`pyg_sparsecomm.comm.traced_exchange`), which runs this same eager exchange at run time: the
header, a peer's flag and the agreement that follows are unchanged.  Only the port builds one
(``HaloPort.shard``); with :mod:`.port` it is the only module of ``nn/`` that reaches the exchanger.
"""
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...comm import traced_exchange
from ...comm.exchanger import HaloExchanger
from ...comm.group import rank as group_rank
from ...comm.halo import HeaderedPlan, headered_exchange
from ...comm.halo_options import EXACT
from .checks import AgreementWatch


@dataclass(frozen=True, eq=False)
class WatchedExchanger(HaloExchanger):
    """An exchanger whose call's first exact exchange is headered (:class:`~.checks.AgreementWatch`):
    a peer's flag runs the call's agreed checks, then the exchange again.

    Args:
        watch (AgreementWatch, optional): the layer's watch. (default: ``None``)
        watched_options (HaloOptions, optional): the layer's (exact) options. (default: ``None``)
    """
    watch: AgreementWatch | None = None
    watched_options: Any = None
    #: the handle of :meth:`traced` (``""``: none); no field, so that ``bind()``'s copies have none
    handle: ClassVar[str] = ""

    def traced(self) -> "WatchedExchanger":
        """Gives this exchanger a handle of :func:`~pyg_sparsecomm.comm.traced_exchange.register`
        (once): its exact exchanges are then one op of a graph ``torch.compile`` traces."""
        if not self.handle and self.plan.world_size > 1:
            object.__setattr__(self, "handle", traced_exchange.register(self))
        return self

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("handle", None)  # a handle names an exchanger of this process
        state.pop("halo_of", None)  # (bound to this object: made again at first use)
        return state

    def exchange(self, x: Tensor, key: str = "x") -> Tensor:
        """The halo rows of ``x``, the call's first exchange headered; traced, one op that runs this
        same method eagerly (:mod:`pyg_sparsecomm.comm.traced_exchange`)."""
        if self.handle and torch.compiler.is_compiling() and self.options.exact:
            return traced_exchange.halo_exchange(x, self.handle)
        watch = self.watch
        if watch is None or not watch.armed or self.plan.world_size == 1:
            return super().exchange(x, key)
        watch.armed = False
        watched = self.options is EXACT or self.options is self.watched_options  # exact, as armed calls' are
        if (not watched or x.device.type != "cpu" or x.dim() == 0 or math.prod(x.shape[1:]) == 0
                or x.size(0) != self.plan.num_owned):  # (the same on every rank, one owning no rows too)
            return super().exchange(x, key)  # no header: this call's first collective is a plain one
        kept = watch.headered_plan
        if kept is None or kept[0] is not self.plan:
            kept = watch.headered_plan = (self.plan, HeaderedPlan(self.plan, group_rank(self.group), self.group))
        while True:
            halo, flagged = headered_exchange(x, kept[1], self.group)
            watch.headered, watch.recorded = True, (kept[1].send_counts, kept[1].recv_counts, x.shape[1:], x.dtype)
            if not flagged:
                return halo
            try:
                watch.agree()  # raises on every rank, or passes: the announcing rank exchanges next
            except BaseException:
                watch.forget()  # every rank agrees at its next call
                raise

    @cached_property
    def halo_of(self) -> Callable[[Tensor], Tensor]:
        """:meth:`exchange` (a call's first exchange may carry the header), bound once."""
        return self.exchange

    def reduce(self, x_ext: Tensor) -> Tensor:
        """The exact fold; as a call's first collective it turns the watch off for the next call."""
        if self.watch is not None:
            self.watch.taint()
        return super().reduce(x_ext)
