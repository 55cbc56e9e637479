r"""How link mini-batches are drawn: PyG's ``LinkNeighborLoader`` batches of supervision pairs and
their negatives, by the counter-based hashes of :mod:`.randomness`.

The whole graph's :math:`m` supervision pairs (the same on every rank) fall in
:math:`B = \lceil m / b \rceil` batches (``b`` = ``batch_size``):

* pair :math:`k` falls in batch :math:`\lfloor u(s, e, k) \cdot B \rfloor` (``e`` the epoch when
  shuffling, else 0): ``batch_size`` pairs per batch on average;
* ``"binary"``: :math:`\lceil \text{amount} \cdot m_b \rceil` negatives per batch, the source of
  negative :math:`j` uniform over the :math:`N_{src}` source nodes, :math:`\lfloor u(s, e, b, 0, j)
  N_{src} \rfloor`, its target :math:`\lfloor u(s, e, b, 1, j) N_{dst} \rfloor` (as PyG's loaders
  draw them, without rejecting edges); labels as PyG's: 1 for the positives (given labels, plus 1 if
  they hold a 0: done by the loader), 0 for the negatives;
* ``"triplet"``: ``amount`` negative targets per positive pair, uniform over the :math:`N_{dst}`
  destination nodes; negative :math:`j` belongs to positive :math:`\lfloor j / \text{amount} \rfloor`.

Every choice is a function of pair positions and the batch: a batch is the same for any partition and
any ``P``.  On a homogeneous graph :math:`N_{src} = N_{dst} = N`; on a heterogeneous one the
numbers of nodes of the relation's two end types.
"""
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .hetero_rules import HeteroNeighborSampling, relation_graphs, seeded_batch
from .randomness import bucket, stream_key, uniform

_PAIR_BATCHES, _NEGATIVES = 21, 22  # stream names


def check_batch_size(batch_size: Any) -> None:
    """Raises ``ValueError`` unless ``batch_size`` (a link loader's pairs per batch) is a positive integer."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer (supervision pairs per batch), got {batch_size!r}: "
                         f"pass batch_size >= 1")


@dataclass(frozen=True)
class LinkBatching:
    r"""Supervision pairs in batches, with negatives (see the module docstring).

    Args:
        num_pairs (int): the whole graph's supervision pairs :math:`m`.
        batch_size (int): pairs per batch, on average.
        num_src_nodes (int): nodes a negative's source is drawn from.
        num_dst_nodes (int): nodes a negative's target is drawn from.
        neg_sampling (str, optional): ``None``, ``"binary"`` or ``"triplet"``. (default: :obj:`None`)
        amount (float, optional): negatives per positive. (default: :obj:`1.0`)
        shuffle (bool, optional): new batches every epoch. (default: :obj:`False`)
        seed (int, optional): the random stream shared by all ranks. (default: :obj:`0`)
    """
    num_pairs: int
    batch_size: int
    num_src_nodes: int
    num_dst_nodes: int
    neg_sampling: str | None = None
    amount: float = 1.0
    shuffle: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check_batch_size(self.batch_size)

    @property
    def num_batches(self) -> int:
        """Batches an epoch draws from (those without pairs are skipped)."""
        return max(1, math.ceil(self.num_pairs / self.batch_size))

    def pair_batches(self, epoch: int) -> np.ndarray:
        """``[m]`` the batch of every pair in ``epoch`` (no communication)."""
        key = stream_key(self.seed, _PAIR_BATCHES, epoch if self.shuffle else 0)
        return bucket(key, torch.arange(self.num_pairs), self.num_batches).numpy()

    def batch_pairs(self, epoch: int, b: int, edge_label_index: Tensor, edge_label: Tensor | None = None
                    ) -> tuple[Tensor, Tensor | None, Tensor, int]:
        """Batch ``b``'s pairs over all ranks: ``(pairs, labels, pair_id, num_positive)`` in global ids
        (positives first, by position; ``pair_id`` ``-1`` for negatives).  The same on every rank.

        Args:
            epoch (int): the epoch.
            b (int): the batch.
            edge_label_index (torch.Tensor): ``[2, m]`` the whole graph's pairs (on the CPU).
            edge_label (torch.Tensor, optional): ``[m]`` their labels (already shifted for
                ``"binary"``, :func:`supervision_labels`). (default: :obj:`None`)
        """
        pair_id = torch.from_numpy(np.flatnonzero(self.pair_batches(epoch) == b))
        pos = edge_label_index[:, pair_id]
        label = None if edge_label is None else edge_label[pair_id]
        if self.neg_sampling is None:
            return pos, label, pair_id, pos.size(1)
        if self.neg_sampling == "binary":
            num = math.ceil(self.amount * pos.size(1))
            src = self.uniform_nodes(epoch, b, 0, num, self.num_src_nodes)
            dst = self.uniform_nodes(epoch, b, 1, num, self.num_dst_nodes)
            positive = torch.ones(pos.size(1)) if label is None else label
            label = torch.cat([positive, positive.new_zeros((num,) + tuple(positive.shape[1:]))])
        else:
            per = int(self.amount)
            src = pos[0].repeat_interleave(per)
            dst = self.uniform_nodes(epoch, b, 1, pos.size(1) * per, self.num_dst_nodes)
        neg = torch.stack([src, dst])
        return (torch.cat([pos, neg], dim=1), label, torch.cat([pair_id, torch.full((neg.size(1),), -1)]),
                pos.size(1))

    def uniform_nodes(self, epoch: int, b: int, end: int, num: int, num_nodes: int) -> Tensor:
        """``[num]`` node ids uniform over ``num_nodes``: the ``end`` (0: source, 1: target) of batch
        ``b``'s negatives."""
        u = uniform(stream_key(self.seed, _NEGATIVES, epoch, b, end), np.arange(num, dtype=np.int64))
        return torch.from_numpy(np.minimum((u * num_nodes).astype(np.int64), max(num_nodes - 1, 0)))


def negative_sampling_mode(neg_sampling: Any, amount: float | None, neg_sampling_ratio: float | None
                           ) -> tuple[str | None, float]:
    """``(mode, amount)`` of a loader's ``neg_sampling`` (``None``, ``"binary"``, ``"triplet"`` or PyG's
    ``NegativeSampling``) and negatives per positive; raises ``ValueError`` naming what is supported.
    PyG's older ``neg_sampling_ratio``, when nonzero, means binary negatives at that ratio, whatever
    ``neg_sampling`` says (as PyG's ``LinkLoader`` reads it)."""
    if neg_sampling_ratio is not None and neg_sampling_ratio != 0.0:
        neg_sampling, amount = "binary", neg_sampling_ratio
    if hasattr(neg_sampling, "mode"):  # PyG's NegativeSampling(mode, amount, src_weight, dst_weight)
        if getattr(neg_sampling, "src_weight", None) is not None or \
                getattr(neg_sampling, "dst_weight", None) is not None:
            raise ValueError("NegativeSampling with src_weight / dst_weight is not supported here: negatives are "
                             "drawn uniformly over the nodes")
        amount = neg_sampling.amount if amount is None else amount
        neg_sampling = getattr(neg_sampling.mode, "value", neg_sampling.mode)
    if neg_sampling not in (None, "binary", "triplet"):
        raise ValueError(f"neg_sampling must be None, 'binary' or 'triplet' (as PyG's LinkNeighborLoader), "
                         f"got {neg_sampling!r}")
    amount = float(amount if amount is not None else 1.0)
    if not amount > 0:  # also NaN
        raise ValueError(f"the negatives per positive pair (neg_sampling_ratio, or NegativeSampling's amount) must be "
                         f"> 0, got {amount}: pass a positive ratio, or neg_sampling=None for no negatives")
    if neg_sampling == "triplet" and (amount < 1 or amount != int(amount)):
        raise ValueError(f"triplet negative sampling draws a whole number of negatives per pair, got {amount}")
    return neg_sampling, amount


def supervision_labels(edge_label: Tensor | None, num_pairs: int, neg_sampling: str | None,
                       amount: float) -> Tensor | None:
    """The pairs' labels on the CPU as PyG's loaders keep them (``"binary"``: plus 1 if they hold a 0, which
    then marks the negatives); raises ``ValueError`` for a wrong count, or labels with ``"triplet"``."""
    if edge_label is None:
        return None
    if neg_sampling == "triplet":
        raise ValueError("edge_label must be None for neg_sampling='triplet' (as in PyG): the batch's pairs are "
                         "its positives, then their negatives")
    if edge_label.dim() < 1 or edge_label.size(0) != num_pairs:
        raise ValueError(f"edge_label must hold one label per pair ({num_pairs}), got shape {list(edge_label.shape)}")
    edge_label = edge_label.cpu()
    if neg_sampling == "binary" and num_pairs and edge_label.min() == 0:
        edge_label = edge_label + 1  # as PyG: 0 now marks the negatives
    return edge_label


def link_seeds(pairs: Tensor, edge_type: tuple[str, str, str] | None = None) -> dict[str, np.ndarray]:
    """The seeds of a batch of ``pairs`` (global ids) per node type, sorted: the sources of type
    ``edge_type[0]`` and the targets of type ``edge_type[2]``, both ends together when the types are
    one (PyG's ``LinkNeighborLoader`` on ``HeteroData``); key ``""`` without an ``edge_type``."""
    src, _, dst = edge_type if edge_type is not None else ("", "", "")
    if src == dst:
        return {src: torch.unique(pairs.reshape(-1)).numpy()}
    return {src: torch.unique(pairs[0]).numpy(), dst: torch.unique(pairs[1]).numpy()}


def hetero_link_global_batches(data, sampling: HeteroNeighborSampling, rule: LinkBatching,
                               edge_type: tuple[str, str, str], edge_label_index: Tensor,
                               edge_label: Tensor | None = None, epoch: int = 0) -> list:
    """Every non-empty batch of ``epoch`` of a heterogeneous link loader on the whole ``HeteroData``
    ``data``, in one process, by the rules the distributed loader follows (it yields the same batches,
    split over the ranks): ``(pairs, labels, pair_id, num_positive, neighbourhood)`` per batch, the last a
    :class:`~.hetero_rules.HeteroGlobalBatch` of the pairs' seeds (:func:`link_seeds`).

    Args:
        data (torch_geometric.data.HeteroData): the whole graph.
        sampling (HeteroNeighborSampling): the neighbourhood rule (``num_neighbors`` per relation, ``seed``).
        rule (LinkBatching): the pairs' rule.
        edge_type (tuple[str, str, str]): the pairs' relation.
        edge_label_index (torch.Tensor): ``[2, m]`` the pairs (global ids of the two end types).
        edge_label (torch.Tensor, optional): ``[m]`` their labels, as given to the loader.
            (default: :obj:`None`)
        epoch (int, optional): the epoch. (default: :obj:`0`)

    Shapes:
        - **input:** pairs :math:`(2, m)`, labels :math:`(m)` *(optional)*, global ids
        - **output:** per batch its pairs :math:`(2, m_b)` (positives first, then the negatives), labels
          :math:`(m_b)` (binary), ``pair_id`` :math:`(m_b)` and the neighbourhood's ``n_id`` / ``e_id`` per type
    """
    labels = supervision_labels(edge_label, rule.num_pairs, rule.neg_sampling, rule.amount)
    graphs = relation_graphs(data, sampling)
    sizes = {t: int(data[t].num_nodes) for t in data.node_types}
    out = []
    counts = np.bincount(rule.pair_batches(epoch), minlength=rule.num_batches)
    for b in np.flatnonzero(counts):
        pairs, label, pair_id, num_positive = rule.batch_pairs(epoch, int(b), edge_label_index.cpu(), labels)
        hood = seeded_batch(sampling, epoch, int(b), link_seeds(pairs, edge_type), graphs, sizes)
        out.append((pairs, label, pair_id, num_positive, hood))
    return out
