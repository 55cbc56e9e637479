r"""How :class:`~pyg_sparsecomm.loader.DistributedNodeSubsetLoader` samples a homogeneous shard: which of its
rows and halo columns a batch of :class:`~pyg_sparsecomm.sampling.NodeSubsetSampling` holds (a hash of their
global ids, no communication), the in-edges among them, then the batch's plan (one request exchange)."""
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from ..sampling.rules import NodeSubsetSampling
from .batch import Sampled, build_batch
from .halo_requests import HaloRequests
from .shards import shard_adj


class HomoSubsetSampler:
    r"""The node-subset sampling of a homogeneous shard (the strategy a ``Data`` shard gets).

    Args:
        local (torch_geometric.data.Data): the rank's shard (``shard(data)`` / ``load_shard``).
        input_nodes (torch.Tensor or None): the nodes to score, as :mod:`~.seeds` reads them.
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
        **batching (optional): the rule's ``batch_size``, ``shuffle`` and ``seed``.
    """

    def __init__(self, local: Data, input_nodes: Tensor | None, group: dist.ProcessGroup | None,
                 **batching: Any) -> None:
        self.sampling = NodeSubsetSampling(**batching)
        self.local, self.input_nodes = local, input_nodes
        self.adj = shard_adj(local, group)
        self.device = self.adj.device
        self.seed_n_id, self.num_nodes = self.adj.plan.n_id, int(self.adj.plan.num_nodes)
        self.halo_requests = HaloRequests([self.adj.plan])

    @staticmethod
    def num_members(local: Data) -> int:
        """The nodes the epoch's batches split: the graph's.

        Args:
            local (torch_geometric.data.Data): the rank's shard.
        """
        return int(local.global_num_nodes)

    def seed_batch(self, epoch: int, node_ids: Tensor, num_batches: int) -> Tensor:
        """The batch of every seed candidate of ``node_ids`` (global ids) in ``epoch``.

        Args:
            epoch (int): the epoch.
            node_ids (torch.Tensor): ``[k]`` global ids.
            num_batches (int): the epoch's batches.
        """
        return self.sampling.batch_of(epoch, node_ids, num_batches)

    def member_batches(self, epoch: int, num_batches: int) -> tuple[Tensor, Tensor]:
        """The batch of every row and of every halo column of the shard in ``epoch``.

        Args:
            epoch (int): the epoch.
            num_batches (int): the epoch's batches.
        """
        plan = self.adj.plan
        return self.sampling.batch_of(epoch, plan.n_id, num_batches), self.sampling.batch_of(
            epoch, plan.halo_n_id, num_batches)

    @staticmethod
    def members(batches: tuple[Tensor, Tensor], b: int) -> tuple[Tensor, Tensor]:
        """``(member, halo_member)`` masks of batch ``b`` from :meth:`member_batches`.

        Args:
            batches (Tuple[torch.Tensor, torch.Tensor]): :meth:`member_batches`.
            b (int): the batch.
        """
        return batches[0] == b, batches[1] == b

    def sample(self, member: Tensor, halo_member: Tensor, input_mask: Tensor, group: dist.ProcessGroup | None) -> Data:
        """The batch whose members are ``member`` (shard rows) and ``halo_member`` (halo columns), the
        seeds those in ``input_mask``; collective over ``group``.

        Args:
            member (torch.Tensor): ``[num_owned]`` bool, the batch's rows.
            halo_member (torch.Tensor): ``[num_halo]`` bool, the batch's halo columns.
            input_mask (torch.Tensor): ``[num_owned]`` bool, the rows to score.
            group (torch.distributed.ProcessGroup or None): the group the plan's exchanges run on.
        """
        adj = self.adj
        row_hop = torch.where(member, torch.where(input_mask, 0, 1), -1)
        source_member = torch.cat([member, halo_member])
        pos = torch.nonzero(member.index_select(0, adj.row()) & source_member.index_select(0, adj.col)).view(-1)
        asks = self.halo_requests.batch(group)
        asks.hop([[adj.col.index_select(0, pos)]], 1)
        sampled = Sampled(row_hop, pos, torch.ones_like(pos), int((row_hop == 0).sum()))
        return build_batch(self.local, adj, sampled, asks.requests(), None, group)
