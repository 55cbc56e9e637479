r"""Negative pairs drawn by hashes of global ids: the same pairs whatever ``P`` and the partition,
each rank drawing the pairs whose source it owns without talking.

**negative_sampling** (PyG's :func:`torch_geometric.utils.negative_sampling`).  PyG returns
:math:`k` distinct pairs :math:`(i, j)`, :math:`i \ne j`, that are not edges, chosen uniformly at
random among all such pairs (``"sparse"`` and ``"dense"`` differ in memory and speed only; with
``force_undirected`` the pairs :math:`i < j` whose edge :math:`(i, j)` is absent, returned in both
directions).  A uniformly random :math:`k`-subset of the non-edges is drawn here in two steps of
exactly that distribution:

1. how many negatives every source :math:`i` gets: :math:`(c_i)_i` is multivariate hypergeometric,
   :math:`k` draws without replacement from an urn holding :math:`m_i` balls of colour :math:`i`
   (:math:`m_i` = non-edges with source :math:`i`), from NumPy's generator seeded by
   ``(seed, epoch)``, the same vector on every rank (:math:`O(N)` work);
2. which: the owner of :math:`i` draws :math:`c_i` distinct targets uniformly among its :math:`m_i`,
   by rejection (target of slot :math:`t` in attempt :math:`a`: :math:`\lfloor u(s, e, a, t)
   (N - 1)\rfloor`, skipping :math:`i`; :math:`u` the counter-based uniform of
   :mod:`~pyg_sparsecomm.sampling.randomness`, :math:`t` a global slot id), redrawing edges and
   repeats; after ``_ATTEMPTS`` rounds the last ones are chosen among the remaining candidates
   by smallest hash.  Every step treats the candidate targets symmetrically, so the set is uniform.

The draws are not PyG's draws (PyG uses Python's global ``random``), and neither the order of the
pairs: here a rank's pairs are sorted by source, then slot.  As PyG's, every call draws fresh
negatives: without ``epoch=`` the stream is the number of such calls so far (counted per process
and per rank drawn for, agreed by the ranks: one host all-reduce of one integer, so every rank calls
together, as it iterates a loader), in a range apart from any ``epoch=`` a script passes; with
``epoch=`` a call is reproducible and talks to no one.  Where PyG gives up after three rounds
with fewer than :math:`k` pairs (dense graphs), this returns :math:`\min(k, \sum_i m_i)`.

**structured_negative_sampling** (PyG's function of that name): for every edge :math:`(i, j)` a
target :math:`k` uniform over the nodes with :math:`(i, k)` not an edge (nor :math:`k = i` if
``contains_neg_self_loops=False``), by rejection keyed by the edge's id, as PyG draws it.
"""
import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.utils.num_nodes import maybe_num_nodes

from ..comm.group import host_all_reduce, is_distributed, world_size
from ..comm.group import rank as group_rank
from ..sampling.randomness import stream_key, uniform
from .partition_vector import partition_vector

_NEGATIVE, _COUNTS, _STRUCTURED, _FALLBACK = 11, 12, 13, 14  # stream names
#: rejection rounds before the remaining slots pick among their candidates directly
_ATTEMPTS = 32
#: the epochs of calls without ``epoch=``: ``_COUNTED_EPOCHS + n`` for the n-th such call, apart from
#: the epochs a script passes (its validation negatives at ``epoch=0`` are not its first training ones)
_COUNTED_EPOCHS = 1 << 62
#: calls without ``epoch=`` so far in this process, by the rank drawn for (``rank=`` simulates several)
_CALLS: dict[int, int] = {}


def _call_epoch(epoch: int | None, group: dist.ProcessGroup | None, rank: int | None) -> int:
    """``epoch``, or for a call without one the next of :data:`_COUNTED_EPOCHS` (see the module
    doc): the largest count of the ranks of ``group`` when this process draws its own share in a
    job of several ranks (a host all-reduce), so the ranks' shares are one draw."""
    if epoch is not None:
        return int(epoch)
    key = group_rank(group) if rank is None else rank
    count = _CALLS.get(key, 0)
    if rank is None and is_distributed(group) and world_size(group) > 1:
        count = host_all_reduce([count], dist.ReduceOp.MAX, group)[0]
    _CALLS[key] = count + 1
    return _COUNTED_EPOCHS + count


def _owned(sources: np.ndarray, part, group: dist.ProcessGroup | None, rank: int | None) -> np.ndarray:
    """Mask of the ``sources`` this rank (``rank``, if given) owns (all of them without a partition)."""
    if part is None:
        return np.ones(sources.size, dtype=bool)
    owner = partition_vector(part, group, check_world_size=rank is None)
    return owner[sources] == (group_rank(group) if rank is None else rank)


def _edge_keys(edge_index: Tensor, num_nodes: int, upper: bool = False) -> np.ndarray:
    """Sorted distinct keys ``i * N + j`` of the edges ``(i, j)``, ``i != j`` (``i < j`` if ``upper``)."""
    src, dst = edge_index.detach().cpu().numpy().astype(np.int64)
    keep = src < dst if upper else src != dst
    return np.unique(src[keep] * num_nodes + dst[keep])


def _is_in(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    pos = np.minimum(np.searchsorted(sorted_keys, keys), max(sorted_keys.size - 1, 0))
    return sorted_keys[pos] == keys if sorted_keys.size else np.zeros(keys.size, dtype=bool)


def negative_sampling(edge_index: Tensor, num_nodes: int | None = None, num_neg_samples: int | float | None = None,
                      method: str = "sparse", force_undirected: bool = False, *, seed: int = 0,
                      epoch: int | None = None, part=None, group: dist.ProcessGroup | None = None,
                      rank: int | None = None) -> Tensor:
    r"""This rank's share of PyG's ``negative_sampling(edge_index, ...)`` (see the module docstring).

    Args:
        edge_index (torch.Tensor): ``[2, E]`` the whole graph's edges (global ids), as PyG takes them.
        num_nodes (int, optional): :math:`N` (bipartite sizes are not supported).
            (default: the largest id + 1)
        num_neg_samples (int or float, optional): negatives over all ranks; a float is a ratio of
            ``E``; ``None``: ``E``.  (Halved with ``force_undirected``, as PyG does.)
            (default: :obj:`None`)
        method (str, optional): ``"sparse"`` or ``"dense"``: accepted for PyG's signature; the draw
            is the same. (default: ``"sparse"``)
        force_undirected (bool, optional): pairs :math:`i < j`, returned in both directions.
            (default: :obj:`False`)
        seed (int, optional): the random stream. (default: ``0``)
        epoch (int, optional): the draw within the stream: the same ``epoch`` gives the same
            negatives, without communication; ``None``: fresh negatives at every call, as PyG's
            (the calls counted and agreed by the ranks, see the module doc: every rank calls
            together). (default: ``None``)
        part (torch.Tensor or torch_geometric.data.Data, optional): the partition (see
            :func:`~pyg_sparsecomm.link.distribute_pairs`); ``None``: every pair.
            ``data.part`` (or the partitioned ``Data``) draws without any communication; a shard
            gathers every rank's ``n_id`` first (a collective). (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks (only read for this rank's id,
            and to gather a shard's partition). (default: the default group)
        rank (int, optional): draw this rank's share instead (no process group needed: tests,
            simulations). (default: :obj:`None`)

    Returns:
        ``[2, m]`` global ids of the negatives whose source this rank owns (with ``force_undirected``
        both directions of the pairs whose smaller id it owns), sorted by source then slot.
    """
    if method not in ("sparse", "dense"):
        raise ValueError(f"method must be 'sparse' or 'dense' (as PyG's negative_sampling), got {method!r}")
    if isinstance(num_nodes, (tuple, list)):
        raise ValueError("bipartite negative sampling (num_nodes=(num_src, num_dst)) is not supported here; "
                         "pass the homogeneous graph's num_nodes")
    epoch = _call_epoch(epoch, group, rank)
    N = maybe_num_nodes(edge_index, num_nodes)
    keys = _edge_keys(edge_index, N, upper=force_undirected)
    ids = np.arange(N, dtype=np.int64)
    capacity = (N - 1 - ids) if force_undirected else np.full(N, max(N - 1, 0), dtype=np.int64)
    room = capacity - np.bincount(keys // max(N, 1), minlength=N)
    k = _num_negatives(num_neg_samples, edge_index.size(1), force_undirected)
    k = min(k, int(room.sum()))
    if k <= 0:
        return edge_index.new_empty((2, 0))
    gen = np.random.Generator(np.random.PCG64(int(stream_key(seed, _COUNTS, epoch))))
    counts = gen.multivariate_hypergeometric(room, k, method="marginals")
    slot_start = np.cumsum(counts) - counts  # global slot ids: source i owns [slot_start[i], + counts[i])
    sources = np.flatnonzero((counts > 0) & _owned(ids, part, group, rank))
    src = np.repeat(sources, counts[sources])
    slot = np.repeat(slot_start[sources], counts[sources]) + _ranks_within(counts[sources])
    dst = _draw_targets(src, slot, keys, N, force_undirected, seed, epoch)
    out = torch.from_numpy(np.stack([src, dst])).to(edge_index.device)
    return torch.cat([out, out.flip(0)], dim=1) if force_undirected else out


def _num_negatives(num_neg_samples, num_edges: int, force_undirected: bool) -> int:
    if num_neg_samples is None:
        k = num_edges
    elif isinstance(num_neg_samples, float):
        k = int(num_neg_samples * num_edges)
    else:
        k = int(num_neg_samples)
    if k < 0:
        raise ValueError(f"num_neg_samples must be >= 0, got {num_neg_samples}")
    return k // 2 if force_undirected else k


def _ranks_within(counts: np.ndarray) -> np.ndarray:
    """``[0, 1, .., c_0 - 1, 0, 1, .., c_1 - 1, ...]``."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _candidates(src: np.ndarray, u: np.ndarray, N: int, upper: bool) -> np.ndarray:
    """Targets of uniforms ``u``: uniform over :math:`j \\ne i` (or :math:`j > i` when ``upper``)."""
    if upper:
        return src + 1 + np.minimum((u * (N - 1 - src)).astype(np.int64), N - 2 - src)
    j = np.minimum((u * (N - 1)).astype(np.int64), N - 2)
    return j + (j >= src)


def _draw_targets(src: np.ndarray, slot: np.ndarray, keys: np.ndarray, N: int, upper: bool, seed: int,
                  epoch: int) -> np.ndarray:
    """Distinct non-edge targets of every slot (``src`` sorted), uniform (see the module docstring)."""
    dst = np.full(src.size, -1, dtype=np.int64)
    taken = np.empty(0, dtype=np.int64)  # sorted keys already accepted
    todo = np.arange(src.size)
    for attempt in range(_ATTEMPTS):
        if not todo.size:
            return dst
        cand = _candidates(src[todo], uniform(stream_key(seed, _NEGATIVE, epoch, attempt), slot[todo]), N, upper)
        key = src[todo] * N + cand
        _, first = np.unique(key, return_index=True)  # a repeat within the round: the lower slot keeps it
        fresh = np.zeros(todo.size, dtype=bool)
        fresh[first] = True
        ok = fresh & ~_is_in(key, keys) & ~_is_in(key, taken)
        dst[todo[ok]] = cand[ok]
        taken = np.union1d(taken, key[ok])
        todo = todo[~ok]
    for i in np.unique(src[todo]):  # dense rows: pick among the candidates left, by smallest hash
        slots = todo[src[todo] == i]
        cand = np.arange(i + 1, N) if upper else np.delete(np.arange(N), i)
        key = i * N + cand
        cand = cand[~_is_in(key, keys) & ~_is_in(key, taken)]
        order = np.argsort(uniform(stream_key(seed, _FALLBACK, epoch), i * N + cand), kind="stable")
        dst[slots] = cand[order[:slots.size]]
    return dst


def structured_negative_sampling(edge_index: Tensor, num_nodes: int | None = None,
                                 contains_neg_self_loops: bool = True, *, seed: int = 0, epoch: int | None = None,
                                 part=None, group: dist.ProcessGroup | None = None, rank: int | None = None
                                 ) -> tuple[Tensor, Tensor, Tensor]:
    r"""This rank's share of PyG's ``structured_negative_sampling``: ``(i, j, k)`` for every edge
    :math:`(i, j)` of ``edge_index`` whose source :math:`i` this rank owns (in edge order), :math:`k`
    uniform over the nodes with :math:`(i, k)` no edge (and :math:`k \ne i` unless
    ``contains_neg_self_loops``), drawn by hashes of the edge's position in ``edge_index``;
    ``seed``, ``epoch``, ``part``, ``group`` and ``rank`` as in :func:`negative_sampling` (without
    ``epoch=`` every call draws afresh, as PyG's).

    Args:
        edge_index (torch.Tensor): the whole graph's edges (global ids), as PyG takes them.
        num_nodes (int, optional): :math:`N`. (default: the largest id + 1)
        contains_neg_self_loops (bool, optional): :math:`k = i` may be drawn. (default: :obj:`True`)
        seed (int, optional): the random stream. (default: :obj:`0`)
        epoch (int, optional): the draw within the stream; ``None``: fresh at every call.
            (default: :obj:`None`)
        part (torch.Tensor or torch_geometric.data.Data, optional): the partition, as in
            :func:`negative_sampling`. (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: the default group)
        rank (int, optional): draw this rank's share instead (no process group needed).
            (default: :obj:`None`)

    Shapes:
        - **input:** edge indices :math:`(2, |\mathcal{E}|)`
        - **output:** three :math:`(|\mathcal{E}_r|)` tensors ``i``, ``j``, ``k`` for the
          :math:`|\mathcal{E}_r|` edges whose source this rank owns

    Raises:
        ValueError: a source of this rank is linked to every node (PyG's
            ``structured_negative_sampling_feasible`` is ``False``; PyG would loop forever).
    """
    epoch = _call_epoch(epoch, group, rank)
    N = maybe_num_nodes(edge_index, num_nodes)
    src_all, dst_all = edge_index.detach().cpu().numpy().astype(np.int64)
    positives = src_all * N + dst_all
    if not contains_neg_self_loops:
        positives = np.concatenate([positives, np.arange(N, dtype=np.int64) * (N + 1)])
    positives = np.unique(positives)
    edge_id = np.flatnonzero(_owned(src_all, part, group, rank))
    src = src_all[edge_id]
    allowed = N - np.bincount(positives // max(N, 1), minlength=N)
    if src.size and int(allowed[src].min()) <= 0:
        node = int(src[allowed[src] <= 0][0])
        raise ValueError(f"structured_negative_sampling: node {node} is linked to every node, so it has no negative "
                         f"(torch_geometric.utils.structured_negative_sampling_feasible is False for this graph)")
    k = np.full(src.size, -1, dtype=np.int64)
    todo = np.arange(src.size)
    for attempt in range(_ATTEMPTS):
        if not todo.size:
            break
        u = uniform(stream_key(seed, _STRUCTURED, epoch, attempt), edge_id[todo])
        cand = np.minimum((u * N).astype(np.int64), N - 1)
        ok = ~_is_in(src[todo] * N + cand, positives)
        k[todo[ok]] = cand[ok]
        todo = todo[~ok]
    for t in todo:  # nodes with few negatives: uniform among them directly
        i = int(src[t])
        cand = np.arange(N)[~_is_in(i * N + np.arange(N, dtype=np.int64), positives)]
        k[t] = cand[min(int(uniform(stream_key(seed, _FALLBACK, epoch), edge_id[t:t + 1])[0] * cand.size),
                        cand.size - 1)]
    device = edge_index.device
    as_tensor = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    return as_tensor(src), as_tensor(dst_all[edge_id]), as_tensor(k)
