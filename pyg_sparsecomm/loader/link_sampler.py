r"""How :class:`~pyg_sparsecomm.loader.DistributedLinkNeighborLoader` samples a homogeneous shard: a batch's
seeds are every endpoint of its pairs, sampled by the node loader of the shard; a rank holds the pairs whose
source it owns, and their targets owned elsewhere come through one exchange per batch."""
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from ..comm.group import raise_together
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..graph.validate import check_edge_index
from ..link.pairs import DistributedPairs, endpoint_plan
from ..link.partition_vector import partition_vector
from ..plan.homogeneous import RankPlan, owner_rows
from ..sampling.link_rules import check_batch_size
from .batch_pair_index import BatchPairIndex, TargetIndex, TargetRows
from .neighbor_loader import DistributedNeighborLoader

#: a batch's pairs over all ranks: ``(pairs, labels, pair_id, num_positive)`` (:meth:`LinkBatching.batch_pairs`)
BatchPairs = tuple[Tensor, Tensor | None, Tensor, int]


class HomoLinkSampler:
    r"""The link sampling of a homogeneous shard (the strategy a ``Data`` shard gets).

    Args:
        local (torch_geometric.data.Data): the rank's shard (``shard(data)``).
        num_neighbors (Sequence[int]): fanout per hop (``-1``: all in-edges).
        edge_label_index (torch.Tensor): ``[2, m]`` the whole graph's supervision pairs (global ids).
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
        loader (str): the loader's name, in errors.
        neg_sampling (str or None): ``None``, ``"binary"`` or ``"triplet"``.
        amount (float): negatives per positive.
        batch_size (int): pairs per batch, on average.
        seed (int): the random stream shared by all ranks.
    """

    def __init__(self, local: Data, num_neighbors: Any, edge_label_index: Tensor, group: dist.ProcessGroup | None,
                 loader: str, *, neg_sampling: str | None, amount: float, batch_size: int, seed: int) -> None:
        self.nodes = DistributedNeighborLoader(local, num_neighbors, batch_size=1, seed=seed, group=group, prefetch=0)
        self.group, self.neg_sampling, self.amount = group, neg_sampling, amount
        num_nodes = self.nodes.num_nodes
        def check() -> None:  # a rank's bad pairs or batch_size raise on every rank
            check_edge_index(edge_label_index, num_nodes, "edge_label_index")
            check_batch_size(batch_size)
        raise_together(check, loader, group, flag_first=True)
        self.pairs, self.end_sizes = edge_label_index, (num_nodes, num_nodes)
        self.identity: dict[str, Any] = {}  # what every rank must agree on besides the pairs and the batching

    def partition(self) -> None:
        """Gathers the owner of every node (from the shards' ``n_id``, once; collective)."""
        self.part = partition_vector(self.nodes.local, self.group)

    def sample(self, epoch: int, b: int, drawn: BatchPairs) -> Data:
        """Batch ``b`` of ``epoch`` on this rank from its pairs over all ranks (``drawn``); collective.

        Args:
            epoch (int): the epoch.
            b (int): the batch.
            drawn (Tuple[torch.Tensor, torch.Tensor or None, torch.Tensor, int]): the batch's pairs over all
                ranks, their labels, their positions and the number of positives.
        """
        pairs, label, pair_id, num_positive = drawn
        seeds = torch.unique(pairs.reshape(-1)).numpy()  # sorted global ids
        rank, part, P = group_rank(self.group), self.part, group_world_size(self.group)
        n_id = self.nodes.seed_n_id
        mine = seeds[part[seeds] == rank]
        batch = self.nodes.sample(epoch, b, torch.searchsorted(n_id, torch.from_numpy(mine).to(n_id.device)))
        # every seed's row on its owner: its position among that owner's seeds (seeds come first, by id)
        _, seed_row = owner_rows(part[seeds], P)
        held = np.flatnonzero(part[pairs[0].numpy()] == rank)
        ends = pairs[:, torch.from_numpy(held)].numpy().reshape(-1)
        at = np.searchsorted(seeds, ends)
        plan, column = endpoint_plan(ends, part[ends], seed_row[at], batch.n_id.cpu(), self.end_sizes[0],
                                     np.bincount(part[seeds], minlength=P).tolist(), self.nodes.sample_group)
        index = column.view(2, -1)
        held_t = torch.from_numpy(held)
        edge_label = None if label is None else label[held_t]
        batch.pairs = DistributedPairs(pairs[:, held_t], edge_label, pair_id[held_t], index, plan,
                                       int(pairs.size(1)), self.group)
        batch.edge_label_index_global = pairs[:, held_t]
        batch.num_positive_pairs = int((held < num_positive).sum())
        batch.input_id = pair_id[held_t[held_t < num_positive]]
        batch.batch_index = b
        return self._pair_indices(batch, plan, index, pairs[:, held_t], edge_label)

    def _pair_indices(self, batch: Data, plan: RankPlan, index: Tensor, held_pairs: Tensor,
                      edge_label: Tensor | None) -> Data:
        """PyG's pair attributes of the batch: ``edge_label_index`` and ``edge_label``, or ``src_index``,
        ``dst_pos_index``, ``dst_neg_index`` (triplet); the targets share one exchange over ``plan``."""
        for key in ("edge_label_index", "edge_label", "edge_label_time"):  # the shard's own, as PyG drops them
            if key in batch:
                del batch[key]
        if self.neg_sampling != "triplet":
            rows = TargetRows(plan, None, 1, self.group)
            target = TargetIndex(rows, 0, index[1], held_pairs[1])
            batch.edge_label_index = BatchPairIndex(index[0], target, held_pairs)
            batch.edge_label = edge_label
            return batch
        k = batch.num_positive_pairs  # the held positives, then their negatives ([k, amount], by positive)
        per = int(self.amount)
        rows = TargetRows(plan, None, 2, self.group)
        neg_shape = (k, per) if per > 1 else (k,)  # PyG squeezes one negative per positive
        batch.src_index = index[0, :k]
        batch.dst_pos_index = TargetIndex(rows, 0, index[1, :k], held_pairs[1, :k])
        batch.dst_neg_index = TargetIndex(rows, 1, index[1, k:].view(neg_shape), held_pairs[1, k:].view(neg_shape))
        return batch
