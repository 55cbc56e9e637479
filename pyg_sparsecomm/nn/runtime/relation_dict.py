r"""Layers that take a whole heterogeneous graph (``x_dict``, ``edge_index_dict``) on a shard.

``HGTConv`` and ``HANConv`` read every relation in one call; on a shard their
``edge_index_dict`` is ``local.adj_dict``, one :class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj`
per relation.  :func:`relation_call` checks the call on every rank and returns a
:class:`RelationCall`: the relations' local ``edge_index`` (sources ``[owned | halo]`` of the
source type, targets the owned destination rows) and the source types' plans, through which the
layer's distributed forward completes each source type's rows *once* (the halo of a source type
is the union over the relations reading it):

.. math::
    h_s \mapsto \begin{bmatrix} h_s \\ h_s[\mathrm{halo}(s)] \end{bmatrix}

Every target then sees exactly its in-edges over the completed rows, so the layer's messages,
softmaxes and sums are single-process PyG's.
"""
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...comm.group import check_plan_matches_group
from ...plan.halo_adj import HaloAdj
from ...plan.homogeneous import RankPlan
from ...plan.relation_adj import RelationAdj
from .hetero import check_relations, settings_refusal
from .port import exchange_rows

EdgeType = tuple[str, str, str]


@dataclass
class RelationCall:
    """One call of a multi-relation layer on a heterogeneous shard.

    Args:
        edge_index_dict (dict[EdgeType, Tensor]): the local ``edge_index`` of every relation.
        plans (dict[str, RankPlan]): the :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` of every source
            type read.
        group (torch.distributed.ProcessGroup, optional): the process group of the exchanges.
            (default: :obj:`None`, the default group)
        exchanged (list[str], optional): the source types this call exchanged so far. (default: :obj:`[]`)
    """
    edge_index_dict: dict[EdgeType, Tensor]
    plans: dict[str, RankPlan]
    group: dist.ProcessGroup | None = None
    exchanged: list[str] = field(default_factory=list)

    def extended(self, src: str, *rows: Tensor) -> list[Tensor]:
        r"""``cat[t, halo(t)]`` of each of ``rows`` (owned rows of source type ``src``, any trailing
        shape), in one exchange of their columns; once per source type and call.

        Shapes:
            - **input:** ``[num_owned(src), *]`` each
            - **output:** ``[num_owned(src) + halo_size(src), *]`` each
        """
        if src in self.exchanged:
            raise RuntimeError(f"source type {src!r} was already exchanged in this call: exchange every tensor a "
                               f"source type's messages read in one extended() call")
        self.exchanged.append(src)
        halos = exchange_rows(self.plans[src], self.group, list(rows), key=src)
        return [torch.cat([t, halo], dim=0) for t, halo in zip(rows, halos, strict=True)]


class RelationDictLayer:
    """Mixin of a layer whose forward runs on a heterogeneous shard's ``adj_dict`` itself (through
    :func:`relation_call`): ``DistributedHGTConv``, ``DistributedHANConv``, or a user's class given
    as a rule's ``distributed_class``.  Other layers called with an ``adj_dict`` are refused."""


def holds_relations(value: Any) -> bool:
    """Whether ``value`` is a dict holding a shard's adjacency (``local.adj_dict``)."""
    return isinstance(value, dict) and any(isinstance(v, HaloAdj) for v in value.values())


def relation_call(conv: MessagePassing, x_dict: dict[str, Any], edge_index_dict: dict[EdgeType, Any]
                  ) -> RelationCall | None:
    """The checked :class:`RelationCall` of ``conv(x_dict, edge_index_dict)`` on a shard, or ``None``
    when ``edge_index_dict`` holds plain graphs (the call is single-process PyG's).

    Raises ``NotImplementedError`` for settings the heterogeneous path does not run and
    ``ValueError`` (on every rank at once) for rows that do not match the shard."""
    if not holds_relations(edge_index_dict):
        return None
    name = type(conv).__name__
    others = [et for et, adj in edge_index_dict.items() if not isinstance(adj, RelationAdj)]
    if others:
        raise ValueError(f"{name}: edge_index_dict mixes a heterogeneous shard's relations with other graphs "
                         f"({others}): pass local.adj_dict")
    state = getattr(conv, "_sparsecomm", None)
    if state is None:
        raise ValueError(f"{name} got a heterogeneous shard's adj_dict but is not distributed: wrap the model with "
                         f"distribute() first")
    reason = settings_refusal(state)
    if reason:
        raise NotImplementedError(f"distribute(): {reason}")
    group = state.settings.group
    adjs: dict[EdgeType, RelationAdj] = edge_index_dict
    for adj in adjs.values():
        check_plan_matches_group(adj.plan.world_size, adj.plan.rank, group)
    check_relations(conv, state, [(adj, x_dict.get(et[0]), x_dict.get(et[2])) for et, adj in adjs.items()], group)
    return RelationCall({et: adj.edge_index() for et, adj in adjs.items()},
                        {et[0]: adj.plan for et, adj in adjs.items()}, group)
