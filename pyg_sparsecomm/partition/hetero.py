r"""Partitions of heterogeneous graphs (:class:`~torch_geometric.data.HeteroData`).

Every node of every type gets one owner, ``data[node_type].part``.  A relation
:math:`(s, r, d)` is a bipartite graph: the owner of a destination node :math:`i` computes row
:math:`i` and reads the rows of its sources :math:`j` of type :math:`s`.  A layer exchanges
each *source node type* once and serves every relation reading it from the same halo, so the
rows rank :math:`p` receives of type :math:`s` are the union over those relations,

.. math::
    \mathrm{halo}_p(s) = \bigcup_{(s, r, d)} \{ j : (j \to i) \in E_{(s, r, d)},\ \mathrm{part}_d(i) = p,
    \ \mathrm{part}_s(j) \neq p \},

and the rows moved per layer are :math:`\sum_s \sum_p |\mathrm{halo}_p(s)|`, at most the sum of
the relations' own volumes (:class:`HeteroCommStats`).

Methods: ``"random"`` and ``"contiguous"`` split every node type on its own (balanced per type);
``"metis"`` cuts the homogeneous topology of all relations (node ids offset per type,
symmetrised) with multi-constraint METIS, one vertex weight per node type (its nodes) and one for
the work of the in-edges of every node (:func:`~.multiconstraint.metis_multiconstraint`), so
every node type and the aggregation work are balanced at once.
"""
from __future__ import annotations

import copy
import copyreg
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from ..plan.homogeneous import CommPattern, comm_pattern
from ..plan.stats import CommStats
from .methods import contiguous_partition, random_partition, row_nnz, symmetric_csr
from .multiconstraint import metis_multiconstraint

NodeType = str
EdgeType = tuple[str, str, str]
#: the methods :func:`partition_hetero` knows
HETERO_METHODS = ("metis", "random", "contiguous")


def check_hetero(data: HeteroData) -> None:
    """Raises ``ValueError`` for a relation without ``edge_index`` or with ids outside its node types."""
    for node_type in data.node_types:
        if data[node_type].num_nodes is None:
            raise ValueError(f"node type {node_type!r} has no num_nodes (set data[{node_type!r}].num_nodes or .x)")
    for edge_type in data.edge_types:
        src, _, dst = edge_type
        edge_index = data[edge_type].get("edge_index")
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2 \
                or edge_index.is_floating_point():
            raise ValueError(f"relation {edge_type} needs an edge_index (LongTensor [2, num_edges]); a sparse "
                             f"adj_t is not supported for heterogeneous graphs yet")
        for row, node_type in ((0, src), (1, dst)):
            n = _declared_num_nodes(data, edge_type, node_type)
            if edge_index.size(1) and (int(edge_index[row].min()) < 0 or int(edge_index[row].max()) >= n):
                raise ValueError(f"relation {edge_type}: edge_index[{row}] holds ids outside [0, {n}) of node type "
                                 f"{node_type!r}")


def _declared_num_nodes(data: HeteroData, edge_type: EdgeType, node_type: NodeType) -> int:
    """``data[node_type].num_nodes``, or ``ValueError`` naming the relation ending there and the fix
    (without adding ``node_type`` to ``data``, as ``data[node_type]`` would)."""
    n = data[node_type].num_nodes if node_type in data.node_types else None
    if n is None:
        raise ValueError(f"relation {edge_type} ends at node type {node_type!r}, which has no nodes (neither x nor "
                         f"num_nodes): set data[{node_type!r}].num_nodes (or its x), or remove the relation "
                         f"(del data[{edge_type}])")
    return int(n)


def relation_pattern(data: HeteroData, edge_type: EdgeType, parts: dict[str, Tensor], num_parts: int) -> CommPattern:
    """The pattern of one relation: its source type's rows read by the owners of its targets."""
    src, _, dst = edge_type
    return comm_pattern(data[edge_type].edge_index.cpu(), parts[src].cpu(), data[src].num_nodes, num_parts,
                        target_part=parts[dst].cpu())


def readers(data: HeteroData, src_type: NodeType, parts: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Every relation reading ``src_type`` as one bipartite graph: ``(edge_index, target_part)`` with
    the targets of all those relations numbered one after the other (relation by relation)."""
    edges, owners, offset = [], [], 0
    for edge_type in data.edge_types:
        if edge_type[0] != src_type:
            continue
        edge_index = data[edge_type].edge_index.cpu()
        edges.append(torch.stack([edge_index[0], edge_index[1] + offset]))
        owners.append(parts[edge_type[2]].cpu())
        offset += data[edge_type[2]].num_nodes
    if not edges:
        return torch.empty(2, 0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    return torch.cat(edges, 1), torch.cat(owners)


def source_pattern(data: HeteroData, src_type: NodeType, parts: dict[str, Tensor], num_parts: int) -> CommPattern:
    """The pattern of one source node type over every relation reading it (its halos: the unions)."""
    edge_index, target_part = readers(data, src_type, parts)
    return comm_pattern(edge_index, parts[src_type].cpu(), data[src_type].num_nodes, num_parts,
                        target_part=target_part)


def _stats(pattern: CommPattern) -> CommStats:
    # nnz: the edges each rank aggregates (no self-loop is added per owned source row here)
    return CommStats(pattern.num_parts, pattern.volume_matrix(), pattern.part_sizes.copy(),
                     pattern.edge_nnz.copy(), pattern.spans.copy())


@dataclass
class HeteroCommStats:
    """Per-layer volumes of a heterogeneous partition.

    Attributes:
        num_parts: the number of parts.
        relations: per relation, the :class:`~pyg_sparsecomm.plan.stats.CommStats` of its own exchange
            (its source type's rows its targets' owners read; ``part_sizes`` of the source type,
            ``nnz`` the relation's edges per rank).
        sources: per source node type, the exchange a layer runs: the union over the relations
            reading it (``nnz``: all their edges per rank).
        part_sizes: per node type, its nodes on every rank.
    """
    num_parts: int
    relations: dict[EdgeType, CommStats]
    sources: dict[NodeType, CommStats]
    part_sizes: dict[NodeType, np.ndarray]

    @property
    def total_rows(self) -> int:
        """Rows moved per layer, one exchange per source type: :math:`\\sum_s \\sum_p |\\mathrm{halo}_p(s)|`."""
        return sum(stats.total_rows for stats in self.sources.values())

    @property
    def relation_rows(self) -> int:
        """Rows moved per layer with one exchange per relation (no deduplication)."""
        return sum(stats.total_rows for stats in self.relations.values())

    def node_imbalance(self) -> dict[NodeType, float]:
        """Max over mean nodes per rank, per node type (1.0: perfectly balanced)."""
        return {t: float(s.max() / s.mean()) if s.sum() else 1.0 for t, s in self.part_sizes.items()}

    def as_dict(self) -> dict:
        return {"num_parts": self.num_parts, "total_rows": self.total_rows, "relation_rows": self.relation_rows,
                "source_rows": {t: s.total_rows for t, s in self.sources.items()},
                "relation_rows_by_type": {"__".join(e): s.total_rows for e, s in self.relations.items()},
                "node_imbalance": self.node_imbalance()}

    def __str__(self) -> str:
        per_type = ", ".join(f"{t}={s.total_rows}" for t, s in self.sources.items())
        return (f"HeteroCommStats(P={self.num_parts}, rows/layer={self.total_rows} (one exchange per source "
                f"type: {per_type}; {self.relation_rows} with one per relation))")


def _hetero_comm_stats(num_parts: int, relations: dict, sources: dict, part_sizes: dict) -> HeteroCommStats:
    """Rebuilds a pickled :class:`HeteroCommStats` (its part sizes travel as tensors)."""
    return HeteroCommStats(num_parts, relations, sources, {t: s.numpy() for t, s in part_sizes.items()})


def _reduce_hetero_comm_stats(stats: HeteroCommStats):
    sizes = {t: torch.from_numpy(np.ascontiguousarray(s)) for t, s in stats.part_sizes.items()}
    return _hetero_comm_stats, (stats.num_parts, stats.relations, stats.sources, sizes)


# as CommStats (partitioner.py): a HeteroData partitioned as a dataset's ``pre_transform`` loads
# with ``torch.load(weights_only=True)``
copyreg.pickle(HeteroCommStats, _reduce_hetero_comm_stats)
torch.serialization.add_safe_globals([_hetero_comm_stats])


def hetero_comm_stats(data: HeteroData, parts: dict[str, Tensor], num_parts: int) -> HeteroCommStats:
    """The :class:`HeteroCommStats` of ``parts`` (one ``part`` vector per node type)."""
    relations = {et: _stats(relation_pattern(data, et, parts, num_parts)) for et in data.edge_types}
    sources = {t: _stats(source_pattern(data, t, parts, num_parts))
               for t in data.node_types if any(et[0] == t for et in data.edge_types)}
    sizes = {t: np.bincount(parts[t].cpu().numpy(), minlength=num_parts) for t in data.node_types}
    return HeteroCommStats(num_parts, relations, sources, sizes)


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
