r"""``DistributedLinkNeighborLoader``: PyG's ``LinkNeighborLoader`` over a partitioned graph.

A batch is drawn from the whole graph's supervision pairs ``edge_label_index`` (every rank passes
the same global pairs), by hashes of global ids, so it is the same for any partition and any ``P``:

* pair :math:`k` falls in batch :math:`\lfloor u(s, e, k) \cdot B \rfloor` of the
  :math:`B = \lceil m / b \rceil` batches of an epoch (``b`` = ``batch_size``; ``e`` the epoch when
  shuffling, else 0): ``batch_size`` pairs per batch on average;
* ``neg_sampling="binary"``: :math:`\lceil \text{amount} \cdot m_b \rceil` negatives per batch, source
  and target uniform over the nodes (as PyG's loaders draw them, without rejecting edges), node
  :math:`t` of negative :math:`j` being :math:`\lfloor u(s, e, b, j) N \rfloor`; labels as PyG's: 1 for
  the positives (given labels, plus 1 if they hold a 0), 0 for the negatives;
* ``neg_sampling="triplet"``: ``amount`` negative targets per positive pair, uniform over the nodes;
* the batch's seeds are every endpoint of its pairs, sampled from as
  :class:`~pyg_sparsecomm.loader.DistributedNeighborLoader` samples from its seeds (the same
  ``num_neighbors`` rule, the same ranks' exchanges).

A yielded batch is this rank's :class:`~pyg_sparsecomm.loader.DistributedNeighborLoader` batch of those
seeds (its rows: the seeds it owns first, by global id) holding the pairs whose source this rank owns,
as PyG's batch holds them (``out = model(batch.x, batch.edge_index)``):

* ``neg_sampling=None`` or ``"binary"``: ``batch.edge_label_index``, a
  :class:`~.batch_pair_index.BatchPairIndex`: ``out[batch.edge_label_index[0]]`` (the sources: this
  rank's rows) and ``out[batch.edge_label_index[1]]`` (the targets, those owned elsewhere brought by
  the batch's exchange) are the pairs' embeddings; ``batch.edge_label`` their labels;
* ``"triplet"``: ``batch.src_index`` (``[k]`` rows of the held positives' sources), ``batch.dst_pos_index``
  (``[k]``) and ``batch.dst_neg_index`` (``[k, amount]``, ``[k]`` for one), the last two
  :class:`~.batch_pair_index.TargetIndex` objects: ``out[batch.dst_pos_index]``;
* ``batch.input_id``: the held positives' positions in the global ``edge_label_index``.

Besides, ``batch.pairs`` is the :class:`~pyg_sparsecomm.link.DistributedPairs` of the held pairs (their
plan over the batch's rows: ``batch.pairs.gather(out)`` gives both endpoints' embeddings) and
``batch.edge_label_index_global`` their global ids; with ``"triplet"`` these pairs are the positives,
then every positive's ``amount`` negatives (``batch.num_positive_pairs`` positives on this rank).
"""
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..comm.group import raise_together, twin_group
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..graph.validate import check_edge_index
from ..link.pairs import DistributedPairs, endpoint_plan
from ..link.partition_vector import partition_vector
from ..link.same_pairs import check_same_pairs
from ..plan.homogeneous import RankPlan, owner_rows
from ..sampling.link_rules import LinkBatching, check_batch_size, negative_sampling_mode, supervision_labels
from .batch_pair_index import BatchPairIndex, TargetIndex, TargetRows
from .neighbor_loader import DistributedNeighborLoader
from .prefetch import PrefetchedBatches, closing
from .pyg_options import prefetch_depth


class DistributedLinkNeighborLoader:
    r"""Mini-batches of supervision pairs and the sampled neighbourhoods of their endpoints (see the
    module docstring); every rank iterates it together.

    Args:
        local (torch_geometric.data.Data): the rank's shard (``shard(data)``).
        num_neighbors (Sequence[int]): fanout per hop (``-1``: all in-edges).
        edge_label_index (torch.Tensor): ``[2, m]`` the whole graph's supervision pairs (global ids),
            the same on every rank.
        edge_label (torch.Tensor, optional): ``[m]`` their labels. (default: :obj:`None`)
        neg_sampling (str or NegativeSampling, optional): ``None``, ``"binary"`` or ``"triplet"`` (or PyG's
            ``NegativeSampling(mode, amount)``, without weights). (default: :obj:`None`)
        batch_size (int, optional): pairs per batch, on average. (default: :obj:`1`)
        shuffle (bool, optional): new batches every epoch. (default: :obj:`False`)
        seed (int, optional): the random stream shared by all ranks. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the process group. (default: the default group)
        neg_sampling_ratio (float, optional): when nonzero, binary negatives at this ratio
            per positive, whatever ``neg_sampling`` says (PyG's older keyword, read as PyG reads it).
            (default: :obj:`None`)
        amount (float, optional): negatives per positive, as ``NegativeSampling``'s ``amount``.
            (default: :obj:`1`)
        prefetch (int, optional): batches sampled ahead on a background thread, as
            :class:`~.neighbor_loader.DistributedNeighborLoader`'s (``0``: none). (default: :obj:`1`, or PyG's
            ``num_workers``)
        **pyg_options (optional): PyG loader keywords (``num_workers``, ``persistent_workers``, ...), as
            :class:`~.neighbor_loader.DistributedNeighborLoader` reads them (:mod:`~.pyg_options`).

    Shapes:
        - **input:** supervision pairs :math:`(2, |\mathcal{E}_{sup}|)`, labels
          :math:`(|\mathcal{E}_{sup}|)` *(optional)*, global on every rank
        - **output:** batches whose ``edge_label_index`` :math:`(2, |\mathcal{E}_b|)` indexes the
          batch's node rows and whose ``edge_label`` is :math:`(|\mathcal{E}_b|)` for the
          :math:`|\mathcal{E}_b|` pairs (with negatives) this rank scores; with ``"triplet"``,
          ``src_index`` :math:`(k)`, ``dst_pos_index`` :math:`(k)`, ``dst_neg_index`` :math:`(k, \text{amount})`
    """

    #: the subclass a heterogeneous shard gets (:mod:`.hetero_link_loader` registers itself)
    _heterogeneous: type["DistributedLinkNeighborLoader"] | None = None

    def __init_subclass__(cls, heterogeneous: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if heterogeneous:
            DistributedLinkNeighborLoader._heterogeneous = cls

    def __new__(cls, local: Any = None, *args: Any, **kwargs: Any) -> "DistributedLinkNeighborLoader":
        """A ``HeteroData`` shard gets the heterogeneous loader, as PyG's ``LinkNeighborLoader`` takes both."""
        if isinstance(local, HeteroData) and cls is DistributedLinkNeighborLoader and cls._heterogeneous is not None:
            return object.__new__(cls._heterogeneous)
        return object.__new__(cls)

    def __init__(self, local: Data, num_neighbors: Sequence[int], edge_label_index: Tensor,
                 edge_label: Tensor | None = None, neg_sampling: Any = None, batch_size: int = 1,
                 shuffle: bool = False, seed: int = 0, group: dist.ProcessGroup | None = None,
                 neg_sampling_ratio: float | None = None, amount: float | None = None, prefetch: int | None = None,
                 **pyg_options: Any) -> None:
        neg_sampling, self.amount = negative_sampling_mode(neg_sampling, amount, neg_sampling_ratio)
        self.nodes = DistributedNeighborLoader(local, num_neighbors, batch_size=1, seed=seed, group=group, prefetch=0)
        self._prefetching(prefetch, pyg_options, group)
        self.num_nodes = self.nodes.num_nodes
        def check() -> None:  # a rank's bad pairs or batch_size raise on every rank
            check_edge_index(edge_label_index, self.num_nodes, "edge_label_index")
            check_batch_size(batch_size)
        raise_together(check, type(self).__name__, group, flag_first=True)
        self.edge_label_index = edge_label_index.cpu()
        m = self.edge_label_index.size(1)
        self.edge_label = supervision_labels(edge_label, m, neg_sampling, self.amount)
        self.neg_sampling = neg_sampling
        self.batch_size, self.shuffle, self.seed, self.group = batch_size, shuffle, seed, group
        self.rule = LinkBatching(m, batch_size, self.num_nodes, self.num_nodes, neg_sampling, self.amount,
                                 bool(shuffle), seed)
        self.num_batches = self.rule.num_batches
        self.part = self._partition()
        self.epoch = 0
        check_same_pairs(self.edge_label_index, type(self).__name__, group,
                         {"neg_sampling": self.neg_sampling, "amount": self.amount, "batch_size": self.batch_size,
                          "shuffle": self.shuffle, "seed": self.seed, "prefetching": bool(self.prefetch)})

    def _prefetching(self, prefetch: int | None, pyg_options: dict[str, Any], group: dist.ProcessGroup | None) -> None:
        """Batches sampled ahead (``prefetch``, or PyG's ``num_workers``: :mod:`.pyg_options`), on a
        thread whose exchanges run on a gloo group of their own, as the node loaders' (:mod:`.prefetch`)."""
        self.prefetch = prefetch_depth(prefetch, pyg_options, type(self).__name__,
                                       inspect.signature(type(self).__init__).parameters)
        self.sample_group = (twin_group(group, backend="gloo") if self.prefetch and group_world_size(group) > 1
                             else group)
        self.nodes.sample_group = self.sample_group
        self._running: PrefetchedBatches | None = None

    def _partition(self) -> np.ndarray:
        """The owner of every node (gathered from the shards' ``n_id``, once)."""
        return partition_vector(self.nodes.local, self.group)

    def __len__(self) -> int:
        return int(np.count_nonzero(np.bincount(self.pair_batches(self.epoch), minlength=self.num_batches)))

    def pair_batches(self, epoch: int) -> np.ndarray:
        """``[m]`` the batch of every pair in ``epoch`` (no communication)."""
        return self.rule.pair_batches(epoch)

    def batch_pairs(self, epoch: int, b: int) -> tuple[Tensor, Tensor | None, Tensor, int]:
        """Batch ``b``'s pairs over all ranks: ``(pairs, labels, pair_id, num_positive)`` in global ids
        (positives first; ``pair_id`` ``-1`` for negatives).  The same on every rank."""
        return self.rule.batch_pairs(epoch, b, self.edge_label_index, self.edge_label)

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        self.epoch += 1
        counts = np.bincount(self.pair_batches(epoch), minlength=self.num_batches)
        batches = (self.sample(epoch, b) for b in range(self.num_batches) if counts[b])
        if not self.prefetch:
            return batches
        if self._running is not None:  # an epoch left early: its thread stops before this one samples
            self._running.close()
        self._running = PrefetchedBatches(batches, self.prefetch, self.nodes.device)
        return closing(self._running)

    def sample(self, epoch: int, b: int) -> Data:
        """Batch ``b`` of ``epoch`` on this rank; collective."""
        pairs, label, pair_id, num_positive = self.batch_pairs(epoch, b)
        seeds = torch.unique(pairs.reshape(-1)).numpy()  # sorted global ids
        rank, part = group_rank(self.group), self.part
        n_id = self.nodes.adj.plan.n_id
        mine = seeds[part[seeds] == rank]
        batch = self.nodes.sample(epoch, b, torch.searchsorted(n_id, torch.from_numpy(mine).to(n_id.device)))
        # every seed's row on its owner: its position among that owner's seeds (seeds come first, by id)
        _, seed_row = owner_rows(part[seeds], group_world_size(self.group))
        held = np.flatnonzero(part[pairs[0].numpy()] == rank)
        ends = pairs[:, torch.from_numpy(held)].numpy().reshape(-1)
        at = np.searchsorted(seeds, ends)
        plan, column = endpoint_plan(ends, part[ends], seed_row[at], batch.n_id.cpu(), self.num_nodes,
                                     np.bincount(part[seeds], minlength=group_world_size(self.group)).tolist(),
                                     self.sample_group)
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

    def __repr__(self) -> str:
        extra: dict[str, Any] = {"neg_sampling": self.neg_sampling, "batch_size": self.batch_size}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in extra.items())})"

