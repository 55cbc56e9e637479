r"""``HANConv`` on a heterogeneous shard: one exchange of projected rows per source node type,
the semantic attention's mean over all ranks' nodes.

PyG's ``HANConv`` projects every node type, :math:`h_\tau = x_\tau W_\tau` (``proj``), runs a
GAT-style attention per relation :math:`r = (s, \cdot, d)`,

.. math::
    z^r_i = \mathrm{relu}\Big(\sum_{j \in \mathcal{N}_r(i)} \mathrm{softmax}_j\big(
    \mathrm{LeakyReLU}(h_{s,j} a^r_s + h_{d,i} a^r_d)\big) h_{s,j}\Big),

and combines the relations into type :math:`d` by a semantic attention whose scores average
over *all* nodes of :math:`d`:

.. math::
    \beta_r = \mathrm{softmax}_r\Big(q^\top \frac{1}{N_d} \sum_{i} \tanh(W z^r_i + b)\Big), \qquad
    \mathrm{out}_i = \sum_r \beta_r z^r_i.

:class:`DistributedHANConv` exchanges :math:`h_s` (``out_channels`` columns, after ``proj``) once
per source type for all relations reading it; the per-relation attention logits
:math:`h_{s,j} a^r_s` are computed on the completed rows (a function of the row), so they never
travel.  The semantic mean is a whole-graph statistic: the per-rank sums are all-reduced
(differentiably: every rank's loss depends on :math:`\beta`) and divided by the global
:math:`N_d`, so every rank combines its rows with the single-process :math:`\beta`.

Why a forward and not hooks: PyG computes :math:`\beta` in ``han_conv.group``, a module-level
function (no hook point, and the package does not patch PyG's modules).  The forward here is
PyG's with the exchange after ``proj`` and :func:`semantic_attention` in place of ``group``; the
per-relation attention runs in PyG's ``propagate``/``message``.
"""
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import HANConv

from ..comm.collectives import row_all_reduce
from ..comm.group import host_all_reduce
from .runtime.relation_dict import RelationDictLayer, relation_call


class DistributedHANConv(RelationDictLayer, HANConv):
    """``HANConv`` whose forward runs on ``local.adj_dict`` (see the module doc); ``distribute``
    swaps it in for ``HANConv`` instances (parameters and ``state_dict`` keys stay).  With plain
    ``edge_index`` tensors it is PyG's ``HANConv``."""

    def forward(self, x_dict: dict[str, Tensor], edge_index_dict: dict[Any, Any],
                return_semantic_attention_weights: bool = False) -> Any:
        call = relation_call(self, x_dict, edge_index_dict)
        if call is None:
            return super().forward(x_dict, edge_index_dict, return_semantic_attention_weights)
        H, D = self.heads, self.out_channels // self.heads
        h = {t: self.proj[t](x).view(-1, H, D) for t, x in x_dict.items()}
        h_src = {s: call.extended(s, h[s])[0] for s in call.plans}  # one exchange per source type
        outs: dict[str, list[Tensor]] = {t: [] for t in x_dict}
        for edge_type, edge_index in call.edge_index_dict.items():
            src, _, dst = edge_type
            key = "__".join(edge_type)
            alpha_src = (h_src[src] * self.lin_src[key]).sum(dim=-1)
            alpha_dst = (h[dst] * self.lin_dst[key]).sum(dim=-1)
            out = self.propagate(edge_index, x=(h_src[src], h[dst]), alpha=(alpha_src, alpha_dst))
            outs[dst].append(F.relu(out))
        types = sorted(outs)
        counts = dict(zip(types, host_all_reduce([h[t].size(0) for t in types], group=call.group), strict=True))
        out_dict, attn_dict = {}, {}
        for t, xs in outs.items():
            out_dict[t], attn_dict[t] = semantic_attention(self, xs, counts[t], call.group)
        if return_semantic_attention_weights:
            return out_dict, attn_dict
        return out_dict


def semantic_attention(conv: HANConv, xs: list[Tensor], count: int, group: Any) -> tuple[Tensor | None, Tensor | None]:
    r"""PyG's ``han_conv.group`` over a partitioned node type: the relations' outputs ``xs`` (this
    rank's rows) combined by :math:`\beta` of the module doc, its mean over the ``count`` nodes of
    all ranks.

    Shapes:
        - **input:** ``xs``: relations ``[n, out_channels]`` each (``n`` owned rows)
        - **output:** ``[n, out_channels]`` and :math:`\beta` ``[len(xs)]`` (``None``, ``None``
          without relations; ``[0, out_channels]``, ``None`` for a type without nodes)
    """
    if not xs:
        return None, None
    out = torch.stack(xs)
    if count == 0:  # PyG: out.numel() == 0
        return out.view(0, out.size(-1)), None
    mean = row_all_reduce(torch.tanh(conv.k_lin(out)).sum(dim=1), group) / count
    attn = torch.softmax((conv.q * mean).sum(dim=-1), dim=0)
    return torch.sum(attn.view(len(xs), 1, -1) * out, dim=0), attn
