r"""Sets of a shard's rows as sorted tensors of their indices: what a batch's hops keep, O(batch).

A mini-batch touches a few thousand of a shard's rows; a ``[num_owned]`` mask per hop (which rows a
hop reached, which were in the batch before, the batch row of every shard row) costs the shard's
size per hop and per batch, however small the batch.  Here a set is the ascending tensor of its
row indices (each once), and every operation is a sort, a ``searchsorted`` or a gather over the
batch's entries: memory and work grow with the batch, not with the shard (issue 56, item 3).

Given the number of rows of the shard (``num_rows``), an operation on sets of at least
``num_rows / DENSE`` rows goes through a mask or table of the shard's rows instead: it is then at
most ``DENSE`` times the sets' size (still O(batch)), and one gather beats a binary search per entry
(``benchmarks/minibatch_speed.py --row-sets``, RESULTS.md ``minibatch_row_sets``).
"""
import torch
from torch import Tensor

from ..graph.sorted_lookup import lookup_sorted

#: a mask of the shard's rows is used where the sets hold at least 1 / DENSE of them (the crossover measured
#: by `benchmarks/minibatch_speed.py --row-sets`: sets 0.78x the masks' time at 1.5% of a shard, 2.1x at 22%)
DENSE = 16


def _dense(size: int, num_rows: int | None) -> bool:
    return num_rows is not None and num_rows <= DENSE * size


def unique_rows(rows: Tensor, num_rows: int | None = None) -> Tensor:
    """The set of ``rows`` (any order, repeats): ascending, each once.

    Args:
        rows (torch.Tensor): row indices.
        num_rows (int, optional): the shard's rows (above them none is given). (default: :obj:`None`)
    """
    if _dense(rows.numel(), num_rows):
        assert num_rows is not None
        mask = torch.zeros(num_rows, dtype=torch.bool, device=rows.device)
        return torch.nonzero(mask.index_fill_(0, rows, True)).view(-1)
    return torch.unique(rows)


def unique_rows_inverse(rows: Tensor, num_rows: int | None = None) -> tuple[Tensor, Tensor]:
    """``(set, inverse)``: the set of ``rows`` (ascending, each once) and where each of ``rows`` sits
    in it, as ``torch.unique(rows, return_inverse=True)`` (no sort where the set is dense).

    Args:
        rows (torch.Tensor): row indices.
        num_rows (int, optional): the shard's rows (above them none is given). (default: :obj:`None`)
    """
    if not _dense(rows.numel(), num_rows):
        return torch.unique(rows, return_inverse=True)
    assert num_rows is not None
    mask = torch.zeros(num_rows, dtype=torch.bool, device=rows.device).index_fill_(0, rows, True)
    position = torch.cumsum(mask, 0).sub_(1)
    return torch.nonzero(mask).view(-1), position.index_select(0, rows)


def members(rows: Tensor, of: Tensor, num_rows: int | None = None) -> Tensor:
    """``[len(rows)]`` whether each of ``rows`` is in the set ``of``.

    Args:
        rows (torch.Tensor): row indices, any order.
        of (torch.Tensor): a set (ascending, each once).
        num_rows (int, optional): the shard's rows (see the module doc). (default: :obj:`None`)
    """
    if of.numel() == 0:
        return torch.zeros(rows.shape, dtype=torch.bool, device=rows.device)
    if _dense(rows.numel() + of.numel(), num_rows):
        assert num_rows is not None
        mask = torch.zeros(num_rows, dtype=torch.bool, device=rows.device).index_fill_(0, of, True)
        return mask.index_select(0, rows)
    at = torch.searchsorted(of, rows).clamp_(max=of.numel() - 1)
    return of.index_select(0, at) == rows


def difference(rows: Tensor, of: Tensor, num_rows: int | None = None) -> Tensor:
    """The set ``rows`` without the rows of the set ``of`` (both ascending, each once)."""
    return rows[~members(rows, of, num_rows)] if of.numel() else rows


def disjoint_union(a: Tensor, b: Tensor) -> Tensor:
    """The union of two sets that share no row."""
    return torch.sort(torch.cat([a, b])).values


class RowLookup:
    """Where each of a batch's rows sits in the batch: ``index_select(0, rows)`` gives the batch row
    of every given shard row (``-1``: not in the batch), as a ``[num_owned]`` tensor of batch rows
    would, from a sort of the batch's rows (that tensor itself where the batch holds at least
    ``1 / DENSE`` of the shard's ``num_rows``).

    Args:
        rows (torch.Tensor): the batch's shard rows in batch order (each once).
        num_rows (int, optional): the shard's rows. (default: :obj:`None`)
    """

    def __init__(self, rows: Tensor, num_rows: int | None = None) -> None:
        self.table: Tensor | None = None
        if _dense(rows.numel(), num_rows):
            assert num_rows is not None
            self.table = torch.full((num_rows,), -1, dtype=torch.long, device=rows.device)
            self.table.index_copy_(0, rows, torch.arange(rows.numel(), device=rows.device))
        else:
            self.sorted, self.order = torch.sort(rows)

    def index_select(self, dim: int, rows: Tensor) -> Tensor:
        """The batch row of every one of ``rows`` (``-1``: not in the batch)."""
        assert dim == 0
        if self.table is not None:
            return self.table.index_select(0, rows)
        if self.sorted.numel() == 0:
            return torch.full_like(rows, -1)
        at, found = lookup_sorted(self.sorted, rows)
        return torch.where(found, self.order.index_select(0, at), -1)
