r"""One normalised adjacency per shard, shared by the ``cached=True`` layers that normalise alike.

A PyG layer built with ``cached=True`` (``GCNConv``, ``GCN2Conv``, ``APPNP``, ...) computes its
normalised graph :math:`\hat D^{-1/2} \hat A \hat D^{-1/2}` once and keeps it
(``_cached_edge_index``).  A model of :math:`L` such layers kept :math:`L` copies on a shard,
each with its own CSR and transposed CSR (about 200 bytes per in-edge for two layers, against
the 32 of one normalised CSR and its transpose: ``benchmarks/RESULTS.md``, ``memory_per_rank``).
Here the shard keeps one per normalisation (:func:`shared_normalisation`), on its
:class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` (:meth:`~pyg_sparsecomm.plan.halo_adj.HaloAdj.shared`), keyed by what the
result depends on: the rule's choices (self-loops, ``improved``, dtype, the form the graph was
given in) and the identity and version of the graph and weights it normalises.  Every layer's
PyG cache then holds the same tensors, and those layers' SpMMs run over one CSR
(:func:`shared_aggregation`), whose transpose is built once too.

For layers whose propagation is the SpMM (:mod:`.aggregation`), the normalised edge list
is kept in CSR order (by target, then source, stably: the order the SpMM's CSR has anyway, so
the products are the same to the bit); its row 0 is the CSR's column index and its row 1 the
CSR's row of every entry, with no permutation kept.  Other layers (PyG's scatter over edges) get
the normalisation in PyG's order.  Weights that need a gradient are never shared (their
normalisation is part of one step's autograd graph).
"""
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ...compat import tensor_version
from ...plan.halo_adj import HaloAdj, csr_order
from .aggregation import aggregation_weights

Normalise = Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor]]


@dataclass
class _Entry:
    """A shared normalisation: weak references to its inputs, the normalised graph and, in CSR
    order, its adjacency per ``(aggr, dtype)``."""
    inputs: list
    graph: tuple[Tensor, Tensor]
    csr: HaloAdj | None = None
    versions: tuple[object, object] = (0, 0)  # of the graph's tensors when made
    aggregations: dict[tuple[str, torch.dtype], HaloAdj] = field(default_factory=dict)

    def alive(self) -> bool:
        return all(ref() is not None for ref in self.inputs if ref is not None)

    def holds(self, edge_index: Tensor, weight: Tensor | None) -> bool:
        refs = self.inputs
        return refs[0]() is edge_index and (weight is None if refs[1] is None else refs[1]() is weight)


def _entries(adj: HaloAdj) -> dict:
    return adj.shared().setdefault("normalised", {})


def shared_normalisation(adj: HaloAdj, choices: tuple, edge_index: Tensor, weight: Tensor | None,
                         normalise: Normalise, in_csr_order: bool) -> tuple[Tensor, Tensor]:
    """``normalise(edge_index, weight)``, computed once per shard for the same ``choices`` and inputs.

    Args:
        adj (HaloAdj): the shard's adjacency (the cache lives with its structure).
        choices (tuple): what the normalisation depends on besides its inputs (hashable).
        edge_index (Tensor): the local edge index to normalise.
        weight (Tensor or None): its edge weights (``None``: unweighted).
        normalise (callable): ``(edge_index, weight) -> (edge_index, weight)``.
        in_csr_order (bool): return the normalised entries in CSR order (for the SpMM layers).
    """
    if weight is not None and weight.requires_grad:
        return normalise(edge_index, weight)
    entries = _entries(adj)
    key = (choices, in_csr_order, id(edge_index), tensor_version(edge_index), id(weight),
           None if weight is None else tensor_version(weight))
    entry = entries.get(key)
    if entry is not None and entry.holds(edge_index, weight):
        return entry.graph
    for stale in [k for k, e in entries.items() if not e.alive()]:
        del entries[stale]
    graph = normalise(edge_index, weight)
    entry = _Entry([weakref.ref(edge_index), None if weight is None else weakref.ref(weight)], graph)
    if in_csr_order:
        entry.csr = _csr_ordered(adj, *graph)
        value = entry.csr.value
        assert value is not None  # gcn_norm returns weights
        entry.graph = (entry.csr.edge_index(), value)
        entry.versions = (tensor_version(entry.graph[0]), tensor_version(value))
        entries[("csr", id(entry.graph[0]), id(entry.graph[1]))] = entry
    entries[key] = entry
    return entry.graph


def _csr_ordered(like: HaloAdj, edge_index: Tensor, weight: Tensor) -> HaloAdj:
    """The adjacency of the local ``edge_index`` (with ``weight``) in CSR order, whose
    :meth:`~pyg_sparsecomm.plan.halo_adj.HaloAdj.edge_index` is the reordered ``edge_index`` itself."""
    rowptr, perm = csr_order(edge_index[1], edge_index[0], like.num_owned, like.num_cols)
    assert perm is not None  # not is_sorted: always a permutation
    ordered = torch.empty_like(edge_index)
    torch.index_select(edge_index[0], 0, perm, out=ordered[0])
    torch.index_select(edge_index[1], 0, perm, out=ordered[1])
    value = weight[perm]
    del perm
    out = HaloAdj.from_ordered_edge_index(rowptr, ordered, value, like.plan)
    out.given_as = like.given_as
    return out


def shared_aggregation(adj: HaloAdj, edge_index: Tensor, weight: Tensor | None, aggr: str,
                       dtype: torch.dtype) -> HaloAdj | None:
    """The shard's one adjacency of the aggregation ``aggr`` over a shared normalised graph in CSR
    order (:func:`shared_normalisation`), for rows of ``dtype``; ``None`` if ``(edge_index, weight)``
    is not one.  Its CSR and transposed CSR are built once, for every layer that propagates over it."""
    entry = _entries(adj).get(("csr", id(edge_index), id(weight)))
    if entry is None or entry.csr is None or entry.graph[0] is not edge_index or entry.graph[1] is not weight:
        return None
    # written to in place (or made under inference_mode, no counter): not the shared one
    if (tensor_version(edge_index), tensor_version(weight)) != entry.versions:
        return None
    if (aggr, dtype) not in entry.aggregations:
        value = aggregation_weights(edge_index, weight, aggr, adj.num_owned, dtype)
        entry.aggregations[aggr, dtype] = entry.csr.with_value(value)
    return entry.aggregations[aggr, dtype]
