r"""``HGTConv`` on a heterogeneous shard: one exchange of keys and values per source node type.

PyG's ``HGTConv`` computes, per node type :math:`\tau`, :math:`[K \,|\, Q \,|\, V] = x_\tau W_\tau`
(``kqv_lin``); per relation :math:`r = (s, \cdot, d)` and head :math:`h` the source keys and
values :math:`K_s W^K_{r,h}`, :math:`V_s W^V_{r,h}` (``k_rel``, ``v_rel``); and for each target
:math:`i` of type :math:`d` the softmax over its in-edges of all relations

.. math::
    \alpha_{ji} = \mathrm{softmax}_{j \in \mathcal{N}(i)}
    \left( \frac{\mu_r \, q_i^\top (K_s W^K_{r,h})_j}{\sqrt{D}} \right), \qquad
    m_i = \sum_j \alpha_{ji} (V_s W^V_{r,h})_j,

then ``out_lin`` of :math:`\mathrm{gelu}(m)` and the gated skip.  Keys and values of a source
row are a function of that row alone, and the owner of :math:`i` holds all of :math:`i`'s
in-edges, so :class:`DistributedHGTConv` exchanges, per source type :math:`s`, the rows
:math:`[K_s \,|\, V_s]` (``2 * out_channels`` columns) of the union of the halos of the relations
reading :math:`s`, once, after ``kqv_lin`` and before the per-relation ``k_rel``/``v_rel``
(which would multiply the union by the number of relations reading :math:`s`).  Exchanging
``x_s`` instead would move ``in_channels[s]`` columns and compute ``kqv_lin`` again on every
halo row; the exchange after ``kqv_lin`` is PyG's own order of operations, each row's keys and
values computed once, by its owner.  Queries never travel (targets are owned).

Why a forward and not hooks: PyG's forward splits each type's ``kqv_lin`` output into keys,
queries and values of the *same* rows and offsets both the sources and the targets by those row
counts, so no hook can give the keys and values halo rows without giving the queries (and the
outputs, and the skip's ``x``) the same rows.  The forward here is PyG's with the exchange
between ``kqv_lin`` and ``k_rel``/``v_rel``; it calls PyG's own per-relation source
construction (:func:`~pyg_sparsecomm.compat.hgt_source_rows`), ``construct_bipartite_edge_index``
and ``propagate``/``message``.
"""
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import HGTConv
from torch_geometric.utils.hetero import construct_bipartite_edge_index

from ..compat import hgt_source_rows
from .runtime.relation_dict import RelationCall, RelationDictLayer, relation_call


class DistributedHGTConv(RelationDictLayer, HGTConv):
    """``HGTConv`` whose forward runs on ``local.adj_dict`` (see the module doc); ``distribute``
    swaps it in for ``HGTConv`` instances (parameters, buffers and ``state_dict`` keys stay).
    With plain ``edge_index`` tensors it is PyG's ``HGTConv``."""

    def forward(self, x_dict: dict[str, Tensor], edge_index_dict: dict[Any, Any]) -> dict[str, Tensor | None]:
        call = relation_call(self, x_dict, edge_index_dict)
        if call is None:
            return super().forward(x_dict, edge_index_dict)
        H, D = self.heads, self.out_channels // self.heads
        k_dict, q_dict, v_dict = {}, {}, {}
        for key, val in self.kqv_lin(x_dict).items():
            k, q, v = torch.tensor_split(val, 3, dim=1)
            k_dict[key], q_dict[key], v_dict[key] = k.view(-1, H, D), q.view(-1, H, D), v.view(-1, H, D)
        _complete_sources(call, k_dict, v_dict)
        q = torch.cat(list(q_dict.values()), dim=0)
        dst_offset, start = {}, 0
        for key, rows in q_dict.items():
            dst_offset[key], start = start, start + rows.size(0)
        k, v, src_offset = hgt_source_rows(self, k_dict, v_dict, call.edge_index_dict)
        edge_index, edge_attr = construct_bipartite_edge_index(call.edge_index_dict, src_offset, dst_offset,
                                                               edge_attr_dict=self.p_rel, num_nodes=k.size(0))
        out = self.propagate(edge_index, k=k, q=q, v=v, edge_attr=edge_attr)
        return _outputs(self, x_dict, out, q_dict, dst_offset)


def _outputs(conv: HGTConv, x_dict: dict[str, Tensor], out: Tensor, q_dict: dict[str, Tensor],
             dst_offset: dict[str, int]) -> dict[str, Tensor | None]:
    """PyG's ``HGTConv`` after its ``propagate``: ``out_lin(gelu(.))`` and the gated skip."""
    out_dict = {t: out[start:start + q_dict[t].size(0)] for t, start in dst_offset.items()
                if t in conv.dst_node_types}
    a_dict = conv.out_lin({t: F.gelu(o) for t, o in out_dict.items()})
    result: dict[str, Tensor | None] = {}
    for node_type in out_dict:
        o = a_dict[node_type]
        if o.size(-1) == x_dict[node_type].size(-1):
            alpha = conv.skip[node_type].sigmoid()
            o = alpha * o + (1 - alpha) * x_dict[node_type]
        result[node_type] = o
    return result


def _complete_sources(call: RelationCall, k_dict: dict[str, Tensor], v_dict: dict[str, Tensor]) -> None:
    """``k_dict[s]``, ``v_dict[s]`` of every source type ``s`` extended with their halo rows, in one
    exchange per source type."""
    for src in call.plans:
        k_dict[src], v_dict[src] = call.extended(src, k_dict[src], v_dict[src])
