"""What the package's pair indices share: a ``[2, m]`` index of node pairs that reads as PyG's
``edge_label_index`` tensor (``[0]``/``[1]``, ``row, col = ...``, ``size()``, ``numel()``, ``.to()``),
while the rows it takes may live on other ranks, and the one exchange both ends of a ``z`` share."""
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor


class TwoRowIndex:
    """Base of :class:`~pyg_sparsecomm.link.PairIndex`, :class:`~pyg_sparsecomm.link.hetero_pair_index.HeteroPairIndex`
    and the link batches' :class:`~pyg_sparsecomm.loader.batch_pair_index.BatchPairIndex`: subclasses hold
    ``global_ids`` (``[2, m]``), say what each end is (:meth:`_end_of`) and why other uses are refused
    (:meth:`_refusal_of`)."""

    global_ids: Tensor

    def _end_of(self, end: int) -> Any:
        raise NotImplementedError

    def _refusal_of(self, what: str) -> str:
        raise NotImplementedError

    def __getitem__(self, end: Any) -> Any:
        if isinstance(end, int) and -2 <= end <= 1:
            return self._end_of(end % 2)
        raise TypeError(self._refusal_of(f"indexing with {end!r}"))

    def __iter__(self) -> Iterator[Any]:
        """``row, col = edge_label_index``, as PyG's decoders unpack it."""
        return iter((self._end_of(0), self._end_of(1)))

    def __len__(self) -> int:
        return 2

    def size(self, dim: int | None = None) -> Any:
        """The ``[2, m]`` size of the pairs (of ``dim``, if given), as a tensor's.

        Args:
            dim (int, optional): one dimension. (default: :obj:`None`, both)
        """
        return self.global_ids.size() if dim is None else self.global_ids.size(dim)

    @property
    def shape(self) -> torch.Size:
        return self.global_ids.shape

    def dim(self) -> int:
        return 2

    def numel(self) -> int:
        return self.global_ids.numel()

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """Itself: the pairs are indices (the rows they take come on ``z``'s device).

        Args:
            *args: ignored (``Tensor.to``'s).
            **kwargs: ignored.
        """
        return self

    def cpu(self) -> Any:
        return self


class SharedEndRows:
    r""":math:`[z \,\|\, z_{halo}]` of one ``z`` shared by the views of a pair index (its two ends; a
    triplet batch's three target views): the first view to index ``z`` runs the exchange, the others reuse
    it while they index the same, unmodified ``z``; once every view took it, it is dropped (so a step's
    graph is not kept alive).

    Args:
        num_views (int, optional): the views sharing it. (default: :obj:`2`)
    """

    def __init__(self, num_views: int = 2) -> None:
        self.num_views = num_views
        self._rows: tuple[Any, int, Tensor] | None = None  # (weakref to z, z's version, [z | halo])
        self._served: set[int] = set()

    def rows(self, z: Tensor, end: int, exchange: Callable[[Tensor], Tensor]) -> Tensor:
        """``exchange(z)`` for ``end`` (0 or 1), run once for both ends of the same ``z``.

        Args:
            z (torch.Tensor): this rank's rows.
            end (int): the view asking (0: sources, 1: targets, or a triplet batch's view).
            exchange (Callable): ``z -> [z | halo]`` (a collective).
        """
        cached = self._rows
        if cached is None or cached[0]() is not z or cached[1] != z._version or end in self._served:
            cached = (weakref.ref(z), z._version, exchange(z))
            self._rows, self._served = cached, set()
        self._served.add(end)
        if len(self._served) == self.num_views:
            self._rows = None
        return cached[2]
