"""What every halo exchange of one layer call shares: :class:`ExchangeSite`.

The plan, process group, options and slots of a call site, as one frozen record.  It sits below
both ways rows travel (:mod:`~pyg_sparsecomm.comm.halo` takes its plan and group,
:mod:`~pyg_sparsecomm.comm.stale` all four) and below
:class:`~pyg_sparsecomm.comm.exchanger.HaloExchanger`, which is an :class:`ExchangeSite` with the
exchange methods, so no module of ``comm/`` reaches up for the exchanger.
"""
from dataclasses import dataclass

import torch.distributed as dist

from ..plan.homogeneous import RankPlan
from .halo_options import EXACT, ExchangeSlots, HaloOptions


@dataclass(frozen=True, eq=False)
class ExchangeSite:
    """The plan, process group, options and slots of one call site's exchanges.

    Args:
        plan (RankPlan): this rank's plan (which rows it sends and receives).
        group (torch.distributed.ProcessGroup, optional): the exchange's process group; on a
            1.5D grid the grid's column group. (default: :obj:`None`, the default group)
        options (HaloOptions, optional): how rows travel (compressed, stale).
            (default: :obj:`None`, exact)
        slots (ExchangeSlots, optional): the layer's state across calls; needed by
            ``staleness=1`` (the previous step's halos live there). (default: :obj:`None`)
    """
    plan: RankPlan
    group: dist.ProcessGroup | None = None
    options: HaloOptions = EXACT
    slots: ExchangeSlots | None = None

    def __post_init__(self) -> None:
        if self.options is None:  # frozen: set through object.__setattr__
            object.__setattr__(self, "options", EXACT)
