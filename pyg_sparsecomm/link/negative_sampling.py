r"""Negative pairs drawn by hashes of global ids: the same pairs whatever ``P`` and the partition,
each rank drawing the pairs whose source it owns without talking.

**negative_sampling** (PyG's :func:`torch_geometric.utils.negative_sampling`).  PyG returns
:math:`k` distinct pairs :math:`(i, j)`, :math:`i \ne j`, that are not edges, chosen uniformly at
random among all such pairs (``"sparse"`` and ``"dense"`` differ in memory and speed only; with
``force_undirected`` the pairs :math:`i < j` whose edge :math:`(i, j)` is absent, returned in both
directions).  With bipartite sizes ``num_nodes=(num_src, num_dst)`` (a relation between two node
types) the pairs are :math:`(i, j) \in [0, N_s) \times [0, N_d)` that are not edges, :math:`i = j`
included (two different nodes), and ``force_undirected`` is ignored, as PyG's.  A uniformly random
:math:`k`-subset of the non-edges is drawn here in two steps of exactly that distribution:

1. how many negatives every source :math:`i` gets: :math:`(c_i)_i` is multivariate hypergeometric,
   :math:`k` draws without replacement from an urn holding :math:`m_i` balls of colour :math:`i`
   (:math:`m_i` = non-edges with source :math:`i`), from NumPy's generator seeded by
   ``(seed, epoch)``, the same vector on every rank (:math:`O(N)` work);
2. which: the owner of :math:`i` draws :math:`c_i` distinct targets uniformly among its :math:`m_i`,
   by rejection (target of slot :math:`t` in attempt :math:`a`: :math:`\lfloor u(s, e, a, t)
   (N - 1)\rfloor`, skipping :math:`i`, or :math:`\lfloor u(s, e, a, t) N_d\rfloor` if
   bipartite; :math:`u` the counter-based uniform of :mod:`~pyg_sparsecomm.sampling.randomness`,
   :math:`t` a global slot id), redrawing edges and repeats; after ``_ATTEMPTS`` rounds the last
   ones are chosen among the remaining candidates by smallest hash.  Every step treats the
   candidate targets symmetrically, so the set is uniform.

The draws are not PyG's draws (PyG uses Python's global ``random``), and neither the order of the
pairs: here a rank's pairs are sorted by source, then slot.  As PyG's, every call draws fresh
negatives: without ``epoch=`` the stream is the number of such calls so far (counted per process
and per rank drawn for, agreed by the ranks: one host all-reduce of one integer, so every rank calls
together, as it iterates a loader), in a range apart from any ``epoch=`` a script passes; with
``epoch=`` a call is reproducible and talks to no one.  Where PyG gives up after three rounds
with fewer than :math:`k` pairs (dense graphs), this returns :math:`\min(k, \sum_i m_i)`.

**structured_negative_sampling** (PyG's function of that name): for every edge :math:`(i, j)` a
target :math:`k` uniform over the nodes with :math:`(i, k)` not an edge (nor :math:`k = i` if
``contains_neg_self_loops=False``), by rejection keyed by the edge's id, as PyG draws it; with
bipartite sizes (which PyG's does not take) :math:`k` is uniform over the :math:`N_d` targets.

Both draw only from the sizes, the edges and global ids, never from the partition: the union of the
ranks' shares is the same set for any ``P`` and partition.  Per edge type of a ``HeteroData``:
:mod:`~pyg_sparsecomm.link.hetero_negatives`.
"""
from typing import Any

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
#: the targets a source may pair with: any of the other type (bipartite), ``j != i``, or ``j > i``
_BIPARTITE, _DIRECTED, _UPPER = "bipartite", "directed", "upper"


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


def sizes(edge_index: Tensor, num_nodes, what: str = "negative_sampling") -> tuple[int, int, bool]:
    """``(num_src, num_dst, bipartite)`` of PyG's ``num_nodes`` (an ``int``, ``None`` or bipartite
    ``(num_src, num_dst)``); raises ``ValueError`` naming the fix for ids out of those ranges."""
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.is_floating_point():
        raise ValueError(f"{what}: edge_index must be a [2, num_edges] integer tensor of global ids, got "
                         f"{edge_index.dtype} of shape {list(edge_index.shape)}")
    bipartite = isinstance(num_nodes, (tuple, list))
    if bipartite:
        if len(num_nodes) != 2 or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0
                                      for n in num_nodes):
            raise ValueError(f"{what}: bipartite num_nodes must be (num_src, num_dst), two integers >= 0, got "
                             f"{num_nodes!r}")
        size = (int(num_nodes[0]), int(num_nodes[1]))
    else:
        n = maybe_num_nodes(edge_index, num_nodes)
        size = (n, n)
    for end, name in enumerate(("source", "target")):
        ids = edge_index[end]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size[end]):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            fix = (f"the bipartite sizes num_nodes={size} allow {name} ids 0..{size[end] - 1}: pass num_nodes="
                   f"(number of source nodes, number of target nodes), e.g. (data[src].num_nodes, "
                   f"data[dst].num_nodes)") if bipartite else \
                  f"num_nodes={size[0]}: pass the graph's number of nodes (data.num_nodes), above every id"
            raise ValueError(f"{what}: edge_index[{end}] holds id {bad} but {fix}")
    return size[0], size[1], bipartite


def _owned(sources: np.ndarray, num_src: int, part, group: dist.ProcessGroup | None,
           rank: int | None) -> np.ndarray:
    """Mask of the ``sources`` this rank (``rank``, if given) owns (all of them without a partition)."""
    if part is None:
        return np.ones(sources.size, dtype=bool)
    owner = partition_vector(part, group, check_world_size=rank is None)
    if owner.size != num_src:
        raise ValueError(f"the partition gives the owner of {owner.size} nodes but there are {num_src} source nodes: "
                         f"pass the partition of the sources (with bipartite sizes the source type's, data[src].part)")
    return owner[sources] == (group_rank(group) if rank is None else rank)


def _edge_keys(edge_index: Tensor, num_dst: int, mode: str) -> np.ndarray:
    """Sorted distinct keys ``i * num_dst + j`` of the edges ``(i, j)`` a negative may not be
    (all if bipartite, else ``i != j``; ``i < j`` for ``force_undirected``)."""
    src, dst = edge_index.detach().cpu().numpy().astype(np.int64)
    keep = np.ones(src.size, dtype=bool) if mode == _BIPARTITE else (src < dst if mode == _UPPER else src != dst)
    return np.unique(src[keep] * num_dst + dst[keep])


def _is_in(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    pos = np.minimum(np.searchsorted(sorted_keys, keys), max(sorted_keys.size - 1, 0))
    return sorted_keys[pos] == keys if sorted_keys.size else np.zeros(keys.size, dtype=bool)


def negative_sampling(edge_index: Tensor, num_nodes: int | tuple[int, int] | None = None,
                      num_neg_samples: int | float | None = None, method: str = "sparse",
                      force_undirected: bool = False, *, seed: int = 0, epoch: int | None = None, part=None,
                      group: dist.ProcessGroup | None = None, rank: int | None = None) -> Tensor:
    r"""This rank's share of PyG's ``negative_sampling(edge_index, ...)`` (see the module docstring).

    Args:
        edge_index (torch.Tensor): ``[2, E]`` the whole graph's edges (global ids), as PyG takes them.
        num_nodes (int or tuple[int, int], optional): :math:`N`, or bipartite sizes
            ``(num_src, num_dst)``: sources in :math:`[0, N_s)`, targets in :math:`[0, N_d)`, as PyG's.
            (default: the largest id + 1)
        num_neg_samples (int or float, optional): negatives over all ranks; a float is a ratio of
            ``E``; ``None``: ``E``.  (Halved with ``force_undirected``, as PyG does.)
            (default: :obj:`None`)
        method (str, optional): ``"sparse"`` or ``"dense"``: accepted for PyG's signature; the draw
            is the same. (default: ``"sparse"``)
        force_undirected (bool, optional): pairs :math:`i < j`, returned in both directions; ignored
            with bipartite sizes, as PyG's. (default: :obj:`False`)
        seed (int, optional): the random stream. (default: ``0``)
        epoch (int, optional): the draw within the stream: the same ``epoch`` gives the same
            negatives, without communication; ``None``: fresh negatives at every call, as PyG's
            (the calls counted and agreed by the ranks, see the module doc: every rank calls
            together). (default: ``None``)
        part (torch.Tensor or torch_geometric.data.Data, optional): the partition of the sources
            (see :func:`~pyg_sparsecomm.link.distribute_pairs`; bipartite: the source type's
            ``[N_s]`` partition); ``None``: every pair.  ``data.part`` (or the partitioned ``Data``)
            draws without any communication; a shard gathers every rank's ``n_id`` first (a
            collective). (default: :obj:`None`)
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
    num_src, num_dst, bipartite = sizes(edge_index, num_nodes)
    mode = _BIPARTITE if bipartite else (_UPPER if force_undirected else _DIRECTED)
    epoch = _call_epoch(epoch, group, rank)
    keys = _edge_keys(edge_index, num_dst, mode)
    ids = np.arange(num_src, dtype=np.int64)
    capacity = {_BIPARTITE: np.full(num_src, num_dst, dtype=np.int64), _UPPER: num_dst - 1 - ids,
                _DIRECTED: np.full(num_src, max(num_dst - 1, 0), dtype=np.int64)}[mode]
    room = capacity - np.bincount(keys // max(num_dst, 1), minlength=num_src)
    k = min(_num_negatives(num_neg_samples, edge_index.size(1), mode == _UPPER), int(room.sum()))
    if k <= 0:
        return edge_index.new_empty((2, 0))
    gen = np.random.Generator(np.random.PCG64(int(stream_key(seed, _COUNTS, epoch))))
    counts = gen.multivariate_hypergeometric(room, k, method="marginals")
    slot_start = np.cumsum(counts) - counts  # global slot ids: source i owns [slot_start[i], + counts[i])
    sources = np.flatnonzero((counts > 0) & _owned(ids, num_src, part, group, rank))
    src = np.repeat(sources, counts[sources])
    slot = np.repeat(slot_start[sources], counts[sources]) + _ranks_within(counts[sources])
    dst = _draw_targets(src, slot, keys, num_dst, mode, seed, epoch)
    out = torch.from_numpy(np.stack([src, dst])).to(edge_index.device)
    return torch.cat([out, out.flip(0)], dim=1) if mode == _UPPER else out


def check_num_neg_samples(num_neg_samples: Any, share: bool = False) -> None:
    """Raises ``ValueError`` naming the accepted values unless ``num_neg_samples`` is an ``int`` or a
    ``float`` >= 0 or ``None`` (``share``: an ``int`` is this rank's share, as on a shard)."""
    if isinstance(num_neg_samples, bool) or not isinstance(num_neg_samples, (int, np.integer, float, type(None))) \
            or (num_neg_samples is not None and not num_neg_samples >= 0):
        count = "this rank's share of the negatives, added over the ranks" if share else "the negatives of all ranks"
        raise ValueError(f"negative_sampling: num_neg_samples={num_neg_samples!r}: pass an int >= 0 ({count}), a "
                         f"float >= 0 (a ratio of the graph's edges) or None (as many negatives as edges)")


def _num_negatives(num_neg_samples, num_edges: int, force_undirected: bool) -> int:
    check_num_neg_samples(num_neg_samples)
    if num_neg_samples is None:
        k = num_edges
    elif isinstance(num_neg_samples, float):
        k = int(num_neg_samples * num_edges)
    else:
        k = int(num_neg_samples)
    return k // 2 if force_undirected else k


def _ranks_within(counts: np.ndarray) -> np.ndarray:
    """``[0, 1, .., c_0 - 1, 0, 1, .., c_1 - 1, ...]``."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _candidates(src: np.ndarray, u: np.ndarray, num_dst: int, mode: str) -> np.ndarray:
    """Targets of uniforms ``u``: uniform over :math:`[0, N_d)` (bipartite), :math:`j \\ne i`, or
    :math:`j > i` (``force_undirected``)."""
    if mode == _BIPARTITE:
        return np.minimum((u * num_dst).astype(np.int64), num_dst - 1)
    if mode == _UPPER:
        return src + 1 + np.minimum((u * (num_dst - 1 - src)).astype(np.int64), num_dst - 2 - src)
    j = np.minimum((u * (num_dst - 1)).astype(np.int64), num_dst - 2)
    return j + (j >= src)


def _all_targets(i: int, num_dst: int, mode: str) -> np.ndarray:
    """Every target source ``i`` may pair with, in order (the candidates of :func:`_candidates`)."""
    if mode == _BIPARTITE:
        return np.arange(num_dst)
    return np.arange(i + 1, num_dst) if mode == _UPPER else np.delete(np.arange(num_dst), i)


def _draw_targets(src: np.ndarray, slot: np.ndarray, keys: np.ndarray, num_dst: int, mode: str, seed: int,
                  epoch: int) -> np.ndarray:
    """Distinct non-edge targets of every slot (``src`` sorted), uniform (see the module docstring)."""
    dst = np.full(src.size, -1, dtype=np.int64)
    taken = np.empty(0, dtype=np.int64)  # sorted keys already accepted
    todo = np.arange(src.size)
    for attempt in range(_ATTEMPTS):
        if not todo.size:
            return dst
        u = uniform(stream_key(seed, _NEGATIVE, epoch, attempt), slot[todo])
        cand = _candidates(src[todo], u, num_dst, mode)
        key = src[todo] * num_dst + cand
        _, first = np.unique(key, return_index=True)  # a repeat within the round: the lower slot keeps it
        fresh = np.zeros(todo.size, dtype=bool)
        fresh[first] = True
        ok = fresh & ~_is_in(key, keys) & ~_is_in(key, taken)
        dst[todo[ok]] = cand[ok]
        taken = np.union1d(taken, key[ok])
        todo = todo[~ok]
    for i in np.unique(src[todo]):  # dense rows: pick among the candidates left, by smallest hash
        slots = todo[src[todo] == i]
        cand = _all_targets(int(i), num_dst, mode)
        key = i * num_dst + cand
        cand = cand[~_is_in(key, keys) & ~_is_in(key, taken)]
        order = np.argsort(uniform(stream_key(seed, _FALLBACK, epoch), i * num_dst + cand), kind="stable")
        dst[slots] = cand[order[:slots.size]]
    return dst


def structured_negative_sampling(edge_index: Tensor, num_nodes: int | tuple[int, int] | None = None,
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
        num_nodes (int or tuple[int, int], optional): :math:`N`, or bipartite sizes
            ``(num_src, num_dst)`` (beyond PyG's: :math:`k` among the :math:`N_d` targets).
            (default: the largest id + 1)
        contains_neg_self_loops (bool, optional): :math:`k = i` may be drawn (must stay
            :obj:`True` with bipartite sizes: a source is no target). (default: :obj:`True`)
        seed (int, optional): the random stream. (default: :obj:`0`)
        epoch (int, optional): the draw within the stream; ``None``: fresh at every call.
            (default: :obj:`None`)
        part (torch.Tensor or torch_geometric.data.Data, optional): the partition of the sources,
            as in :func:`negative_sampling`. (default: :obj:`None`)
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
    num_src, num_dst, bipartite = sizes(edge_index, num_nodes, "structured_negative_sampling")
    if bipartite and not contains_neg_self_loops:
        raise ValueError("structured_negative_sampling: contains_neg_self_loops=False means nothing with bipartite "
                         "sizes (a source and a target are different nodes): leave it True")
    epoch = _call_epoch(epoch, group, rank)
    src_all, dst_all = edge_index.detach().cpu().numpy().astype(np.int64)
    positives = src_all * num_dst + dst_all
    if not contains_neg_self_loops:
        positives = np.concatenate([positives, np.arange(num_src, dtype=np.int64) * (num_dst + 1)])
    positives = np.unique(positives)
    edge_id = np.flatnonzero(_owned(src_all, num_src, part, group, rank))
    src = src_all[edge_id]
    allowed = num_dst - np.bincount(positives // max(num_dst, 1), minlength=num_src)
    if src.size and int(allowed[src].min()) <= 0:
        node = int(src[allowed[src] <= 0][0])
        of_type = " of the target type" if bipartite else ""
        raise ValueError(f"structured_negative_sampling: node {node} is linked to every node{of_type}, "
                         f"so it has no negative (torch_geometric.utils.structured_negative_sampling_feasible is "
                         f"False for this graph)")
    k = np.full(src.size, -1, dtype=np.int64)
    todo = np.arange(src.size)
    for attempt in range(_ATTEMPTS):
        if not todo.size:
            break
        u = uniform(stream_key(seed, _STRUCTURED, epoch, attempt), edge_id[todo])
        cand = np.minimum((u * num_dst).astype(np.int64), num_dst - 1)
        ok = ~_is_in(src[todo] * num_dst + cand, positives)
        k[todo[ok]] = cand[ok]
        todo = todo[~ok]
    for t in todo:  # nodes with few negatives: uniform among them directly
        i = int(src[t])
        targets = np.arange(num_dst, dtype=np.int64)
        cand = targets[~_is_in(i * num_dst + targets, positives)]
        k[t] = cand[min(int(uniform(stream_key(seed, _FALLBACK, epoch), edge_id[t:t + 1])[0] * cand.size),
                        cand.size - 1)]
    device = edge_index.device
    as_tensor = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    return as_tensor(src), as_tensor(dst_all[edge_id]), as_tensor(k)
