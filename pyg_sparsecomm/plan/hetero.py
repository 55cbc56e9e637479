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

Partitioning a heterogeneous graph (its ``part`` vectors) is :mod:`pyg_sparsecomm.partition.hetero`'s;
this module computes what a set of ``part`` vectors implies: the pattern of every relation and of
every source type, and their volumes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from .homogeneous import CommPattern, comm_pattern
from .stats import CommStats

NodeType = str
EdgeType = tuple[str, str, str]


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
        num_parts (int): the number of parts.
        relations (dict[EdgeType, CommStats]): per relation, the
            :class:`~pyg_sparsecomm.plan.stats.CommStats` of its own exchange (its source type's rows its
            targets' owners read; ``part_sizes`` of the source type, ``nnz`` the relation's edges per rank).
        sources (dict[NodeType, CommStats]): per source node type, the exchange a layer runs: the union
            over the relations reading it (``nnz``: all their edges per rank).
        part_sizes (dict[NodeType, numpy.ndarray]): per node type, its nodes on every rank.
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


def hetero_comm_stats(data: HeteroData, parts: dict[str, Tensor], num_parts: int) -> HeteroCommStats:
    """The :class:`HeteroCommStats` of ``parts`` (one ``part`` vector per node type)."""
    relations = {et: _stats(relation_pattern(data, et, parts, num_parts)) for et in data.edge_types}
    sources = {t: _stats(source_pattern(data, t, parts, num_parts))
               for t in data.node_types if any(et[0] == t for et in data.edge_types)}
    sizes = {t: np.bincount(parts[t].cpu().numpy(), minlength=num_parts) for t in data.node_types}
    return HeteroCommStats(num_parts, relations, sources, sizes)
