r"""Partitions of heterogeneous graphs (:class:`~torch_geometric.data.HeteroData`): one ``part``
vector per node type.

Every node of every type gets one owner, ``data[node_type].part``; what those owners exchange
(the halo of every source type, the union over the relations reading it) is computed by
:mod:`pyg_sparsecomm.plan.hetero` (:class:`~pyg_sparsecomm.plan.hetero.HeteroCommStats`).

Methods: ``"random"`` and ``"contiguous"`` split every node type on its own (balanced per type);
``"metis"`` cuts the homogeneous topology of all relations (node ids offset per type,
symmetrised) with multi-constraint METIS, one vertex weight per node type (its nodes) and one for
the work of the in-edges of every node (:func:`~.multiconstraint.metis_multiconstraint`), so
every node type and the aggregation work are balanced at once.
"""
from __future__ import annotations

import copy
import copyreg

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from ..graph.validate import check_hetero
from ..plan.hetero import HeteroCommStats, NodeType, hetero_comm_stats
from .methods import contiguous_partition, random_partition, row_nnz, symmetric_csr
from .multiconstraint import metis_multiconstraint
from .pickled_arrays import numpy_array, plain_array

#: the methods :func:`partition_hetero` knows
HETERO_METHODS = ("metis", "random", "contiguous")


# The pickling of HeteroCommStats (pyg_sparsecomm.plan.hetero) lives with the partitioner that attaches it,
# as CommStats's does (partitioner.py), under the names that datasets processed before 0.3.0 recorded.
def _hetero_comm_stats(num_parts: int, relations: dict, sources: dict, part_sizes: dict) -> HeteroCommStats:
    """Rebuilds a pickled :class:`HeteroCommStats` (its part sizes as plain numbers:
    :mod:`~pyg_sparsecomm.partition.pickled_arrays`)."""
    return HeteroCommStats(num_parts, relations, sources, {t: numpy_array(s) for t, s in part_sizes.items()})


def _reduce_hetero_comm_stats(stats: HeteroCommStats):
    sizes = {t: plain_array(s) for t, s in stats.part_sizes.items()}
    return _hetero_comm_stats, (stats.num_parts, stats.relations, stats.sources, sizes)


# as CommStats (partitioner.py): a HeteroData partitioned as a dataset's ``pre_transform`` loads
# with ``torch.load(weights_only=True)``
copyreg.pickle(HeteroCommStats, _reduce_hetero_comm_stats)
torch.serialization.add_safe_globals([_hetero_comm_stats])


def homogeneous_topology(data: HeteroData) -> tuple[Tensor, dict[NodeType, int], int]:
    """All relations as one graph: ``(edge_index, offsets, num_nodes)``, node ids offset per type."""
    offsets, total = {}, 0
    for node_type in data.node_types:
        offsets[node_type] = total
        total += data[node_type].num_nodes
    edges = [data[et].edge_index.cpu() + torch.tensor([[offsets[et[0]]], [offsets[et[2]]]]) for et in data.edge_types]
    return (torch.cat(edges, 1) if edges else torch.empty(2, 0, dtype=torch.long)), offsets, total


def metis_hetero(data: HeteroData, num_parts: int, seed: int = 0, objective: str = "cut",
                 tolerance: float = 1.05) -> dict[NodeType, Tensor]:
    r"""Multi-constraint METIS of the homogeneous topology: constraint :math:`t` weighs the nodes of
    type :math:`t` (1 each), the last one every node's in-edges over all relations plus one."""
    edge_index, offsets, total = homogeneous_topology(data)
    if num_parts == 1:
        return {t: torch.zeros(data[t].num_nodes, dtype=torch.long) for t in data.node_types}
    types = [t for t in data.node_types if data[t].num_nodes > 0]
    weights = np.zeros((total, len(types) + 1), dtype=np.int64)
    for k, node_type in enumerate(types):
        weights[offsets[node_type]:offsets[node_type] + data[node_type].num_nodes, k] = 1
    weights[:, -1] = row_nnz(edge_index, total)  # in-edge work, as METIS gets for homogeneous graphs
    xadj, adjncy = symmetric_csr(edge_index, total)
    part = metis_multiconstraint(xadj, adjncy, weights, num_parts, [tolerance] * weights.shape[1], seed, objective)
    if part is None:
        raise RuntimeError(f"multi-constraint METIS failed to partition the heterogeneous graph ({total} nodes, "
                           f"{weights.shape[1]} constraints) into {num_parts} parts; try method='random'")
    whole = torch.from_numpy(part)
    return {t: whole[offsets[t]:offsets[t] + data[t].num_nodes].clone() for t in data.node_types}


def partition_hetero(data: HeteroData, num_parts: int, method: str, seed: int, **options) -> dict[NodeType, Tensor]:
    """One ``part`` vector per node type by ``method`` (see the module doc)."""
    if method == "metis":
        return metis_hetero(data, num_parts, seed, **options)
    if options:
        raise ValueError(f"method {method!r} takes no options for a heterogeneous graph, got {sorted(options)}")
    split = {"random": random_partition, "contiguous": contiguous_partition}[method]
    empty = torch.empty(2, 0, dtype=torch.long)
    return {t: split(empty, data[t].num_nodes, num_parts, seed + k).to(torch.long)
            for k, t in enumerate(data.node_types)}


def partition_hetero_data(partitioner, data: HeteroData) -> HeteroData:
    """:class:`~pyg_sparsecomm.partition.SparsityAwarePartitioner` on a ``HeteroData``: a shallow
    copy with ``data[node_type].part``, ``num_parts`` and a :class:`HeteroCommStats` ``comm_stats``."""
    who = type(partitioner).__name__
    if partitioner.method not in HETERO_METHODS:
        raise NotImplementedError(f"{who}: method={partitioner.method!r} is not supported for heterogeneous graphs "
                                  f"yet; choose one of {list(HETERO_METHODS)}")
    if partitioner.balance is not None:
        raise NotImplementedError(f"{who}: balance={partitioner.balance!r} is not supported for heterogeneous graphs "
                                  f"yet; use balance=None")
    check_hetero(data)
    num_parts = partitioner.num_parts
    largest = max((data[t].num_nodes for t in data.node_types), default=0)
    if num_parts > max(largest, 1):
        raise ValueError(f"cannot split a graph whose largest node type has {largest} nodes into {num_parts} parts")
    parts = partition_hetero(data, num_parts, partitioner.method, partitioner.seed, **partitioner.options)
    out = copy.copy(data)
    for node_type, part in parts.items():
        out[node_type].part = part
    out.num_parts = num_parts
    out.comm_stats = hetero_comm_stats(out, parts, num_parts)
    return out
