r"""``DistributedLinkNeighborLoader``: PyG's ``LinkNeighborLoader`` over a partitioned graph, homogeneous
(``Data``, below) or heterogeneous (``HeteroData``: :mod:`.hetero_link_sampler`), as PyG's takes both.

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
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..comm.group import twin_group
from ..comm.group import world_size as group_world_size
from ..link.same_pairs import check_same_pairs
from ..sampling.link_rules import LinkBatching, negative_sampling_mode, supervision_labels
from .hetero_link_sampler import HeteroLinkSampler
from .link_sampler import HomoLinkSampler
from .prefetch import PrefetchedBatches, closing
from .pyg_options import prefetch_depth


class DistributedLinkNeighborLoader:
    r"""Mini-batches of supervision pairs and the sampled neighbourhoods of their endpoints (see the
    module docstring); every rank iterates it together.  A ``HeteroData`` shard is sampled by
    :class:`~.hetero_link_sampler.HeteroLinkSampler`: the pairs of one relation,
    ``edge_label_index=(edge_type, pairs)``, their attributes on ``batch[edge_type]`` (``src_index`` on
    ``batch[src]``, ``dst_pos_index`` and ``dst_neg_index`` on ``batch[dst]``).

    Args:
        local (torch_geometric.data.Data or torch_geometric.data.HeteroData): the rank's shard (``shard(data)``
            or ``shard(hetero_data)``).
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]): fanout per hop (``-1``: all in-edges);
            on a heterogeneous shard one list for every relation or a dict naming every relation (``0``: none).
        edge_label_index (torch.Tensor or Tuple[Tuple[str, str, str], torch.Tensor]): ``[2, m]`` the whole graph's
            supervision pairs (global ids), the same on every rank; on a heterogeneous shard
            ``(edge_type, pairs)``, the pairs in global ids of the relation's two end types.
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
          batch's node rows (``batch[edge_type]``'s: ``z_dict[src]`` and ``z_dict[dst]``) and whose
          ``edge_label`` is :math:`(|\mathcal{E}_b|)` for the :math:`|\mathcal{E}_b|` pairs (with negatives)
          this rank scores; with ``"triplet"``, ``src_index`` :math:`(k)`, ``dst_pos_index`` :math:`(k)`,
          ``dst_neg_index`` :math:`(k, \text{amount})`
    """

    sampler: HomoLinkSampler | HeteroLinkSampler  # the strategy of the shard's kind

    def __init__(self, local: Data | HeteroData, num_neighbors: Any, edge_label_index: Any,
                 edge_label: Tensor | None = None, neg_sampling: Any = None, batch_size: int = 1,
                 shuffle: bool = False, seed: int = 0, group: dist.ProcessGroup | None = None,
                 neg_sampling_ratio: float | None = None, amount: float | None = None, prefetch: int | None = None,
                 **pyg_options: Any) -> None:
        neg_sampling, self.amount = negative_sampling_mode(neg_sampling, amount, neg_sampling_ratio)
        kind = HeteroLinkSampler if isinstance(local, HeteroData) else HomoLinkSampler
        # checks the pairs and batch_size on every rank, makes the node loader of the shard
        self.sampler = kind(local, num_neighbors, edge_label_index, group, type(self).__name__,
                            neg_sampling=neg_sampling, amount=self.amount, batch_size=batch_size, seed=seed)
        self.nodes = self.sampler.nodes
        self._prefetching(prefetch, pyg_options, group)
        self.edge_label_index = self.sampler.pairs.cpu()
        m = self.edge_label_index.size(1)
        self.edge_label = supervision_labels(edge_label, m, neg_sampling, self.amount)
        self.neg_sampling = neg_sampling
        self.batch_size, self.shuffle, self.seed, self.group = batch_size, shuffle, seed, group
        self.rule = LinkBatching(m, batch_size, *self.sampler.end_sizes, neg_sampling, self.amount, bool(shuffle),
                                 seed)
        self.num_batches = self.rule.num_batches
        self.sampler.partition()
        self.epoch = 0
        check_same_pairs(self.edge_label_index, type(self).__name__, group,
                         {**self.sampler.identity, "neg_sampling": self.neg_sampling, "amount": self.amount,
                          "batch_size": self.batch_size, "shuffle": self.shuffle, "seed": self.seed,
                          "prefetching": bool(self.prefetch)})

    def _prefetching(self, prefetch: int | None, pyg_options: dict[str, Any], group: dist.ProcessGroup | None) -> None:
        """Batches sampled ahead (``prefetch``, or PyG's ``num_workers``: :mod:`.pyg_options`), on a
        thread whose exchanges run on a gloo group of their own, as the node loaders' (:mod:`.prefetch`)."""
        self.prefetch = prefetch_depth(prefetch, pyg_options, type(self).__name__,
                                       inspect.signature(type(self).__init__).parameters)
        self.sample_group = (twin_group(group, backend="gloo") if self.prefetch and group_world_size(group) > 1
                             else group)
        self.nodes.sample_group = self.sample_group
        self._running: PrefetchedBatches | None = None

    def __len__(self) -> int:
        return int(np.count_nonzero(np.bincount(self.pair_batches(self.epoch), minlength=self.num_batches)))

    def pair_batches(self, epoch: int) -> np.ndarray:
        """``[m]`` the batch of every pair in ``epoch`` (no communication)."""
        return self.rule.pair_batches(epoch)

    def batch_pairs(self, epoch: int, b: int) -> tuple[Tensor, Tensor | None, Tensor, int]:
        """Batch ``b``'s pairs over all ranks: ``(pairs, labels, pair_id, num_positive)`` in global ids
        (positives first; ``pair_id`` ``-1`` for negatives).  The same on every rank."""
        return self.rule.batch_pairs(epoch, b, self.edge_label_index, self.edge_label)

    def __iter__(self) -> Iterator[Any]:
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

    def sample(self, epoch: int, b: int) -> Any:
        """Batch ``b`` of ``epoch`` on this rank; collective (the strategy's ``sample``).

        Args:
            epoch (int): the epoch.
            b (int): the batch.
        """
        return self.sampler.sample(epoch, b, self.batch_pairs(epoch, b))

    def __repr__(self) -> str:
        extra: dict[str, Any] = {"neg_sampling": self.neg_sampling, "batch_size": self.batch_size}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in extra.items())})"

