r"""Rows every rank holds: each computed by one rank, gathered onto all, each rank's gradient its own rows'.

A model scoring a *global* list of pairs, the same on every rank (PyG's ``LightGCN`` in
``examples/lightgcn.py``: ``model(edge_index, edge_label_index).chunk(2)``), computes on rank
:math:`r` the scores of the pairs it holds (those whose source it owns).  The script goes on as in
one process, with ``pos_rank.numel()`` counting every pair and a loss over all of them, so every
rank needs every score.  :func:`replicate_rows` gathers them (one all-reduce of the list, each
position filled by its one holder, so the sum is exact): the same :class:`ReplicatedScores` on
every rank, in the list's order.

Every rank then computes the *same* loss :math:`L` from the same scores, so every rank's
:math:`\partial L / \partial s` is the whole gradient.  The backward passes to each rank the
gradient of the rows it computed, and no other (no communication): over the ranks every score gets
its gradient exactly once, as in one process.  A loss of replicated scores is therefore computed as
in one process (``F.binary_cross_entropy_with_logits(scores, label)``; ``distributed_loss`` of them
is that loss), never a share to sum over ranks: its value is already the whole list's.
"""
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.collectives import all_reduce_rows
from ..comm.group import is_distributed
from ..comm.group import world_size as group_world_size
from .grad_registry import mark_normalised


class ReplicatedScores(Tensor):
    """What :func:`replicate_rows` returns: the rows of a global list, the same on every rank, whose
    gradient flows into the rows this rank computed only (see the module doc).  A marker type, kept
    by PyTorch through ``chunk``, arithmetic and indexing, so that a loss can tell them apart from
    this rank's own rows (:func:`~pyg_sparsecomm.distributed_loss`, ``LightGCN.recommendation_loss``)."""


class _ReplicatedRows(torch.autograd.Function):
    """Forward: the rows scattered to their positions in a zero list, summed over the ranks (every
    position has one holder); backward: this rank's positions of the gradient."""

    @staticmethod
    def forward(ctx, rows: Tensor, position: Tensor, total: int, group: dist.ProcessGroup | None) -> Tensor:
        ctx.save_for_backward(position)
        out = rows.new_zeros((total, *rows.shape[1:])).index_copy_(0, position, rows)
        if is_distributed(group) and group_world_size(group) > 1:
            out = all_reduce_rows(out, group, "replicated_rows")
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (position,) = ctx.saved_tensors
        return grad.index_select(0, position), None, None, None


def replicate_rows(rows: Tensor, position: Tensor, total: int,
                   group: dist.ProcessGroup | None = None) -> ReplicatedScores:
    r"""The whole list of ``total`` rows on every rank, from each rank's ``rows`` at ``position``
    (a collective, counted as ``"replicated_rows"`` by :func:`~pyg_sparsecomm.comm_counter`).

    Args:
        rows (torch.Tensor): the rows this rank computed.
        position (torch.Tensor): their positions in the list (every position held by one rank).
        total (int): the list's length (the same on every rank).
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: all ranks)

    Shapes:
        - **input:** rows :math:`(m_r, *)`, position :math:`(m_r)`
        - **output:** :math:`(m, *)`, the same on every rank
    """
    out = _ReplicatedRows.apply(rows, position.to(rows.device, torch.long), int(total), group)
    return mark_normalised(out).as_subclass(ReplicatedScores)  # a loss of them is the whole list's: not P times
