r"""A shard's ``edge_label_index``: the pairs this rank holds, indexing embeddings as PyG's tensor does.

PyG's link prediction scores pairs with ``z[edge_label_index[0]]`` and ``z[edge_label_index[1]]``.
On a shard :math:`z` holds only the owned rows, so an endpoint owned elsewhere has no row here.
A :class:`PairIndex` keeps the global ids of the pairs this rank holds (the owner of a pair's
source holds it) and their exchange plan (:func:`~pyg_sparsecomm.link.local_pairs`): ``z[pairs[0]]``
and ``z[pairs[1]]`` are the sources' and targets' rows, those owned elsewhere brought by the
pairs' sparsity-aware exchange, so a PyG ``decode`` runs unchanged::

    def decode(self, z, edge_label_index):
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(dim=-1)

Both ends share one exchange: the first of ``z[pairs[0]]`` / ``z[pairs[1]]`` brings every remote
endpoint's row once, the other reuses it (as long as it indexes the same, unmodified ``z``).
Indexing is a collective: every rank indexes, also one holding no pairs.  ``torch.cat`` of pair
indices (and ``[2, k]`` tensors of global ids) along the last dimension gives the pair index of
all of them, as PyG's script concatenates its positives and negatives; its plan is built at the
first indexing (two small exchanges).  Other tensor operations raise naming :attr:`global_ids`.
"""
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from .pairs import DistributedPairs, local_pairs
from .two_row_index import SharedEndRows, TwoRowIndex


class PairIndex(TwoRowIndex):
    r"""``[2, m]`` pairs this rank holds, as a shard's ``edge_label_index`` (see the module doc).

    Args:
        global_ids (torch.Tensor): ``[2, m]`` global (source, target) ids of this rank's pairs.
        part (numpy.ndarray): ``[N]`` owner of every node.
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.
            (default: :obj:`None`, the default group)
        pairs (DistributedPairs, optional): their plan, if already built (e.g. by
            :func:`~pyg_sparsecomm.link.distribute_pairs`). (default: :obj:`None`)
    """

    def __init__(self, global_ids: Tensor, part: np.ndarray, group: dist.ProcessGroup | None = None,
                 pairs: DistributedPairs | None = None) -> None:
        if global_ids.dim() != 2 or global_ids.size(0) != 2:
            raise ValueError(f"PairIndex takes [2, m] global ids, got shape {list(global_ids.shape)}")
        self.global_ids, self.part, self.group = global_ids, part, group
        self._pairs = pairs
        self._shared = SharedEndRows()

    @property
    def pairs(self) -> DistributedPairs:
        """The pairs' :class:`~pyg_sparsecomm.link.DistributedPairs` (built at first use: a collective)."""
        if self._pairs is None:
            self._pairs = local_pairs(self.global_ids.cpu(), self.part, group=self.group)
        return self._pairs

    def end_rows(self, z: Tensor, end: int) -> Tensor:
        """``z`` of every pair's source (``end=0``) or target (``end=1``); one exchange for both ends."""
        rows = self._shared.rows(z, end, self.pairs.rows)
        return rows.index_select(0, self.pairs.index[end].to(z.device))

    # tensor habits PyG's link prediction uses (TwoRowIndex: [0]/[1], row, col = ..., size(), numel())
    def _end_of(self, end: int) -> "PairEnd":
        return PairEnd(self, end)

    def _refusal_of(self, what: str) -> str:
        return _refusal(what)

    def __repr__(self) -> str:
        return f"PairIndex(pairs={self.global_ids.size(1)}, held by this rank; global_ids=[2, m])"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.cat:
            return _cat(*args, **kwargs)
        if func is Tensor.__getitem__ and len(args) == 2 and isinstance(args[1], PairEnd):
            return args[1].parent.end_rows(args[0], args[1].end)
        raise TypeError(_refusal(f"torch.{getattr(func, '__name__', func)}"))


class PairEnd:
    """``edge_label_index[0]`` or ``[1]`` of a :class:`PairIndex`: ``z[end]`` is those endpoints' rows."""

    def __init__(self, parent: PairIndex, end: int) -> None:
        self.parent, self.end = parent, end

    @property
    def global_ids(self) -> Tensor:
        return self.parent.global_ids[self.end]

    def size(self, dim: int | None = None) -> Any:
        return self.global_ids.size() if dim is None else self.global_ids.size(dim)

    def numel(self) -> int:
        return self.global_ids.numel()

    def __len__(self) -> int:
        return self.global_ids.numel()

    def __repr__(self) -> str:
        return f"PairEnd({'source' if self.end == 0 else 'target'}s of {self.global_ids.numel()} pairs)"

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(_refusal(f"indexing edge_label_index[{self.end}] with {key!r}"))

    __torch_function__ = PairIndex.__torch_function__


def _refusal(what: str) -> str:
    return (f"{what} on a shard's edge_label_index (a PairIndex): it holds the pairs whose source this rank owns, "
            f"as global ids whose rows may live on other ranks; it supports z[edge_label_index[0]], "
            f"z[edge_label_index[1]], size() and torch.cat(..., dim=-1). For the ids themselves read "
            f"edge_label_index.global_ids ([2, m] global ids). PyG's functions of an edge_index tensor do not take "
            f"it: negatives of these pairs are pyg_sparsecomm.link.negative_sampling(edge_label_index, num_nodes), and "
            f"a GAE/VGAE/ARGA/ARGVA scoring them must be distribute(model)d (its recon_loss and test take them)")


def _cat(tensors, dim: int = 0, *, out=None, axis: int | None = None) -> PairIndex:
    """``torch.cat`` of pair indices (and ``[2, k]`` global-id tensors) along the pairs' dimension."""
    dim = dim if axis is None else axis
    if out is not None or dim not in (1, -1):
        raise TypeError(_refusal(f"torch.cat(dim={dim})") + "; concatenate pairs along dim=-1")
    indices = [t for t in tensors if isinstance(t, PairIndex)]
    if any(not isinstance(t, (PairIndex, Tensor)) for t in tensors):
        raise TypeError(_refusal("torch.cat of pair ends") + "; concatenate whole pair indices")
    first = indices[0]
    if any(t.group is not first.group or t.part.size != first.part.size for t in indices):
        raise ValueError("torch.cat of pair indices of different graphs or process groups: concatenate the pairs "
                         "of one sharded graph")
    ids = torch.cat([t.global_ids.cpu() if isinstance(t, PairIndex) else t.cpu() for t in tensors], dim=1)
    return PairIndex(ids, first.part, first.group)
