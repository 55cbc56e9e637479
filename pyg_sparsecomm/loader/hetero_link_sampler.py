r"""How :class:`~pyg_sparsecomm.loader.DistributedLinkNeighborLoader` samples a heterogeneous shard (PyG's
``LinkNeighborLoader`` on ``HeteroData``).

The pairs of one relation :math:`(s, r, d)` fall in batches, with their negatives, by
:class:`~pyg_sparsecomm.sampling.link_rules.LinkBatching` (negative sources uniform over the
:math:`s` nodes, targets over the :math:`d` nodes); a batch's seeds are its pairs' sources (type
:math:`s`) and targets (type :math:`d`; both in one set when :math:`s = d`), sampled from per relation
as :class:`~.hetero_neighbor_sampler.HeteroNeighborSampler` samples (the same
``num_neighbors`` rule, the same exchanges).  Every choice is a function of global ids, so a batch
is the same for any partition and ``P`` (:func:`~pyg_sparsecomm.sampling.link_rules.hetero_link_global_batches`
is the single-process reference).

A rank holds the batch's pairs whose source it owns.  As PyG's batch, this rank's ``HeteroData`` carries
(besides the node loader's ``x_dict``, ``adj_dict``, ``n_id``, ``num_sampled_nodes``, ...):

* ``neg_sampling=None`` or ``"binary"``: ``batch[edge_type].edge_label_index`` (a
  :class:`~.batch_pair_index.BatchPairIndex`: ``z_dict[s][edge_label_index[0]]`` and
  ``z_dict[d][edge_label_index[1]]`` are the pairs' embeddings, the targets owned elsewhere brought by
  the batch's exchange; ``.global_ids`` the pairs), ``batch[edge_type].edge_label`` (PyG's labels:
  given labels, plus 1 if they hold a 0, for the positives; 0 for the negatives);
* ``"triplet"``: ``batch[s].src_index`` (``[k]`` rows of the held positives' sources),
  ``batch[d].dst_pos_index`` (``[k]``) and ``batch[d].dst_neg_index`` (``[k, amount]``, ``[k]`` for one),
  :class:`~.batch_pair_index.TargetIndex` objects: ``z_dict[d][batch[d].dst_pos_index]``;
* ``batch[edge_type].input_id``: the held positives' positions in the global ``edge_label_index``.

The positives come first, as PyG's; a model's loss over the pairs of all ranks is
:func:`~pyg_sparsecomm.distributed_loss` of the held ones.
"""
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..comm.group import raise_together
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..link.hetero_pairs import check_pair_ids, type_partitions
from ..link.pair_exchange import endpoint_plan
from ..plan.homogeneous import owner_rows
from ..sampling.link_rules import check_batch_size, link_seeds
from .batch_pair_index import BatchPairIndex, TargetIndex, TargetRows
from .hetero_batch import build_hetero_batch
from .hetero_neighbor_sampler import HeteroNeighborSampler
from .link_sampler import BatchPairs
from .neighbor_loader import DistributedNeighborLoader

EdgeType = tuple[str, str, str]
_SUPERVISION = ("edge_label_index", "edge_label", "edge_label_time")  # the shard keeps these whole


class HeteroLinkSampler:
    r"""The link sampling of a heterogeneous shard (the strategy a ``HeteroData`` shard gets; see the
    module docstring).

    Args:
        local (torch_geometric.data.HeteroData): the rank's heterogeneous shard (``shard(hetero_data)``).
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]): fanouts per hop, one list for
            every relation or a dict naming every relation.
        edge_label_index (Tuple[Tuple[str, str, str], torch.Tensor]): ``(edge_type, pairs)``: the relation
            and its ``[2, m]`` supervision pairs in global ids of its two end types.
        group (torch.distributed.ProcessGroup or None): the process group (``None``: the default group).
        loader (str): the loader's name, in errors.
        neg_sampling (str or None): ``None``, ``"binary"`` or ``"triplet"``.
        amount (float): negatives per positive.
        batch_size (int): pairs per batch, on average.
        seed (int): the random stream shared by all ranks.
    """

    def __init__(self, local: HeteroData, num_neighbors: Any, edge_label_index: Any,
                 group: dist.ProcessGroup | None, loader: str, *, neg_sampling: str | None, amount: float,
                 batch_size: int, seed: int) -> None:
        self.edge_type, pairs = supervision_relation(local, edge_label_index)
        src, _, dst = self.edge_type
        sizes = {t: int(local[t].global_num_nodes) for t in (src, dst)}
        def check() -> None:  # a rank's bad pairs or batch_size raise on every rank
            check_pair_ids(pairs, self.edge_type, sizes[src], sizes[dst])
            check_batch_size(batch_size)
        raise_together(check, loader, group, flag_first=True)
        self.pairs, self.end_sizes = pairs, (sizes[src], sizes[dst])
        self.group, self.neg_sampling, self.amount, self.local = group, neg_sampling, amount, local
        seed_type: Any = src  # the node loader takes PyG's input_nodes=node_type
        self.nodes = DistributedNeighborLoader(local, num_neighbors, batch_size=1, input_nodes=seed_type,
                                               seed=seed, group=group, prefetch=0)
        self.node_sampler = cast(HeteroNeighborSampler, self.nodes.sampler)  # a HeteroData shard's
        self.identity: dict[str, Any] = {"edge_type": self.edge_type}  # what every rank must agree on

    def partition(self) -> None:
        """Gathers the owner of every node of the relation's two end types (once; collective)."""
        self.parts = type_partitions(self.local, self.edge_type, self.group)

    def sample(self, epoch: int, b: int, drawn: BatchPairs) -> HeteroData:
        """Batch ``b`` of ``epoch`` on this rank from its pairs over all ranks (``drawn``); collective.

        Args:
            epoch (int): the epoch.
            b (int): the batch.
            drawn (Tuple[torch.Tensor, torch.Tensor or None, torch.Tensor, int]): the batch's pairs over all
                ranks, their labels, their positions and the number of positives.
        """
        pairs, label, pair_id, num_positive = drawn
        seeds = link_seeds(pairs, self.edge_type)
        rank, nodes = group_rank(self.group), self.node_sampler
        mine = {t: ids[self.parts[t][ids] == rank] for t, ids in seeds.items()}
        rows = {t: torch.searchsorted(nodes.row_ids[t], torch.from_numpy(ids).to(nodes.device))
                for t, ids in mine.items()}
        group = self.nodes.sample_group
        sampled = nodes.sample_from(epoch, b, rows, group)
        batch = build_hetero_batch(nodes.local, nodes.adjs, sampled, nodes.input_type, nodes.sampling.num_hops,
                                   group)
        src, _, dst = self.edge_type
        for key in ("batch_size", "seed_mask"):  # the node loader's seeds: a link batch scores pairs
            del batch[src][key]
        for key in _SUPERVISION:
            if key in batch[self.edge_type]:
                del batch[self.edge_type][key]
        held = np.flatnonzero(self.parts[src][pairs[0].numpy()] == rank)
        if self.neg_sampling == "triplet":
            held = held[held < num_positive]  # the positives; each one's negatives follow them
        positive = torch.from_numpy(held[held < num_positive])
        source = torch.from_numpy(np.searchsorted(mine[src], pairs[0, torch.from_numpy(held)].numpy()))
        batch[self.edge_type].input_id = pair_id[positive]
        batch.batch_index = b
        if self.neg_sampling == "triplet":
            per = int(self.amount)
            negative = num_positive + torch.from_numpy(held)[:, None] * per + torch.arange(per)
            pos_t, neg_t = self._targets(pairs, seeds, [torch.from_numpy(held), negative], batch[dst].n_id)
            batch[src].src_index = source
            batch[dst].dst_pos_index = pos_t
            batch[dst].dst_neg_index = neg_t if per > 1 else _squeezed(neg_t)
        else:
            (target,) = self._targets(pairs, seeds, [torch.from_numpy(held)], batch[dst].n_id)
            held_t = torch.from_numpy(held)
            batch[self.edge_type].edge_label_index = BatchPairIndex(source, target, pairs[:, held_t])
            if label is not None:
                batch[self.edge_type].edge_label = label[held_t]
        return batch

    def _targets(self, pairs: Tensor, seeds: dict[str, np.ndarray], positions: list[Tensor],
                 batch_n_id: Tensor) -> list[TargetIndex]:
        """One :class:`~.batch_pair_index.TargetIndex` per tensor of pair ``positions`` (any shape), over
        one exchange of the targets this rank does not own (collective)."""
        dst, P = self.edge_type[2], group_world_size(self.group)
        part, dst_seeds = self.parts[dst], seeds[dst]
        ends = np.concatenate([pairs[1, p.reshape(-1)].numpy() for p in positions]).astype(np.int64)
        # every seed's row on its owner: its position among that owner's seeds (seeds come first, by id)
        _, seed_row = owner_rows(part[dst_seeds], P)
        at = np.searchsorted(dst_seeds, ends)
        plan, column = endpoint_plan(ends, part[ends], seed_row[at], batch_n_id.cpu(), part.size,
                                     np.bincount(part[dst_seeds], minlength=P).tolist(), self.nodes.sample_group)
        rows = TargetRows(plan, dst, len(positions), self.group)
        out, start = [], 0
        for view, p in enumerate(positions):
            cols = column[start:start + p.numel()].view(p.shape)
            out.append(TargetIndex(rows, view, cols, pairs[1, p.reshape(-1)].view(p.shape)))
            start += p.numel()
        return out


def _squeezed(index: TargetIndex) -> TargetIndex:
    """``dst_neg_index`` of one negative per positive: ``[k]``, as PyG squeezes it."""
    return TargetIndex(index.target_rows, index.view, index.column.view(-1), index.global_ids.view(-1))


def supervision_relation(local: Any, edge_label_index: Any) -> tuple[EdgeType, Tensor]:
    """``(edge_type, pairs)`` of PyG's ``edge_label_index=(edge_type, pairs)`` on a heterogeneous shard;
    raises ``ValueError`` naming the fix for another form, a relation the graph lacks, or an end type
    no relation leads to (the sampler follows in-edges, and a ``to_hetero`` encoder embeds only the
    destination types of relations)."""
    if not (isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2):
        raise ValueError(f"edge_label_index on a heterogeneous graph is (edge_type, pairs), as PyG's "
                         f"LinkNeighborLoader takes it, e.g. (('user', 'rates', 'item'), pairs); got "
                         f"{type(edge_label_index).__name__}")
    edge_type, pairs = edge_label_index
    edge_type = tuple(edge_type) if isinstance(edge_type, (tuple, list)) else edge_type
    if edge_type not in local.edge_types:
        raise ValueError(f"edge_label_index names edge type {edge_type!r}, which is not a relation of the graph: "
                         f"pass one of {local.edge_types}")
    if not isinstance(pairs, Tensor):
        raise ValueError(f"edge_label_index of {edge_type} needs the [2, m] supervision pairs of the whole graph (the "
                         f"same on every rank, e.g. data[edge_type].edge_label_index of RandomLinkSplit run before "
                         f"partitioning); got {type(pairs).__name__}")
    reached = {et[2] for et in local.edge_types}
    for end, node_type in (("source", edge_type[0]), ("destination", edge_type[2])):
        if node_type not in reached:
            raise ValueError(f"node type {node_type!r} (the {end} of {edge_type}) is the destination of no relation: "
                             f"the sampler follows in-edges, so it reaches no neighbour of its seeds, and a to_hetero "
                             f"encoder returns no embedding of it; add the reverse relations before partitioning "
                             f"(T.ToUndirected(), or a rev_ relation with the flipped edge_index), as PyG's "
                             f"heterogeneous link prediction does")
    return edge_type, pairs
