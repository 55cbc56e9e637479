r"""The one port through which :mod:`pyg_sparsecomm.nn` moves halo rows.

Every row a distributed layer sends or receives goes through here: the halos of the source
tensors of its messages (:meth:`HaloPort.exchange_many`), the halo of a source needing no gradient,
fetched once (:meth:`HaloPort.static_halo`), the distributed SpMM of a linear aggregation
(:meth:`HaloPort.spmm`, whose algorithm exchanges through the exchanger the port gives it), the
degrees of a normalisation (:meth:`Shard.halo`, :meth:`Shard.fold`) and the source types of a
heterogeneous shard (:func:`exchange_rows`).  Nothing else in ``nn/`` imports
:mod:`~pyg_sparsecomm.comm.exchanger` or builds an SpMM algorithm, but the port's exchanger
(:mod:`.watched_exchanger`).

A layer's :class:`HaloPort` keeps what persists across its calls: the exchanger of the shard it
last ran on (the group checked once per shard; its first exchange of a call headered,
:class:`~.watched_exchanger.WatchedExchanger`), stale-exchange slots, static halos, the SpMM
algorithm chosen and the one last built (while the aggregation adjacency and exchanger are the
same), and ``summary()``'s.
"""
import copy
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ...algorithms import SpMMAlgorithm, algorithm_class
from ...algorithms.choice import choose_algorithm
from ...algorithms.settings import exchange_group
from ...comm.exchanger import HaloExchanger
from ...comm.group import host_all_reduce, world_size
from ...comm.group import rank as group_rank
from ...comm.halo import announce_rows, headered_counts
from ...compat import tensor_version
from ...plan.halo_adj import HaloAdj
from ...plan.homogeneous import RankPlan
from ...plan.relation_adj import RelationAdj
from .cached_spmm import CachedSpMM
from .checks import AgreementWatch
from .plan import DistributedSettings
from .watched_exchanger import WatchedExchanger


@dataclass
class Shard:
    """The shard one distributed layer call runs on, as its halo traffic sees it.

    Args:
        adj (HaloAdj): the block row the layer was called with.
        exchanger (HaloExchanger): the shard's exact exchanger (its plan and the group of the halo
            exchanges, 1.5D: the grid's column group).
        edge_index (Tensor): ``adj`` as a local ``[2, nnz]`` edge index (sources first).
        world (int, optional): ranks of the exchange group. (default: ``2``: collectives run)
        memo (dict, optional): per-call results keyed by the identity of their (live) inputs
            (e.g. a Laplacian needed twice). (default: ``{}``)
    """
    adj: HaloAdj
    exchanger: HaloExchanger
    edge_index: Tensor
    world: int = 2
    memo: dict[tuple, object] = field(default_factory=dict)
    #: the call's degree normalisation (a :class:`~.normalisation.CallNormalisation`, set by its layer call)
    normalisation: Any = None

    def __post_init__(self) -> None:
        self.plan: RankPlan = self.adj.plan
        self.group: dist.ProcessGroup | None = self.exchanger.group
        self.num_owned: int = self.adj.num_owned
        self.num_cols: int = self.adj.num_cols

    def check_propagation(self, conv: torch.nn.Module, edge_index: Any, size: Any) -> tuple[int, int]:
        """The ``size`` of a ``propagate`` of ``conv`` over this shard's local graph,
        ``(owned + halo, owned)``, after checking the call propagates over it.

        Args:
            conv (MessagePassing): the layer.
            edge_index (Tensor): the graph it propagates over.
            size (tuple or None): the size it passes (``None``: none).
        """
        if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
            raise ValueError(f"{type(conv).__name__} turned the local edge_index into a {type(edge_index).__name__} "
                             f"before propagating; distribute() supports layers that propagate over edge_index")
        if size is not None and size[1] not in (None, self.num_owned):
            raise ValueError(f"{type(conv).__name__} propagates with size={tuple(size)}, but this rank owns "
                             f"{self.num_owned} target rows")
        return (self.num_cols, self.num_owned)

    def halo(self, rows: Tensor) -> Tensor:
        """The halo rows of ``rows``, exchanged exactly.

        Shapes:
            - **input:** ``[num_owned, *]``
            - **output:** ``[halo_size, *]``
        """
        return self.exchanger.exchange(rows)

    def fold(self, rows: Tensor) -> Tensor:
        """``rows`` over ``[owned | halo]`` columns folded into their owners' rows (the adjoint of
        :meth:`halo`), exactly.

        Shapes:
            - **input:** ``[num_owned + halo_size, *]``
            - **output:** ``[num_owned, *]``
        """
        return self.exchanger.reduce(rows)


def shard_of(adj: HaloAdj, group: dist.ProcessGroup | None) -> Shard:
    """A :class:`Shard` of ``adj`` exchanging over ``group`` (no layer's settings).

    Args:
        adj (HaloAdj): a shard's adjacency.
        group (ProcessGroup or None): the process group of the exchanges (``None``: the default group).
    """
    return Shard(adj, HaloExchanger(adj.plan, group), adj.edge_index(), world_size(group))


def exchange_rows(plan: RankPlan, group: dist.ProcessGroup | None, tensors: list[Tensor],
                  key: str = "x") -> list[Tensor]:
    """The exact halo rows of each of ``tensors`` over ``plan``, in one exchange per dtype (the
    source types of a heterogeneous shard).

    Args:
        plan (RankPlan): the source type's plan.
        group (ProcessGroup or None): the process group of the exchanges (``None``: the default group).
        tensors (list[Tensor]): owned rows, any trailing shapes.
        key (str, optional): the call site's name. (default: ``"x"``)
    """
    return HaloExchanger(plan, group).exchange_many(tensors, key)


def _all_ranks(flag: bool, shard: Shard) -> bool:
    """Whether ``flag`` holds on every rank of the shard's group (host-side, no device wait)."""
    if shard.world == 1:
        return flag
    if (watch := getattr(shard.exchanger, "watch", None)) is not None:
        watch.taint()  # if it is the call's first collective: the next call agrees
    return bool(host_all_reduce([int(flag)], dist.ReduceOp.MIN, shard.group)[0])


class StaticHalo:
    """Halo rows of source tensors that need no gradient and did not change since the previous
    call (a model's input features): fetched once per layer, then reused.

    Unchanged: the same object at the same version on the same plan, and so the other tensors
    the rows were computed from (``x W^T``: an optimizer step on ``W`` fetches again).  Every
    rank takes the same decision: a first call misses everywhere; later ones agree with one host
    all-reduce (``MIN``) of one integer.  Exact whatever ``halo_precision`` (reused: a compressed
    copy would repeat one rounding draw in every step).
    """

    def __init__(self) -> None:
        self.entries: dict[str, tuple[list[tuple[weakref.ref, object]], object, Tensor]] = {}

    def __getstate__(self) -> dict:
        return {"entries": {}}  # a cache: a pickled model fetches its halos again

    def fetch(self, key: str, src: Tensor, rows: Tensor, shard: Shard, depends_on: tuple[Tensor, ...] = ()) -> Tensor:
        """The halo of ``rows``, reused when every rank still holds the same ``src`` and ``depends_on``.

        Args:
            key (str): the cache slot (one per source argument of the layer).
            src (Tensor): the tensor ``rows`` are taken from (the layer's input).
            rows (Tensor): its node rows as exchanged.
            shard (Shard): the shard the layer runs on.
            depends_on (tuple[Tensor, ...], optional): the other tensors ``rows`` were computed
                from (e.g. a ``Linear``'s weight). (default: ``()``)
        """
        if shard.plan.minibatch:  # a new plan every batch: never a hit, and no all-reduce to find it out
            return shard.halo(rows)
        tensors = (src, *depends_on)
        entry = self.entries.get(key)
        hit = (entry is not None and entry[1] is shard.plan and len(entry[0]) == len(tensors)
               and all(ref() is t and version == tensor_version(t)
                       for (ref, version), t in zip(entry[0], tensors, strict=True)))
        if entry is not None and _all_ranks(hit, shard):  # no entry: every rank misses
            return entry[2]
        halo = shard.halo(rows)
        self.entries[key] = ([(weakref.ref(t), tensor_version(t)) for t in tensors], shard.plan, halo)
        return halo


@dataclass
class _Link:
    """The exchanger of the shard a layer last ran on, under one settings object."""
    plan: weakref.ref
    settings: DistributedSettings
    exact: HaloExchanger
    bound: HaloExchanger
    grid: Any
    world: int
    #: the :class:`Shard` of the last call on this plan (the next call on the same adjacency copies it)
    shard: Shard | None = None


class HaloPort:
    """A distributed layer's port to the exchanger and the SpMM algorithms (see the module doc)."""

    def __init__(self, state: Any) -> None:
        #: the layer's :class:`~.state.LayerState`, which holds what the port finds out across calls
        #: (its stale exchanges' slots, the algorithm chosen and its cost reports, the kept SpMM)
        self.state = state
        self.static = StaticHalo()
        self._link: _Link | None = None
        self._checks: tuple[DistributedSettings, bool, bool, str | None] | None = None
        #: (aggregation adjacency, exchanger, algorithm, the inputs' key) of the SpMM last built
        self._built: tuple[HaloAdj, HaloExchanger, SpMMAlgorithm, tuple | None] | None = None
        self.watch = AgreementWatch()  # lets steady-state calls skip the agreed checks (see watch)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_link"], state["_built"], state["_checks"], state["static"] = None, None, None, StaticHalo()
        return state

    def forget(self) -> None:
        """Drops every tensor kept across calls (a move to another device, a reset)."""
        self.static = StaticHalo()
        self.state.exchange_slots.clear()
        self.forget_spmm()
        self._link = None  # its exchangers hold the shard's plan
        self.watch = AgreementWatch()

    def forget_spmm(self) -> None:
        """Drops the SpMM algorithms kept (it releases an ``"rdma"`` engine's lease)."""
        self.state.cached_spmm = CachedSpMM()
        self._built = None

    def shard(self, adj: HaloAdj, settings: DistributedSettings, outer: Shard | None = None) -> Shard:
        """The :class:`Shard` of a call on ``adj``; the exchange group is checked when the plan or
        the settings change (:func:`~pyg_sparsecomm.algorithms.settings.exchange_group`).

        Args:
            adj (HaloAdj): the adjacency the layer was called with.
            settings (DistributedSettings): the layer's settings.
            outer (Shard, optional): the shard of the layer whose forward calls this one (its
                exchanger, local graph and memo are taken). (default: ``None``)
        """
        link = self._link
        if outer is None and link is not None and link.shard is not None and link.shard.adj is adj \
                and link.settings is settings and link.shard.plan is adj.plan:  # the last call's shard
            shard = copy.copy(link.shard)  # (its fields once per shard; the per-call ones fresh)
            shard.memo = {}
            return shard
        if (link is None or link.plan() is not adj.plan or link.settings is not settings
                or (outer is not None and link.exact is not outer.exchanger)):
            grid = settings.grid()
            group = exchange_group(adj, grid, settings.group)
            exact = outer.exchanger if outer is not None else WatchedExchanger(
                adj.plan, group, watch=self.watch, watched_options=settings.halo_options).traced()
            bound = exact.bind(options=settings.halo_options, slots=self.state.exchange_slots)
            link = self._link = _Link(weakref.ref(adj.plan), settings, exact, bound, grid, world_size(exact.group))
        if outer is not None:
            return Shard(adj, link.exact, outer.edge_index, link.world, outer.memo)
        link.shard = Shard(adj, link.exact, adj.edge_index(), link.world)
        return copy.copy(link.shard)

    def announce_change(self, settings: DistributedSettings, adj: HaloAdj) -> None:
        """Sends the peers' steady-state first exchange with the flag set (:class:`~.checks.AgreementWatch`):
        the rows recorded at the last call, over ``adj``'s plan when the watch and ``adj`` are a mini-batch's
        (the peers exchange over the current batch's plan)."""
        recorded = self.watch.recorded
        if recorded is not None and self.watch.replans(adj):
            recorded = (*headered_counts(adj.plan, group_rank(settings.group)), *recorded[2:])
        if recorded is not None:
            announce_rows(recorded, settings.group)
            self.watch.recorded = None

    def check_modes(self, settings: DistributedSettings, plan: Any, adj: HaloAdj) -> tuple[bool, bool]:
        """``(collective, watched)`` of a call's checks on ``adj``, decided once per settings object and
        algorithm: whether they are agreed by all ranks (a 1D layout, 1.5D block rows being checked by
        ``exchange_group``, over a group of more than one rank), and whether a steady-state call's
        agreement is carried by the header of its first exchange (:class:`~.checks.AgreementWatch`):
        its first collective is the halo exchange whatever its inputs (exact halos, no adapter, no
        relation, an SpMM by ``"1d"`` if any).

        Args:
            settings (DistributedSettings): the layer's settings.
            plan (LayerPlan): the layer's plan.
            adj (HaloAdj): the adjacency of the call.
        """
        modes = self._checks
        if modes is None or modes[0] is not settings or modes[3] != self.state.chosen_algorithm:
            collective = not settings.replicated and world_size(settings.group) > 1
            watched = (collective and settings.halo_options.exact and plan.rule.adapter is None
                       and (plan.spmm_weight is None or self.state.chosen_algorithm == "1d"))
            modes = self._checks = (settings, collective, watched, self.state.chosen_algorithm)
        return modes[1], modes[2] and not isinstance(adj, RelationAdj)

    def exchange_many(self, tensors: list[Tensor], key: str) -> list[Tensor]:
        """The halo rows of ``tensors`` under the layer's options, one exchange per dtype (see
        :meth:`~pyg_sparsecomm.comm.exchanger.HaloExchanger.exchange_many`), on the shard of the call.

        Args:
            tensors (list[Tensor]): owned rows, any trailing shapes.
            key (str): the call site's name within the layer.

        Shapes:
            - **input:** ``[num_owned, *]`` each
            - **output:** ``[halo_size, *]`` each
        """
        assert self._link is not None  # a call's shard() came first
        return self._link.bound.exchange_many(tensors, key)

    def static_halo(self, key: str, src: Tensor, rows: Tensor, shard: Shard,
                    depends_on: tuple[Tensor, ...] = ()) -> Tensor:
        """:meth:`StaticHalo.fetch` of the layer's static halos (see its arguments)."""
        return self.static.fetch(key, src, rows, shard, depends_on)

    def spmm(self, adjacency: Callable[[], HaloAdj], shard: Shard, rows: Tensor, settings: DistributedSettings,
             cached: tuple[Tensor, Tensor | None] | None = None,
             inputs: tuple[Tensor, Tensor | None, str] | None = None) -> SpMMAlgorithm:
        """The SpMM algorithm of a call (``algorithm="auto"`` chooses at the first call).

        Args:
            adjacency (callable): ``() -> HaloAdj``, the call's aggregation adjacency; the algorithm
                built on it is reused while it returns the same object.
            shard (Shard): the shard of the call.
            rows (Tensor): the rows it multiplies (their width and element size price ``"auto"``).
            settings (DistributedSettings): the layer's settings.
            cached (tuple, optional): ``(edge_index, weight)`` of a ``cached=True`` layer, whose
                algorithm is kept with them (:class:`CachedSpMM`). (default: ``None``)
            inputs (tuple, optional): ``(edge_index, weight, aggr)`` the adjacency is computed from: the
                last algorithm is reused while they are the same objects, ``weight`` (``None``, or one
                needing no gradient) at the same version, and so the rows' dtype. (default: ``None``)
        """
        link = self._link
        assert link is not None  # a call's shard() came first
        built = self._built
        key = None
        if inputs is not None and (inputs[1] is None or not inputs[1].requires_grad):
            key = (*inputs, None if inputs[1] is None else tensor_version(inputs[1]), rows.dtype, shard.adj)
            kept = None if built is None or built[1] is not link.bound else built[3]
            if (kept is not None and kept[0] is key[0] and kept[1] is key[1] and kept[2] == key[2]  # by identity
                    and kept[3] == key[3] and kept[4] == key[4] and kept[5] is key[5]
                    and built[2].name == self.state.chosen_algorithm):  # type: ignore[index]  # (steady: the same SpMM)
                return built[2]  # type: ignore[index]
        if cached is not None and self.state.chosen_algorithm is not None:
            kept = self.state.cached_spmm.get(*cached, shard.adj, rows.dtype, self.state.chosen_algorithm)
            if kept is not None:
                return kept
        adj = adjacency()
        if self.state.chosen_algorithm is None:
            learnable = adj.value is not None and adj.value.requires_grad
            # priced on the shard's block row, as CommStats and predict_layouts price it
            state = self.state
            state.chosen_algorithm, state.cost_report, state.exact_cost_report, state.sync_cost_report = \
                choose_algorithm(shard.adj, link.bound, link.grid, rows.size(1), rows.element_size(), learnable,
                                 settings.cost_model)
        algorithm = self.state.chosen_algorithm
        if built is not None and built[0] is adj and built[1] is link.bound and built[2].name == algorithm:
            spmm = built[2]
        else:
            spmm = algorithm_class(algorithm)(adj, link.bound, link.grid)
        self._built = (adj, link.bound, spmm, key)
        if cached is not None:
            self.state.cached_spmm.keep(spmm, *cached, shard.adj, rows.dtype, self.state.chosen_algorithm)
        return spmm

    def last_aggregation(self) -> HaloAdj | None:
        """The aggregation adjacency of the SpMM last built (a steady-state record multiplies with it)."""
        return None if self._built is None else self._built[0]

    def traces_spmm(self, shard: Shard, settings: DistributedSettings) -> bool:
        """Whether a traced call's SpMM is :func:`~.traced_spmm.traced_aggregation`: exact halos by the
        ``"1d"`` algorithm (chosen at an eager first call) over the shard's traced exchanger."""
        traced = bool(getattr(shard.exchanger, "handle", ""))
        return (settings.halo_options.exact and not settings.replicated
                and (shard.world == 1 or (self.state.chosen_algorithm == "1d" and traced)))

    def folds_degrees(self, settings: DistributedSettings) -> bool:
        """Whether a call's SpMM may take its rows' degrees folded in (:func:`~.normalisation.kept_normalisation`), the
        same on every rank: no grid, a chosen algorithm multiplying given halos, no steady-state record being made."""
        return (self.state.chosen_algorithm is not None and not settings.replicated and not self.state.recording
                and algorithm_class(self.state.chosen_algorithm).multiplies_given_halo)

    def multiply(self, spmm: SpMMAlgorithm, rows: Tensor, src: Tensor, shard: Shard,
                 depends_on: tuple[Tensor, ...], weight: Tensor | None = None) -> Tensor:
        """``spmm(rows)``; by the weights of a normalisation with folded degrees :math:`s`
        (``shard.normalisation.folded``), ``spmm.multiply(rows, halo(s rows))``; else rows needing no
        gradient (the input features) fetch their halo once (:class:`StaticHalo`) where the algorithm
        multiplies given halo rows (:attr:`~pyg_sparsecomm.algorithms.SpMMAlgorithm.multiplies_given_halo`).

        Args:
            spmm (SpMMAlgorithm): the call's algorithm.
            rows (Tensor): the owned rows it multiplies.
            src (Tensor): the tensor ``rows`` come from (the layer's input).
            shard (Shard): the shard of the call.
            depends_on (tuple[Tensor, ...]): the other tensors ``rows`` were computed from.
            weight (Tensor, optional): the weights of the SpMM's adjacency. (default: ``None``)

        Shapes:
            - **input:** ``rows``: ``[num_owned, F]``
            - **output:** ``[num_owned, F]``
        """
        if shard.normalisation is not None and shard.normalisation.folded is not None:  # (folds_degrees)
            return spmm.multiply(rows, spmm.exchanger.halo_of(rows * shard.normalisation.halo_scale(weight)))
        if spmm.multiplies_given_halo and not rows.requires_grad:
            return spmm.multiply(rows, self.static_halo("x", src, rows, shard, depends_on))
        return spmm(rows)
