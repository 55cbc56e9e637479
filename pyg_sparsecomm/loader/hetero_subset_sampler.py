r"""How :class:`~pyg_sparsecomm.loader.DistributedNodeSubsetLoader` samples a heterogeneous shard: random sets
of nodes of every type with the subgraph they induce in every relation.

The batches are those of :class:`~pyg_sparsecomm.sampling.hetero_subset_rules.HeteroNodeSubsetSampling`
on the whole graph, the same for any partition and ``P``: node :math:`v` of type :math:`t` falls in one
of :math:`\lceil N / b \rceil` batches (:math:`N` the nodes of every type) by a hash of its id in
``data.to_homogeneous()`` (:math:`v` plus the nodes of the types before :math:`t`), so a batch is the
homogeneous batch of ``data.to_homogeneous()`` split by type
(:func:`~pyg_sparsecomm.sampling.hetero_subset_rules.hetero_subset_global_batches` is the single-process
reference).  A batch's edges are every relation's edges whose two ends are in it; its seeds are its
members of the input type in ``input_nodes``.  Sampling needs no communication (each rank knows which
of its rows and halo columns a batch holds); the batch plan costs one request exchange for all source
types and one reply per source type.
"""
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..comm.group import raise_together
from ..sampling.hetero_rules import EdgeType
from ..sampling.hetero_subset_rules import HeteroNodeSubsetSampling
from .halo_requests import HaloRequests
from .hetero_batch import HeteroSampled, build_hetero_batch
from .shards import hetero_input_nodes, relation_adjs

Members = tuple[dict[str, Tensor], dict[str, Tensor]]  # the batch of every row per node type, of every halo column


class HeteroSubsetSampler:
    r"""The node-subset sampling of a heterogeneous shard (the strategy a ``HeteroData`` shard gets; see
    the module docstring).

    Args:
        local (torch_geometric.data.HeteroData): the rank's heterogeneous shard (``shard(hetero_data)``).
        input_nodes (str or Tuple[str, torch.Tensor or None]): ``(node type, ids or mask)`` or a node type;
            required (``None`` raises, naming these forms).
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
        **batching (optional): the rule's ``batch_size``, ``shuffle`` and ``seed``.
    """

    def __init__(self, local: HeteroData, input_nodes: Any, group: dist.ProcessGroup | None,
                 **batching: Any) -> None:
        # a bad input_nodes on one rank raises on every rank (its peers would wait in the next collective)
        self.input_type, self.input_nodes = raise_together(lambda: _input_nodes(local, input_nodes),
                                                           "DistributedNodeSubsetLoader(input_nodes=...)", group,
                                                           flag_first=True)
        node_types = tuple((t, int(local[t].global_num_nodes)) for t in local.node_types)
        self.sampling = HeteroNodeSubsetSampling(input_type=self.input_type, node_types=node_types, **batching)
        self.local = local
        self.adjs = relation_adjs(local, group)
        self.device = next(iter(self.adjs.values())).device
        self.row_ids = {t: local[t].n_id.to(self.device) for t in local.node_types}
        self.plans = {et[0]: a.plan for et, a in self.adjs.items()}
        self.halo_requests = HaloRequests(list(self.plans.values()))
        self.seed_n_id = self.row_ids[self.input_type]
        self.num_nodes = int(local[self.input_type].global_num_nodes)

    @staticmethod
    def num_members(local: HeteroData) -> int:
        """The nodes the epoch's batches split: the graph's, of every type.

        Args:
            local (torch_geometric.data.HeteroData): the rank's heterogeneous shard.
        """
        return sum(int(local[t].global_num_nodes) for t in local.node_types)

    def seed_batch(self, epoch: int, node_ids: Tensor, num_batches: int) -> Tensor:
        """The batch of every seed candidate of ``node_ids`` (global ids of the input type) in ``epoch``.

        Args:
            epoch (int): the epoch.
            node_ids (torch.Tensor): ``[k]`` global ids of the input type.
            num_batches (int): the epoch's batches.
        """
        return self.sampling.member_batch(epoch, self.input_type, node_ids, num_batches)

    def member_batches(self, epoch: int, num_batches: int) -> Members:
        """The batch of every row (per node type) and of every halo column (per source type) in ``epoch``.

        Args:
            epoch (int): the epoch.
            num_batches (int): the epoch's batches.
        """
        rule = self.sampling
        return ({t: rule.member_batch(epoch, t, ids, num_batches) for t, ids in self.row_ids.items()},
                {s: rule.member_batch(epoch, s, plan.halo_n_id, num_batches) for s, plan in self.plans.items()})

    @staticmethod
    def members(batches: Members, b: int) -> Members:
        """``(member, halo_member)`` masks of batch ``b`` from :meth:`member_batches`, per type.

        Args:
            batches (Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]): :meth:`member_batches`.
            b (int): the batch.
        """
        return {t: r == b for t, r in batches[0].items()}, {s: h == b for s, h in batches[1].items()}

    def sample(self, member: dict[str, Tensor], halo_member: dict[str, Tensor], input_mask: Tensor,
               group: dist.ProcessGroup | None) -> HeteroData:
        """The batch whose members are ``member`` (shard rows per node type) and ``halo_member`` (halo
        columns per source type), the seeds those of the input type in ``input_mask``; collective over ``group``.

        Args:
            member (Dict[str, torch.Tensor]): bool masks of the batch's rows, per node type.
            halo_member (Dict[str, torch.Tensor]): bool masks of the batch's halo columns, per source type.
            input_mask (torch.Tensor): bool mask of the input type's rows to score.
            group (torch.distributed.ProcessGroup or None): the group the plan's exchanges run on.
        """
        row_hop = {t: torch.where(m, 1, -1) for t, m in member.items()}
        row_hop[self.input_type] = torch.where(member[self.input_type], torch.where(input_mask, 0, 1), -1)
        edges: dict[EdgeType, Tensor] = {}
        cols: dict[str, list[Tensor]] = {s: [] for s in self.plans}
        for et, adj in self.adjs.items():
            source = torch.cat([member[et[0]], halo_member[et[0]]])
            pos = torch.nonzero(member[et[2]].index_select(0, adj.row()) & source.index_select(0, adj.col)).view(-1)
            edges[et] = pos
            cols[et[0]].append(adj.col.index_select(0, pos))
        asks = self.halo_requests.batch(group)
        asks.hop(list(cols.values()), 1)
        requests = {s: asks.requests(i) for i, s in enumerate(self.plans)}
        sampled = HeteroSampled(row_hop, edges, {et: torch.ones_like(p) for et, p in edges.items()}, requests,
                                int((row_hop[self.input_type] == 0).sum()))
        batch = build_hetero_batch(self.local, self.adjs, sampled, self.input_type, 1, group)
        for store in batch.node_stores:  # one level, no hops to trim (as the homogeneous subset batch)
            del store["num_sampled_nodes"]
        for store in batch.edge_stores:
            del store["num_sampled_edges"]
        return batch


def _input_nodes(local: HeteroData, input_nodes: Any) -> tuple[str, Any]:
    """``(node type, ids or mask)`` of ``input_nodes``, which a heterogeneous subset loader needs."""
    if input_nodes is None:
        raise ValueError(f"DistributedNodeSubsetLoader on a heterogeneous graph needs the seeds' node type: pass "
                         f"input_nodes=(node_type, mask or ids) or input_nodes=node_type, as PyG's loaders take it "
                         f"(node types: {local.node_types})")
    return hetero_input_nodes(local, input_nodes)
