r"""Which in-edges a node keeps: ``k`` of its ``d`` in-edges, uniformly without replacement (all
of them when ``d <= k``), at a cost of O(k) per node whatever ``d``.

A node's in-edges are taken in one canonical order, by global source id, then global edge id
(:func:`in_edge_order`): the same on every partition, as the rank owning the node holds all its
in-edges.  The positions kept are drawn by Robert Floyd's algorithm (Bentley & Floyd, CACM 30(9),
1987): for :math:`j = d - k, \dots, d - 1`, draw :math:`t` uniform in :math:`[0, j]` and keep
:math:`t`, or :math:`j` if :math:`t` is kept already; every :math:`k`-subset of :math:`[0, d)` comes
out with probability :math:`1 / \binom{d}{k}` -- PyG's ``NeighborLoader`` distribution.  Draw
:math:`j` of node :math:`v` is a hash of :math:`v`'s global id (:mod:`.randomness`) under a key of
the batch's stream and :math:`j`, so a node's sample is the same on whichever rank draws it.  All
nodes draw together, vectorised in torch on their device: ``k`` hash passes over the nodes of more
than ``k`` in-edges and ``k`` membership tests against the draws so far (:math:`k^2 / 2` integer
comparisons per node, no hash), never a pass over their in-edges.  The sizes of the tensors a draw
makes (:func:`draw_sizes`) are read from the device once, or passed in by a caller that read them
with its other counts (:mod:`.host_reads`).
"""
import numpy as np
import torch
from torch import Tensor

from ..plan.halo_adj import HaloAdj, compact_index_dtype
from .host_reads import indices, read_counts
from .randomness import raw_bits_table, stream_key


def in_edge_order(rowptr: Tensor, source_ids: Tensor, edge_ids: Tensor) -> Tensor:
    """CSR positions in canonical order: ``order[rowptr[r]:rowptr[r + 1]]`` are row ``r``'s entries
    sorted by (global source id, global edge id).  Computed once per graph (two stable sorts).

    Args:
        rowptr (torch.Tensor): ``[n + 1]`` the CSR's row pointer (rows: the edges' targets).
        source_ids (torch.Tensor): ``[nnz]`` global id of every entry's source.
        edge_ids (torch.Tensor): ``[nnz]`` global id of every entry's edge.
    """
    num_rows, nnz = rowptr.numel() - 1, int(edge_ids.numel())
    row = torch.repeat_interleave(torch.arange(num_rows, device=rowptr.device), rowptr.diff(), output_size=nnz)
    order = torch.argsort(edge_ids, stable=True)
    span = int(source_ids.max()) + 1 if nnz else 1
    if num_rows * span < 1 << 62:  # (row, source) as one key
        key = row.index_select(0, order) * span + source_ids.index_select(0, order)
        order = order.index_select(0, torch.argsort(key, stable=True))
    else:
        order = order.index_select(0, torch.argsort(source_ids.index_select(0, order), stable=True))
        order = order.index_select(0, torch.argsort(row.index_select(0, order), stable=True))
    return order.to(compact_index_dtype(nnz))


def shard_in_edge_order(adj: HaloAdj, edge_ids: Tensor) -> Tensor:
    """:func:`in_edge_order` of a shard's adjacency (columns ``[owned | halo]`` of its plan), whose
    entries have the global edge ids ``edge_ids`` (the shard's ``e_id``)."""
    column_ids = torch.cat([adj.plan.n_id, adj.plan.halo_n_id]).to(adj.col.device)
    return in_edge_order(adj.rowptr, column_ids.index_select(0, adj.col), edge_ids.to(adj.col.device))


def draw_sizes(degree: Tensor, fanout: int, among: Tensor | None = None) -> Tensor:
    """``[2]`` on ``degree``'s device, not read (a caller reads it with its other counts): the number
    of nodes that draw (more than ``fanout`` in-edges) and of the in-edges the other nodes keep (all
    of theirs): the sizes :func:`sample_positions` makes its tensors at.

    Args:
        degree (torch.Tensor): ``[n]`` in-degree of every node.
        fanout (int): in-edges kept per node (``-1``: all, ``0``: none).
        among (torch.Tensor, optional): ``[n]`` bool, the nodes counted (default: :obj:`None`, all).
    """
    if fanout == 0:
        return degree.new_zeros(2)
    drawing = degree > fanout if fanout > 0 else torch.zeros_like(degree, dtype=torch.bool)
    whole = degree.masked_fill(drawing, 0)
    if among is not None:
        drawing, whole = drawing & among, whole.masked_fill(~among, 0)
    return torch.stack([drawing.sum(), whole.sum()])


def sample_positions(key: int | np.uint64, node_ids: Tensor, degree: Tensor, fanout: int,
                     sizes: list[int] | None = None) -> tuple[Tensor, Tensor]:
    """The in-edges kept by every node, as ``(node, position)``: ``node`` indexes ``node_ids``,
    ``position`` is in ``[0, degree[node])`` (canonical order); grouped by node, any order within.

    Args:
        key (numpy.uint64): the stream's key (:func:`~.randomness.stream_key`).
        node_ids (torch.Tensor): ``[n]`` global ids of the nodes (their draws' counters).
        degree (torch.Tensor): ``[n]`` in-degree of every node.
        fanout (int): in-edges kept per node (``-1``: all, ``0``: none).
        sizes (list[int], optional): :func:`draw_sizes` of these nodes, read by the caller
            (default: :obj:`None`, read here: one wait for the device).
    """
    if fanout == 0:
        empty = degree.new_zeros(0)
        return empty, empty
    num_drawing, num_whole = read_counts(draw_sizes(degree, fanout)) if sizes is None else sizes
    if fanout < 0:
        return _all_positions(degree, num_whole)
    big = degree > fanout
    whole, position = _all_positions(degree.masked_fill(big, 0), num_whole)
    drawing = indices(big, num_drawing)
    chosen = _floyd(key, node_ids.index_select(0, drawing), degree.index_select(0, drawing), fanout)
    return torch.cat([whole, drawing.repeat_interleave(fanout)]), torch.cat([position, chosen.view(-1)])


def _all_positions(degree: Tensor, total: int) -> tuple[Tensor, Tensor]:
    """``(node, position)`` of every in-edge: positions ``0 .. degree - 1`` of every node (``total``
    of them)."""
    node = torch.repeat_interleave(torch.arange(degree.numel(), device=degree.device), degree, output_size=total)
    first = torch.cumsum(degree, 0) - degree
    return node, torch.arange(total, device=degree.device) - first.index_select(0, node)


def _floyd(key: int | np.uint64, node_ids: Tensor, degree: Tensor, k: int) -> Tensor:
    """``[n, k]`` distinct positions in ``[0, degree)`` per node (every ``degree > k``): Floyd's
    algorithm, step ``j`` drawing from the hash of the node's id under the key of ``(key, j)``.

    Every step's draw is made at once (one hash pass over the ``[n, k]`` table, whose column ``j`` is
    uniform in ``[0, degree - k + j]``); only the collisions are resolved step by step (a draw kept
    already becomes ``degree - k + j``), a few operations per step instead of a hash pass each."""
    bound = degree.unsqueeze(1) - torch.arange(k, 0, -1, device=degree.device)  # [n, k]: draw j in [0, bound_j]
    unit = raw_bits_table([stream_key(int(key), step) for step in range(k)], node_ids).double() * (1.0 / (1 << 53))
    chosen = torch.minimum((unit * (bound + 1).double()).long(), bound)
    for step in range(1, k):
        taken = (chosen[:, :step] == chosen[:, step:step + 1]).any(1)
        chosen[:, step] = torch.where(taken, bound[:, step], chosen[:, step])
    return chosen


def sample_in_edges(key: int | np.uint64, fanout: int, rowptr: Tensor, order: Tensor, rows: Tensor,
                    row_ids: Tensor, sizes: list[int] | None = None) -> Tensor:
    """CSR positions of the in-edges kept by ``rows`` (:func:`sample_positions`).

    Args:
        key (numpy.uint64): the stream's key.
        fanout (int): in-edges kept per row (``-1``: all, ``0``: none).
        rowptr (torch.Tensor): the CSR's row pointer.
        order (torch.Tensor): its canonical order (:func:`in_edge_order`).
        rows (torch.Tensor): the rows drawing (each once).
        row_ids (torch.Tensor): their global ids.
        sizes (list[int], optional): :func:`draw_sizes` of ``rows``, read by the caller
            (default: :obj:`None`, read here).
    """
    start = rowptr.index_select(0, rows)
    node, position = sample_positions(key, row_ids, rowptr.index_select(0, rows + 1) - start, fanout, sizes)
    return order.index_select(0, start.index_select(0, node) + position).long()
