"""Which shard a distributed layer is running on, while it runs.

A layer made distributed by :func:`~pyg_sparsecomm.distribute` receives the shard's
:class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` and hands PyG's code a plain local ``edge_index``
whose targets are the owned rows ``[0, num_owned)`` and whose sources are
``[owned | halo]`` columns ``[0, num_owned + halo_size)``.  The degree normalisations with
global degrees (:mod:`.layer_normalisation`) need the plan to fetch the halo's degrees, and a
layer called inside another's forward (``AntiSymmetricConv``'s ``phi``) runs on its shard; they
find it here.  The stack is per thread and every entry is removed by a
forward hook that runs even when the forward raises.
"""
import threading
import weakref
from dataclasses import dataclass, field

import torch.distributed as dist
from torch import Tensor

from ..comm.exchanger import HaloExchanger
from ..comm.group import host_all_reduce
from ..compat import tensor_version
from ..plan.halo_adj import HaloAdj


@dataclass
class ShardContext:
    """The shard one distributed layer call runs on.

    Attributes:
        adj: the block row the layer was called with.
        exchanger: the shard's exact :class:`~pyg_sparsecomm.comm.exchanger.HaloExchanger` (its
            plan and the group of the halo exchanges, 1.5D: the grid's column group); a layer
            binds its own options and slots to it.
        edge_index: ``adj`` as a local ``[2, nnz]`` edge index (sources first), in ``adj``'s edge order.
        memo: per-call results keyed by the identity of their (live) inputs.
    """
    adj: HaloAdj
    exchanger: HaloExchanger
    edge_index: Tensor
    #: results of whole-graph computations within this call (e.g. a Laplacian needed twice)
    memo: dict[tuple, object] = field(default_factory=dict)

    # the adjacency's shape, for the layers' checks
    plan = property(lambda self: self.adj.plan, doc="The shard's :class:`RankPlan`.")
    group = property(lambda self: self.exchanger.group, doc="Process group of the halo exchanges.")
    num_owned = property(lambda self: self.adj.num_owned, doc="Rows this rank owns (targets).")
    num_cols = property(lambda self: self.adj.num_cols, doc="Owned plus halo columns (sources).")


_local = threading.local()


def _stack() -> list[ShardContext]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def push(context: ShardContext) -> None:
    _stack().append(context)


def pop() -> None:
    stack = _stack()
    if stack:
        stack.pop()


def current() -> ShardContext | None:
    """The innermost running distributed layer's shard (``None`` outside one)."""
    stack = _stack()
    return stack[-1] if stack else None


class StaticHalo:
    """Halo rows of source tensors that need no gradient and did not change since the previous
    call (a model's input features): fetched once per layer, then reused.

    A tensor counts as unchanged while it is the same object at the same version (in-place
    writes bump the version) on the same plan.  Rows computed from the source with other
    tensors (``x W^T`` when a narrowing ``Linear`` is applied before the exchange) name those
    too, so an optimizer step on ``W`` fetches the halo again.  The exchange is a collective, so
    every rank must take the same decision: a first call misses on every rank; later ones agree
    with one host-side all-reduce (``MIN``) of one integer per call
    (:func:`~pyg_sparsecomm.comm.group.host_all_reduce`: a CPU tensor over gloo, never waiting for a
    device).  Host-side state alone cannot decide it: a rank cannot see that a peer's input
    changed.  These halos are exact whatever the layer's ``halo_precision``: they are reused across
    calls, so a compressed copy would repeat one rounding draw in every step (and save bytes once).
    """

    def __init__(self) -> None:
        self.entries: dict[str, tuple[list[tuple[weakref.ref, object]], object, Tensor]] = {}

    def __getstate__(self) -> dict:
        return {"entries": {}}  # a cache: a pickled model fetches its halos again

    def fetch(self, key: str, src: Tensor, rows: Tensor, context: ShardContext,
              depends_on: tuple[Tensor, ...] = ()) -> Tensor:
        """The halo of ``rows``, reused when every rank still holds the same ``src`` and the same
        ``depends_on``.

        Args:
            key: the cache slot (one per source argument of the layer).
            src: the tensor ``rows`` are taken from (the layer's input).
            rows: its node rows as exchanged (``src``'s, or computed from ``src`` and ``depends_on``).
            context: the shard the layer runs on.
            depends_on: the other tensors ``rows`` were computed from (e.g. a ``Linear``'s weight).
        """
        tensors = (src, *depends_on)
        entry = self.entries.get(key)
        hit = (entry is not None and entry[1] is context.plan and len(entry[0]) == len(tensors)
               and all(ref() is t and version == tensor_version(t) for (ref, version), t in zip(entry[0], tensors,
                                                                                          strict=True)))
        if entry is not None and _all_ranks(hit, context.group):  # no entry: every rank misses
            assert entry is not None  # every rank hit, this one included
            return entry[2]
        halo = context.exchanger.exact.exchange(rows)
        self.entries[key] = ([(weakref.ref(t), tensor_version(t)) for t in tensors], context.plan, halo)
        return halo


def _all_ranks(flag: bool, group: dist.ProcessGroup | None) -> bool:
    """Whether ``flag`` holds on every rank of ``group`` (host-side: no device synchronisation)."""
    return bool(host_all_reduce([int(flag)], dist.ReduceOp.MIN, group)[0])
