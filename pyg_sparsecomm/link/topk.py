r"""Top-:math:`k` recommendation over the items of all ranks: users and items sharded by owner.

:func:`recommend_topk` returns, for every user of this rank, the :math:`k` items of *all* ranks with
the highest dot product :math:`\langle u, i \rangle`, seen items excluded, as one process computes
them from the whole score matrix (PyG's ``examples/lightgcn.py``: seen pairs set to :math:`-\infty`,
then ``topk``). Ties are broken by the lower global item id, here and in the reference (the order of
ties within ``torch.topk`` is not specified, so it cannot be matched).

The exchange (every rank calls it, also one owning no user or no item):

1. every rank sends its users' embeddings (and their global ids, when pairs are excluded) to every
   other rank that owns items, as one ``all_to_all_single`` ("topk_users", "topk_user_ids");
2. every rank scores all users against its own items, in batches of users, and keeps the
   :math:`c_r = \min(k, I_r)` best items per user (:math:`I_r`: its item count);
3. those :math:`c_r` (score, item id) pairs go back to each user's owner ("topk_scores",
   "topk_ids"), which merges them into the :math:`k` best.

Bytes rank :math:`r` sends, counted by :func:`~pyg_sparsecomm.comm.counters.comm_counter` under those
kinds (:math:`U_r` users, :math:`U = \sum_q U_q`, :math:`d` dimensions of :math:`s` bytes, :math:`e = 1`
when pairs are excluded, else 0, :math:`Q_r` the other ranks owning items):

.. math::
    |Q_r|\, U_r\, (d s + 8 e) \;+\; c_r\, (U - U_r)\, (s + 8)

No score matrix and no item embedding leaves its owner. Besides, two uncounted control collectives: a
one-integer all-reduce agreeing that the input is valid, and an all-gather of seven integers per rank.

Seen pairs are held by the **item's owner** (``exclude``: global ``(user, item)`` pairs whose item this
rank owns; pairs of users not asked about are ignored): they are applied where the scores are made, so
they cost no communication.
"""
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.group import collective_device, host_all_gather, raise_together
from ..comm.group import rank as group_rank
from ..comm.halo import all_to_all_rows

#: the embedding dtypes the exchange accepts, by the code every rank's must agree on
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: scores of users at once: at most this many (user, item) scores in memory per batch
_SCORES_PER_BATCH = 1 << 22


class TopK(NamedTuple):
    r"""The recommended items of this rank's users, best first (as :func:`torch.topk` returns).

    Attributes:
        values (torch.Tensor): ``[U_r, k]`` their scores (:math:`-\infty` for an excluded pair).
        indices (torch.Tensor): ``[U_r, k]`` their global item ids.
    """
    values: Tensor
    indices: Tensor


def order_by_score_then_id(scores: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
    """Sorts every row by score, highest first, ties by the lower id (two stable sorts)."""
    by_id = ids.argsort(dim=1, stable=True)
    scores, ids = scores.gather(1, by_id), ids.gather(1, by_id)
    by_score = scores.argsort(dim=1, descending=True, stable=True)
    return scores.gather(1, by_score), ids.gather(1, by_score)


def top_columns(scores: Tensor, c: int) -> tuple[Tensor, Tensor]:
    """The ``c`` highest scores of every row and their columns, ties by the lower column.

    ``torch.topk`` finds them; only rows where the ``c``-th score is tied beyond the ``c`` kept
    (``topk`` may have kept any of the tied columns) are sorted in full."""
    values, columns = scores.topk(c, dim=1)
    tied = (scores >= values[:, -1:]).sum(dim=1) > c
    if bool(tied.any()):
        rows = tied.nonzero().view(-1)
        sorted_values, sorted_columns = scores[rows].sort(dim=1, descending=True, stable=True)
        values[rows], columns[rows] = sorted_values[:, :c], sorted_columns[:, :c]
    return order_by_score_then_id(values, columns)


def _check_local(user_emb: Tensor, item_emb: Tensor, item_ids: Tensor, k: int,
                 user_ids: Tensor | None, exclude: Tensor | None) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer (the number of items recommended per user), got {k!r}: "
                         f"pass k >= 1")
    for name, emb in (("user_emb", user_emb), ("item_emb", item_emb)):
        if emb.dim() != 2 or emb.dtype not in _DTYPES:
            raise ValueError(f"{name} must be a [rows, dim] floating tensor, got {emb.dtype} of shape "
                             f"{list(emb.shape)}: pass this rank's embeddings (torch.empty(0, dim) for none)")
        if not bool(torch.isfinite(emb).all()):
            raise ValueError(f"{name} holds NaN or infinite values: check the model's output")
    if user_emb.dtype != item_emb.dtype or user_emb.size(1) != item_emb.size(1):
        raise ValueError(f"user_emb ({user_emb.dtype}, dim {user_emb.size(1)}) and item_emb ({item_emb.dtype}, "
                         f"dim {item_emb.size(1)}) must have one dtype and dimension: score them in one space")
    _check_ids("item_ids", item_ids, item_emb.size(0))
    if bool(item_ids.unique().numel() != item_ids.numel()):
        raise ValueError("item_ids repeats an item: every item belongs to exactly one rank, once")
    if exclude is not None:
        if user_ids is None:
            raise ValueError("exclude names users by global id: pass user_ids (this rank's users' global ids)")
        _check_exclude(exclude, item_ids)
    if user_ids is not None:
        _check_ids("user_ids", user_ids, user_emb.size(0))


def _check_ids(name: str, ids: Tensor, rows: int) -> None:
    if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool or ids.numel() != rows:
        raise ValueError(f"{name} must be a vector of {rows} integer global ids (one per embedding row), got "
                         f"{ids.dtype} of shape {list(ids.shape)}")
    if ids.numel() and int(ids.min()) < 0:
        raise ValueError(f"{name} holds the negative id {int(ids.min())}: ids are global ids >= 0")


def _check_exclude(exclude: Tensor, item_ids: Tensor) -> None:
    if exclude.dim() != 2 or exclude.size(0) != 2 or exclude.is_floating_point() or exclude.dtype == torch.bool:
        raise ValueError(f"exclude must be integer (user, item) pairs of shape [2, m], got {exclude.dtype} of "
                         f"shape {list(exclude.shape)}")
    if exclude.numel() and int(exclude.min()) < 0:
        end = "user" if int(exclude[0].min()) < 0 else "item"
        raise ValueError(f"exclude holds the negative {end} id {int(exclude.min())}: its pairs are (user, item) "
                         f"global ids >= 0, users as user_ids names them, items as item_ids")
    owned = torch.isin(exclude[1], item_ids)
    if not bool(owned.all()):
        item = int(exclude[1][~owned][0])
        raise ValueError(f"exclude names item {item}, which this rank does not own: seen pairs are held by the "
                         f"item's owner; pass each rank exclude[:, item_owner[exclude[1]] == rank]")


def _gather_layout(user_emb: Tensor, item_emb: Tensor, item_ids: Tensor, user_ids: Tensor | None,
                   group: dist.ProcessGroup | None) -> list[list[int]]:
    """Every rank's ``[users, items, dim, dtype code, has user ids, min item id, max item id]``."""
    lo, hi = (int(item_ids.min()), int(item_ids.max())) if item_ids.numel() else (0, -1)
    mine = [user_emb.size(0), item_emb.size(0), user_emb.size(1), _DTYPES.index(user_emb.dtype),
            int(user_ids is not None), lo, hi]
    return host_all_gather(mine, group)


def _check_layout(layout: list[list[int]], k: int) -> None:
    """The same checks, from the same numbers, on every rank: every rank raises the same error."""
    if len({tuple(row[2:5]) for row in layout}) > 1:
        raise ValueError("the ranks' embeddings differ in dimension or dtype, or some pass user_ids and others "
                         "not: give every rank the same model's embeddings and user_ids on all or none "
                         f"(dim, dtype code, user_ids per rank: {[row[2:5] for row in layout]})")
    num_items = sum(row[1] for row in layout)
    if k > num_items:
        raise ValueError(f"k={k} but the ranks hold {num_items} items in all: pass k <= {num_items} "
                         f"(torch.topk's limit)")
    for r, row in enumerate(layout):
        if row[1] and (row[5] < 0 or row[6] >= num_items):
            raise ValueError(f"rank {r}'s item_ids lie in [{row[5]}, {row[6]}] but the ranks hold {num_items} "
                             f"items: item ids are 0..{num_items - 1}, each item on exactly one rank")


def recommend_topk(user_emb: Tensor, item_emb: Tensor, item_ids: Tensor, k: int, user_ids: Tensor | None = None,
                   exclude: Tensor | None = None, group: dist.ProcessGroup | None = None) -> TopK:
    r"""The :math:`k` best items of all ranks for each of this rank's users (a collective).

    Args:
        user_emb (torch.Tensor): this rank's users' embeddings.
        item_emb (torch.Tensor): this rank's items' embeddings.
        item_ids (torch.Tensor): their global ids; over all ranks, each of :math:`0..I-1` once.
        k (int): items per user, :math:`1 \le k \le I`.
        user_ids (torch.Tensor, optional): this rank's users' global ids, needed with :obj:`exclude`
            (then on every rank) (default: :obj:`None`)
        exclude (torch.Tensor, optional): seen global ``(user, item)`` pairs whose item this rank owns,
            never recommended unless fewer than :math:`k` items are left (then with score
            :math:`-\infty`, lowest ids first) (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks (default: :obj:`None`)

    Returns:
        :class:`TopK` ``(values, indices)``: scores and global item ids, best first, ties by lower id.

    Shapes:
        user_emb: :math:`[U_r, d]`; item_emb: :math:`[I_r, d]`; item_ids: :math:`[I_r]`;
        user_ids: :math:`[U_r]`; exclude: :math:`[2, m]`; values, indices: :math:`[U_r, k]`.
    """
    raise_together(lambda: _check_local(user_emb, item_emb, item_ids, k, user_ids, exclude), "recommend_topk",
                   group, flag_first=True)
    layout = _gather_layout(user_emb, item_emb, item_ids, user_ids, group)
    _check_layout(layout, k)
    users, all_user_ids = _gather_users(user_emb, user_ids, layout, group)
    c = min(k, item_emb.size(0))
    scores, ids = _local_candidates(users, all_user_ids, item_emb, item_ids, exclude, c)
    scores, ids = _merge_at_owners(scores, ids, layout, k, group)
    return TopK(*(t[:, :k] for t in order_by_score_then_id(scores, ids)))


def _gather_users(user_emb: Tensor, user_ids: Tensor | None, layout: list[list[int]],
                  group: dist.ProcessGroup | None) -> tuple[Tensor, Tensor | None]:
    """Every rank's users (rank order) where this rank owns items; none elsewhere."""
    P, me = len(layout), group_rank(group)
    if P == 1:
        return user_emb, user_ids
    send_counts = [user_emb.size(0) if q != me and layout[q][1] else 0 for q in range(P)]
    recv_counts = [layout[q][0] if q != me and layout[me][1] else 0 for q in range(P)]
    scores_here = bool(layout[me][1])
    embs = _with_own(_exchange(user_emb, send_counts, recv_counts, "topk_users", group), user_emb, recv_counts, me,
                     scores_here)
    if user_ids is None:
        return embs, None
    ids = _exchange(user_ids.long(), send_counts, recv_counts, "topk_user_ids", group)
    return embs, _with_own(ids, user_ids.long(), recv_counts, me, scores_here)


def _with_own(received: Tensor, own: Tensor, recv_counts: list[int], me: int, scores_here: bool) -> Tensor:
    """The received rows with this rank's own at its place (rank order); none where this rank owns
    no item (it scores nobody), its own alone where no other rank has users."""
    if not scores_here:
        return own[:0]
    if not sum(recv_counts):
        return own
    pieces = list(received.split(recv_counts))
    pieces[me] = own
    return torch.cat(pieces)


def _exchange(rows: Tensor, send_counts: list[int], recv_counts: list[int], kind: str,
              group: dist.ProcessGroup | None) -> Tensor:
    """``rows`` sent whole to every rank with a nonzero count (``send_counts[q]`` is 0 or all rows)."""
    copies = sum(1 for n in send_counts if n)
    send = rows.repeat(copies, *([1] * (rows.dim() - 1))) if copies else rows[:0]
    device = collective_device(group) or rows.device
    return all_to_all_rows(send.to(device), send_counts, recv_counts, group, kind).to(rows.device)


def _local_candidates(users: Tensor, user_ids: Tensor | None, item_emb: Tensor, item_ids: Tensor,
                      exclude: Tensor | None, c: int) -> tuple[Tensor, Tensor]:
    """The ``c`` best of this rank's items for every user (rows as ``users``), in batches of users."""
    if c == 0:
        return users.new_empty((users.size(0), 0)), item_ids.new_empty((users.size(0), 0)).long()
    order = item_ids.argsort()  # columns in id order: ties by the lower column are ties by the lower id
    items, column_ids = item_emb[order], item_ids[order].long()
    seen_rows, seen_columns = _seen(user_ids, column_ids, exclude)
    batch, n = max(1, _SCORES_PER_BATCH // items.size(0)), users.size(0)
    # results written in place and one score buffer reused: small results kept between the blocks
    # fragmented glibc's heap (4.2 GB free but resident on one rank of 1.03M interactions at P = 4)
    scores, columns = users.new_empty((n, c)), torch.empty((n, c), dtype=torch.long, device=users.device)
    differentiable = torch.is_grad_enabled() and (users.requires_grad or items.requires_grad)
    buffer = None if differentiable else users.new_empty((min(batch, n), items.size(0)))  # out= has no autograd
    for start in range(0, n, batch):
        rows = min(batch, n - start)
        block = (users[start:start + rows] @ items.t() if buffer is None
                 else torch.mm(users[start:start + rows], items.t(), out=buffer[:rows]))
        lo, hi = torch.searchsorted(seen_rows, torch.tensor([start, start + rows])).tolist()
        block[seen_rows[lo:hi] - start, seen_columns[lo:hi]] = float("-inf")
        scores[start:start + rows], columns[start:start + rows] = top_columns(block, c)
    return scores, column_ids[columns]


def _seen(user_ids: Tensor | None, column_ids: Tensor, exclude: Tensor | None) -> tuple[Tensor, Tensor]:
    """The excluded (user row, item column) cells, by row: a user id asked about twice gets both rows."""
    empty = torch.zeros(0, dtype=torch.long)
    if exclude is None or user_ids is None or exclude.size(1) == 0:
        return empty, empty
    exclude, column_ids = exclude.long().cpu(), column_ids.cpu()  # index arithmetic on the host
    sorted_ids, perm = user_ids.long().cpu().sort()
    first = torch.searchsorted(sorted_ids, exclude[0])
    last = torch.searchsorted(sorted_ids, exclude[0], right=True)
    repeats = last - first
    pair = torch.arange(exclude.size(1)).repeat_interleave(repeats)
    offset = torch.arange(pair.numel()) - (repeats.cumsum(0) - repeats).repeat_interleave(repeats)
    rows = perm[first[pair] + offset]
    columns = torch.searchsorted(column_ids, exclude[1])[pair]
    by_row = rows.argsort(stable=True)
    return rows[by_row], columns[by_row]


def _merge_at_owners(scores: Tensor, ids: Tensor, layout: list[list[int]], k: int,
                     group: dist.ProcessGroup | None) -> tuple[Tensor, Tensor]:
    """Each user's candidates from every rank, at the user's owner: ``[U_r, sum_q c_q]``, rank order."""
    P, me = len(layout), group_rank(group)
    if P == 1:
        return scores, ids
    users, widths = [row[0] for row in layout], [min(k, row[1]) for row in layout]
    first = sum(users[:me])
    own = torch.zeros(scores.size(0), dtype=torch.bool, device=scores.device)
    own[first:first + users[me]] = bool(widths[me])  # rows of this rank's users (when it scored any)
    send_counts = [users[p] * widths[me] if p != me else 0 for p in range(P)]
    recv_counts = [users[me] * widths[q] if q != me else 0 for q in range(P)]
    merged = []
    for t, kind in ((scores, "topk_scores"), (ids, "topk_ids")):
        device = collective_device(group) or t.device
        got = all_to_all_rows(t[~own].reshape(-1).to(device), send_counts, recv_counts, group, kind).to(t.device)
        parts = list(got.split(recv_counts))
        parts[me] = t[own].reshape(-1)
        merged.append(torch.cat([part.view(users[me], w) for part, w in zip(parts, widths, strict=True)], dim=1))
    return merged[0], merged[1]
