r"""Sets of a shard's rows as sorted tensors of their indices: what a batch's hops keep, O(batch).

A mini-batch touches a few thousand of a shard's rows; a ``[num_owned]`` mask per hop (which rows a
hop reached, which were in the batch before, the batch row of every shard row) costs the shard's
size per hop and per batch, however small the batch.  Here a set is the ascending tensor of its
row indices (each once), and every operation is a sort, a ``searchsorted`` or a gather over the
batch's entries: memory and work grow with the batch, not with the shard (issue 56, item 3).
"""
import torch
from torch import Tensor


def unique_rows(rows: Tensor) -> Tensor:
    """The set of ``rows`` (any order, repeats): ascending, each once."""
    return torch.unique(rows)


def members(rows: Tensor, of: Tensor) -> Tensor:
    """``[len(rows)]`` whether each of ``rows`` is in the set ``of``.

    Args:
        rows (torch.Tensor): row indices, any order.
        of (torch.Tensor): a set (ascending, each once).
    """
    if of.numel() == 0:
        return torch.zeros(rows.shape, dtype=torch.bool, device=rows.device)
    at = torch.searchsorted(of, rows).clamp_(max=of.numel() - 1)
    return of.index_select(0, at) == rows


def difference(rows: Tensor, of: Tensor) -> Tensor:
    """The set ``rows`` without the rows of the set ``of`` (both ascending, each once)."""
    return rows[~members(rows, of)] if of.numel() else rows


def disjoint_union(a: Tensor, b: Tensor) -> Tensor:
    """The union of two sets that share no row."""
    return torch.sort(torch.cat([a, b])).values


class RowLookup:
    """Where each of a batch's rows sits in the batch: ``index_select(0, rows)`` gives the batch row
    of every given shard row (``-1``: not in the batch), as a ``[num_owned]`` tensor of batch rows
    would, from a sort of the batch's rows (no tensor of the shard's size).

    Args:
        rows (torch.Tensor): the batch's shard rows in batch order (each once).
    """

    def __init__(self, rows: Tensor) -> None:
        self.sorted, self.order = torch.sort(rows)

    def index_select(self, dim: int, rows: Tensor) -> Tensor:
        """The batch row of every one of ``rows`` (``-1``: not in the batch)."""
        assert dim == 0
        if self.sorted.numel() == 0:
            return torch.full_like(rows, -1)
        at = torch.searchsorted(self.sorted, rows).clamp_(max=self.sorted.numel() - 1)
        found = self.sorted.index_select(0, at) == rows
        return torch.where(found, self.order.index_select(0, at), -1)
