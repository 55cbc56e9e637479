"""What a distributed layer keeps between calls: :class:`LayerState` (``conv._sparsecomm``).

Everything that lives for one call only (the shard, the halos fetched, the normalisation, the
``Linear`` modules moved) is the call's :class:`~pyg_sparsecomm.nn.runtime.call.LayerCall`.
"""
from collections.abc import Iterator
from typing import Any

import torch
from torch_geometric.nn import MessagePassing

from ...algorithms.choice import CostRow
from ...comm.halo_options import ExchangeSlots
from .aggregation import AdjacencyCache, Narrowing
from .cached_spmm import CachedSpMM
from .checks import CheckedPlan
from .plan import DistributedSettings, LayerPlan, compile_plan
from .port import HaloPort


class LayerState:
    """What one distributed layer keeps between calls.

    Args:
        conv (MessagePassing): the layer.
        settings (DistributedSettings): how it runs.
        own (bool, optional): the settings are the layer's own constructor's
            (``DistributedGCNConv``): ``distribute()`` keeps them. (default: ``False``)
    """

    #: (class defaults too: a state pickled before they existed has none)
    steady: Any = None
    tracing: Any = None
    recording = False
    installed = False
    narrowing: Any = None
    normalised: Any = None

    def __init__(self, conv: MessagePassing, settings: DistributedSettings, own: bool = False) -> None:
        self.settings = settings
        self.own_settings = own
        self.plan: LayerPlan = compile_plan(conv)
        # what the layer found out, read by summary(), DistributedGCNConv and checkpoints
        self.exchange_slots = ExchangeSlots()  #: state of the stale exchanges across calls
        self.chosen_algorithm: str | None = None if settings.algorithm == "auto" else settings.algorithm
        self.cost_report: list[CostRow] = []  #: ``"auto"``'s predictions
        self.exact_cost_report: list[CostRow] = []  #: the same priced with exact halos
        self.sync_cost_report: list[CostRow] = []  #: the same bytes exchanged synchronously
        #: ``(columns, element size)`` of the last exchanged rows (summary()'s compressed-bytes line)
        self.exchanged_width: tuple[int, int] | None = None
        self.cached_spmm = CachedSpMM()  #: the SpMM a ``cached=True`` layer built on its first call
        self.port = HaloPort(self)  # exchanger, static halos, SpMM algorithms (see port)
        self.adjacency = AdjacencyCache()  # the CSR of the last local graph propagated over
        self.checked_plan = CheckedPlan()  # the plan the first-use check passed on (see first_use)
        self.cached_key: tuple | None = None  # the shard a cached=True layer filled its cache on
        self.fuse = True  # False once a call's fused source rows went unused (see call_halos)
        #: the active calls of the layer, innermost last (``None``: a plain PyG call)
        self.calls: list[Any] = []
        #: the last eager call's :class:`~.steady_call.SteadyRecord` (``None``: none reproduces it)
        self.steady: Any = None
        #: the record a traced call runs (set while dynamo traces its ``forward``)
        self.tracing: Any = None
        #: the running eager call leaves a record (it runs under ``torch.compile``)
        self.recording = False
        #: the call overrides are installed on this object (a copy's first call installs them again)
        self.installed = False
        #: the layer's narrowing ``Linear`` modules and their stand-ins (see aggregation.Narrowing)
        self.narrowing = Narrowing()
        #: the last normalised graph of a call, reused while its inputs are the same (see normalisation)
        self.normalised: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "calls": [], "fuse": True, "steady": None, "tracing": None, "recording": False,
                "installed": False, "normalised": None}

    def forget(self) -> None:
        """Drops every tensor the layer kept across calls (a move to another device, a reset of its
        parameters): the next call builds them again."""
        self.adjacency = AdjacencyCache()
        self.steady = None
        self.normalised = None
        self.port.forget()

    def forget_spmm(self) -> None:
        """Drops the SpMM a ``cached=True`` layer keeps (it releases an ``"rdma"`` engine's lease)."""
        self.port.forget_spmm()


def distributed_layers(module: torch.nn.Module) -> Iterator[tuple[str, LayerState]]:
    """``(name, state)`` of every distributed layer in ``module`` (made by ``distribute()`` or
    built distributed, as ``DistributedGCNConv``), in ``named_modules()`` order.

    Args:
        module (torch.nn.Module): a model.
    """
    for name, child in module.named_modules():
        state = getattr(child, "_sparsecomm", None)
        if isinstance(state, LayerState):
            yield name, state
