r"""``SampledRelationAdj``: a relation of a heterogeneous mini-batch, which can drop its outermost hop.

As :class:`~pyg_sparsecomm.sampling.SampledAdj` for one relation :math:`(s, r, d)`: rows are the
batch's :math:`d` rows, columns ``[owned | halo]`` of the batch's :math:`s` rows.  The plan of
:math:`s` and its hop bookkeeping (:class:`SourceHops`) are shared by every relation reading
:math:`s` and trimmed once per hop, so trimmed relations still share one plan per source type
and a trimmed layer still exchanges each source type once (:mod:`pyg_sparsecomm.nn.runtime.hetero`).
"""
from typing import Any

from torch import Tensor

from ..plan.homogeneous import RankPlan
from ..plan.relation_adj import RelationAdj
from .hops import check_hop_order, trim_columns, trim_plan


class SourceHops:
    """The batch plan of one source type, its rows per hop and the first hop an edge reads each
    halo / send entry at (``[P, L + 1]`` rows per hop of every rank in ``part_sampled_nodes``)."""

    def __init__(self, plan: RankPlan, num_sampled_nodes: list[int], halo_hop: Tensor, send_hop: Tensor,
                 part_sampled_nodes: Tensor) -> None:
        self.plan, self.num_sampled_nodes = plan, num_sampled_nodes
        self.halo_hop, self.send_hop, self.part_sampled_nodes = halo_hop, send_hop, part_sampled_nodes
        self._trimmed: tuple[SourceHops, Tensor] | None = None

    def trim(self) -> "tuple[SourceHops, Tensor]":
        """Without the outermost hop (cached: every relation gets the same object), and the kept
        halo entries' mask."""
        if self._trimmed is None:
            hops = len(self.num_sampled_nodes) - 2
            rows = sum(self.num_sampled_nodes[:hops + 1])
            plan, halo_keep, send_keep = trim_plan(self.plan, rows, self.halo_hop, self.send_hop,
                                                   self.part_sampled_nodes, hops)
            self._trimmed = (SourceHops(plan, self.num_sampled_nodes[:hops + 1], self.halo_hop[halo_keep],
                                        self.send_hop[send_keep], self.part_sampled_nodes[:, :hops + 1]), halo_keep)
        return self._trimmed


class SampledRelationAdj(RelationAdj):
    """A :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj` of a batch with hop bookkeeping.

    Args:
        rowptr (torch.Tensor): CSR row pointers over the batch's destination rows.
        col (torch.Tensor): ``[nnz]`` local source columns.
        value (torch.Tensor or None): ``[nnz]`` edge weights, or ``None``.
        source (SourceHops): the source type's :class:`SourceHops` (its plan is the adjacency's).
        edge_type (tuple[str, str, str]): ``(source type, relation, destination type)``.
        dst_sampled_nodes (list[int]): this rank's destination rows per hop ``0 .. L``.
        num_sampled_edges (list[int]): this rank's edges of the relation per hop ``1 .. L``.
    """

    def __init__(self, rowptr: Tensor, col: Tensor, value: Tensor | None, source: SourceHops,
                 edge_type: tuple[str, str, str], dst_sampled_nodes: list[int], num_sampled_edges: list[int]) -> None:
        super().__init__(rowptr, col, value, source.plan, edge_type, sum(dst_sampled_nodes))
        self.source, self.dst_sampled_nodes, self.num_sampled_edges = source, dst_sampled_nodes, num_sampled_edges
        self._trimmed: SampledRelationAdj | None = None

    @property
    def num_hops(self) -> int:
        return len(self.num_sampled_edges)

    def trim(self) -> "SampledRelationAdj":
        """This relation without its outermost hop (cached), over the trimmed source plan."""
        if self.num_hops <= 1:
            raise ValueError("cannot trim a batch of one hop: the model has more layers than the loader has hops "
                             "(give the loader one num_neighbors entry per layer)")
        if self._trimmed is None:
            hops = self.num_hops - 1
            source, halo_keep = self.source.trim()
            nnz = sum(self.num_sampled_edges[:hops])
            check_hop_order(self.col[:nnz], self.num_owned, source.plan.num_owned, self.rowptr,
                            sum(self.dst_sampled_nodes[:hops]), nnz)
            col = trim_columns(self.col[:nnz], self.num_owned, source.plan.num_owned, halo_keep)
            rows = sum(self.dst_sampled_nodes[:hops + 1])
            value = None if self.value is None else self.value[:nnz]
            out = SampledRelationAdj(self.rowptr[:rows + 1].clamp(max=nnz), col, value, source, self.edge_type,
                                     self.dst_sampled_nodes[:hops + 1], self.num_sampled_edges[:hops])
            out.given_as = self.given_as
            self._trimmed = out
        return self._trimmed

    def _like(self, rowptr: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan) -> "SampledRelationAdj":
        device = plan.n_id.device
        source = SourceHops(plan, self.source.num_sampled_nodes, self.source.halo_hop.to(device),
                            self.source.send_hop.to(device), self.source.part_sampled_nodes.to(device))
        return SampledRelationAdj(rowptr, col, value, source, self.edge_type, self.dst_sampled_nodes,
                                  self.num_sampled_edges)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_trimmed"] = None
        return state


def trim_relations(layer: int, num_sampled_nodes: Any, x: Any, adjs: dict, edge_attr: Any):
    """:func:`~pyg_sparsecomm.sampling.trim_to_layer` of dicts (a heterogeneous batch): every relation
    one more hop trimmed before layer ``layer > 0``, every ``x[t]`` and ``edge_attr[k]`` to the rows
    and edges kept (their first ones)."""
    if any(not isinstance(a, SampledRelationAdj) for a in adjs.values()):
        raise ValueError("trim_to_layer of a heterogeneous batch takes batch.adj_dict (every relation of the batch)")
    for (src, _, dst), a in adjs.items():
        nodes = list(num_sampled_nodes.get(src, []))
        if a.num_hops != len(nodes) - layer or nodes[:a.num_hops + 1] != a.source.num_sampled_nodes:
            raise ValueError(f"trim_to_layer(layer={layer}, ...) does not fit this rank's batch relation "
                             f"{(src, _, dst)} "
                             f"({a.num_hops} hops left, {src!r} rows per hop {a.source.num_sampled_nodes}): pass "
                             f"batch.adj_dict and batch.num_sampled_nodes_dict, and trim once per layer in order")
        if src in x and x[src].size(0) != a.num_owned:
            raise ValueError(f"x[{src!r}] has {x[src].size(0)} rows, the batch adjacency {a.num_owned}: trim "
                             f"x_dict and adj_dict together")
    trimmed = {k: a.trim() for k, a in adjs.items()}
    rows: dict[str, int] = {}
    for (src, _, dst), a in trimmed.items():
        rows[src], rows[dst] = a.num_owned, a.num_rows
    x = {t: (v.narrow(0, 0, rows[t]) if t in rows else v) for t, v in x.items()}
    if edge_attr is not None:
        edge_attr = {k: v.narrow(0, 0, trimmed[k].nnz) for k, v in edge_attr.items()}
    return x, trimmed, edge_attr
