"""The communication plan of the sparsity-aware 1D SpMM.

Rows of ``A`` (targets ``i`` of edges ``j -> i``) and of ``H`` are split by a
partition ``part``.  Rank ``r`` computes ``(A H)[i]`` for the nodes it owns and
therefore needs ``H[j]`` for every source ``j`` of an edge into one of its
rows.  Sources owned by another rank form its *halo*; the owner of ``j``
sends ``H[j]`` to ``r`` once per SpMM, no matter how many of ``r``'s rows use
it.  Those rows are the paper's ``NnzCols(r, s)`` (ICPP'24, Algorithm 1): the
nonzero columns of block ``A_rs``.  The total rows moved per SpMM is the
connectivity-1 (km1) metric of the column-net hypergraph of the partition.

Everything here is plain numpy over the global edge list and needs no process
group, so volumes can be simulated for any ``P`` (e.g. 1024) in one process.
Layout conventions:

* a rank's owned nodes (``n_id``) are its nodes in ascending global id;
* its halo is ordered by (owner rank, global id), so that the buffer returned
  by one ``all_to_all_single`` is the halo in order;
* ``send_index`` lists, grouped by destination rank in rank order and within
  a destination by ascending global id, the *local* rows this rank sends.
"""
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..graph.validate import check_edge_index, check_partition
from .edges import EDGE_CHUNK, edge_chunks, numpy_ids, numpy_long
from .sorted_keys import SortedUnion, sorted_unique


@dataclass
class CommPattern:
    """Who needs which rows, for one partition of one graph (all ranks at once).

    ``pair_node[k]`` must be sent from its owner ``pair_owner[k]`` (``part[pair_node[k]]``) to
    rank ``pair_dst[k]``; pairs are sorted by (destination, owner, node).  The pair arrays are the
    pattern's largest, so they are kept narrow (``int32`` nodes and ranks, ``int16`` owners when
    they fit: 10 bytes per pair); :attr:`pair_src` is the owners as ``int64``.

    ``spans[d, r, k]`` (``[2, P, P]``) is what the one-sided ``algorithm="rdma"``
    reads: in the forward (``d = 0``) product rank ``r`` gets the smallest range of
    rank ``k``'s rows holding every column of block :math:`A_{rk}`; in the backward
    (``d = 1``) product, of :math:`(A^T)_{rk} = A_{kr}^T`, i.e. every row of
    :math:`A_{kr}`.  Zero on the diagonal and for empty blocks.

    ``block_nnz[r, k]`` (``[P, P]``): edges from rank ``k``'s nodes into rank ``r``'s, the stored
    entries of block :math:`A_{rk}` before any normalisation adds self-loops (``edge_nnz`` is its
    row sum).
    """
    num_nodes: int
    num_parts: int
    part: np.ndarray          # [num_nodes] owner of every node
    local_index: np.ndarray   # [num_nodes] row of the node on its owner
    part_sizes: np.ndarray    # [num_parts] owned nodes per rank
    edge_nnz: np.ndarray      # [num_parts] edges whose target each rank owns
    pair_node: np.ndarray     # [num_pairs] node to send (int32 when the ids fit)
    pair_dst: np.ndarray      # [num_pairs] receiving rank (int32)
    pair_owner: np.ndarray    # [num_pairs] sending rank, part[pair_node] (int16 when it fits)
    spans: np.ndarray         # [2, num_parts, num_parts] rows of one-sided gets (see above)
    block_nnz: np.ndarray     # [num_parts, num_parts] edges of every block A_rk (see above)

    @property
    def pair_src(self) -> np.ndarray:
        """The sending rank of every pair, ``int64``."""
        return self.pair_owner.astype(np.int64)

    def volume_matrix(self) -> np.ndarray:
        """``V[s, d]`` = rows rank ``s`` sends to rank ``d`` per SpMM."""
        P = self.num_parts
        flat = np.bincount(self.pair_src * P + self.pair_dst, minlength=P * P)
        return flat.reshape(P, P)


def owner_rows(part: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``(part_sizes, local_index)``: the nodes every rank owns and the row of every node on its
    owner (ascending global id within a rank: a shard's ``n_id`` order)."""
    part_sizes = np.bincount(part, minlength=num_parts)
    order = np.argsort(part, kind="stable")  # groups nodes by part, ascending id within
    starts = np.concatenate([[0], np.cumsum(part_sizes)[:-1]])
    local_index = np.empty(part.size, dtype=np.int64)
    local_index[order] = np.arange(part.size, dtype=np.int64) - starts[part[order]]
    return part_sizes, local_index




def comm_pattern(edge_index, part, num_nodes: int, num_parts: int, target_part=None,
                 chunk: int = EDGE_CHUNK) -> CommPattern:
    r"""Computes the global communication pattern of ``part`` (vectorised, O(E log E)).

    One pass over the edges, ``chunk`` at a time: the working memory is O(N + pairs + chunk), not
    O(E); the result does not depend on ``chunk``.  ``edge_index`` is the ``[2, E]`` graph, or its
    :data:`~pyg_sparsecomm.plan.edges.EdgeChunks` (the out-of-core writer's edge files, read a chunk at a time:
    :mod:`~pyg_sparsecomm.store.from_files`), whose ids the caller has checked.

    With ``target_part`` the graph is bipartite (a relation of a heterogeneous graph): row 1 of
    ``edge_index`` indexes another node set, whose owners ``target_part`` lists; the pattern is
    that of the source nodes (``part``, ``num_nodes``) read by the targets' owners.

    Args:
        edge_index (torch.Tensor or EdgeChunks): the ``[2, E]`` graph (global ids), or its chunks.
        part (torch.Tensor): ``[N]`` owner of every node.
        num_nodes (int): :math:`N`.
        num_parts (int): :math:`P`.
        target_part (torch.Tensor, optional): ``[N_t]`` owner of every target node of a bipartite
            relation. (default: :obj:`None`)
        chunk (int, optional): edges read at once. (default: :obj:`EDGE_CHUNK`)

    Shapes:
        - **input:** edge indices :math:`(2, |\mathcal{E}|)`, partition :math:`(|\mathcal{V}|)`
        - **output:** a :class:`CommPattern` with per-node arrays :math:`(|\mathcal{V}|)`, per-pair
          arrays :math:`(m)` for the :math:`m` (rank, node) reads across ranks and
          :math:`(P, P)` block counts
    """
    if isinstance(edge_index, Tensor) and target_part is None:
        check_edge_index(edge_index, num_nodes)
    if isinstance(part, Tensor):
        check_partition(part, num_nodes, num_parts)
    chunks = edge_index if callable(edge_index) else edge_chunks(edge_index)
    part = numpy_long(part)
    P, N = int(num_parts), int(num_nodes)

    part_sizes, local_index = owner_rows(part, P)
    owner = part if target_part is None else numpy_long(target_part)
    target_index = local_index if target_part is None else owner_rows(owner, P)[1]

    block_nnz = np.zeros(P * P, dtype=np.int64)
    pairs = SortedUnion()
    lo, hi = _span_bounds(P)
    for _, src, dst in chunks(max(1, chunk)):  # int32 ids are widened a chunk at a time
        src, dst = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)
        src_part, dst_part = part[src], owner[dst]
        block_nnz += np.bincount(dst_part * P + src_part, minlength=P * P)
        cut = src_part != dst_part
        src, dst, src_part, dst_part = src[cut], dst[cut], src_part[cut], dst_part[cut]
        # One key per (destination, owner, node): sorting them gives the halo order.
        pairs.add(sorted_unique((dst_part * P + src_part) * N + src))
        _widen_spans(lo, hi, src_part * P + dst_part, target_index[dst])
    pair_node, pair_dst, pair_owner = _split_pair_keys(pairs.result(), N, P, chunk)
    del pairs
    blocks = block_nnz.reshape(P, P)
    spans = np.stack([pair_spans(pair_dst, pair_node, part, local_index, P, chunk), _spans(lo, hi, P)])
    return CommPattern(N, P, part, local_index, part_sizes, blocks.sum(axis=1), pair_node, pair_dst, pair_owner,
                       spans, blocks)


def _split_pair_keys(keys: np.ndarray, num_nodes: int, num_parts: int,
                     chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pair_node, pair_dst, pair_owner)`` of the sorted keys ``(dst * P + owner) * N + node``, as
    narrow as their values allow, split a chunk at a time so that at most the keys and the outputs
    are alive."""
    node: np.ndarray = np.empty(len(keys), dtype=id_dtype(num_nodes))
    dst: np.ndarray = np.empty(len(keys), dtype=id_dtype(num_parts))
    owner: np.ndarray = np.empty(len(keys), dtype=np.int16 if num_parts <= np.iinfo(np.int16).max else dst.dtype)
    for a in range(0, len(keys), max(1, chunk)):
        block = keys[a:a + chunk] // num_nodes
        node[a:a + chunk] = keys[a:a + chunk] % num_nodes
        owner[a:a + chunk] = block % num_parts
        dst[a:a + chunk] = block // num_parts
    return node, dst, owner


def id_dtype(bound: int) -> type:
    """``int32`` when every value up to ``bound`` fits it, else ``int64``: the one rule for node and
    part ids kept as numpy arrays (``bound`` a count or a sentinel value stored with them)."""
    return np.int32 if bound <= np.iinfo(np.int32).max else np.int64


def _span_bounds(num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    return (np.full(num_parts * num_parts, np.iinfo(np.int64).max, dtype=np.int64),
            np.full(num_parts * num_parts, -1, dtype=np.int64))


def _widen_spans(lo: np.ndarray, hi: np.ndarray, key: np.ndarray, row: np.ndarray) -> None:
    np.minimum.at(lo, key, row)
    np.maximum.at(hi, key, row)


def _spans(lo: np.ndarray, hi: np.ndarray, num_parts: int) -> np.ndarray:
    return np.where(hi >= 0, hi - lo + 1, 0).reshape(num_parts, num_parts)


def pair_spans(pair_dst: np.ndarray, pair_node: np.ndarray, part: np.ndarray, local_index: np.ndarray,
               num_parts: int, chunk: int = EDGE_CHUNK) -> np.ndarray:
    r"""Rows of the smallest contiguous ranges holding the rows each rank reads from each other rank.

    .. math::
        S_{ab} = \max_{k \in K_{ab}} \mathrm{row}_k - \min_{k \in K_{ab}} \mathrm{row}_k + 1,
        \qquad K_{ab} = \{k : \mathrm{pair\_dst}_k = a, \mathrm{part}[\mathrm{pair\_node}_k] = b\}

    with :math:`\mathrm{row}_k` = ``local_index[pair_node[k]]`` (0 where :math:`K_{ab}` is empty).
    Read ``chunk`` pairs at a time: no array of the pairs' size besides theirs.

    Args:
        pair_dst (np.ndarray): ``[m]`` the rank reading, per pair.
        pair_node (np.ndarray): ``[m]`` the node read (owned by another rank), per pair.
        part (np.ndarray): ``[N]`` owner of every node.
        local_index (np.ndarray): ``[N]`` every node's row on its owner.
        num_parts (int): ``P``.

    Returns:
        ``[P, P]`` int64 matrix ``S``.
    """
    lo, hi = _span_bounds(num_parts)
    for a in range(0, pair_node.size, max(1, chunk)):
        node = pair_node[a:a + chunk]
        _widen_spans(lo, hi, pair_dst[a:a + chunk].astype(np.int64) * num_parts + part[node], local_index[node])
    return _spans(lo, hi, num_parts)


@dataclass
class RankPlan:
    """Everything one rank needs to run the halo exchange (torch tensors, CPU).

    Attributes:
        rank (int): the rank in the process group the plan was made for.
        world_size (int): the process group's size.
        num_nodes (int): global number of nodes.
        n_id (torch.Tensor): ``[num_owned]`` global ids of the owned rows, in local order.
        halo_n_id (torch.Tensor): ``[halo_size]`` global ids of the halo columns.
        halo_owner (torch.Tensor): ``[halo_size]`` rank that owns each halo column.
        halo_remote_index (torch.Tensor): ``[halo_size]`` row of each halo node on its owner.
        send_index (torch.Tensor): local rows sent, grouped by destination rank.
        send_counts (list[int]): rows sent to every rank.
        recv_counts (list[int]): rows received from every rank.
        part_sizes (list[int]): owned rows of every rank (used by the block-row broadcasts).
        minibatch (bool, optional): the plan of one mini-batch (another graph every step), not of a shard's
            whole block row: what is set up once per graph must not be set up per batch. (default: :obj:`False`)
    """
    rank: int
    world_size: int
    num_nodes: int
    n_id: Tensor
    halo_n_id: Tensor
    halo_owner: Tensor
    halo_remote_index: Tensor
    send_index: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    part_sizes: list[int]
    minibatch: bool = False

    # cached: read by every exchange and layer call (the id tensors are never replaced in a plan)
    @cached_property
    def num_owned(self) -> int:
        return int(self.n_id.numel())

    @cached_property
    def halo_size(self) -> int:
        return int(self.halo_n_id.numel())

    def to(self, device) -> "RankPlan":
        values = {f.name: getattr(self, f.name) for f in fields(self)}  # not the cached sizes
        moved: dict[str, Any] = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in values.items()}
        return RankPlan(**moved)

    def locate_columns(self, col: Tensor) -> tuple[Tensor, Tensor]:
        r"""Where the ``[owned | halo]`` columns ``col`` live: ``(owner, remote_row)``.

        .. math::
            (\mathrm{owner}_c, \mathrm{row}_c) = \begin{cases}
            (\mathrm{rank}, c) & c < n \\
            (\mathrm{halo\_owner}_{c - n}, \mathrm{halo\_remote\_index}_{c - n}) & c \ge n
            \end{cases}

        with ``n = num_owned``: column ``c`` of this rank's block row is row
        ``remote_row[c]`` of rank ``owner[c]``'s block row of ``H``.

        Args:
            col (torch.Tensor): int64 column indices (e.g. ``HaloAdj.col``).

        Returns:
            Two tensors shaped like ``col``.
        """
        n = self.num_owned
        owner, remote_row = torch.full_like(col, self.rank), col.clone()
        halo = col >= n
        owner[halo] = self.halo_owner.to(col.device)[col[halo] - n]
        remote_row[halo] = self.halo_remote_index.to(col.device)[col[halo] - n]
        return owner, remote_row

    def predicted_bytes(self, num_columns: int, element_size: int = 4) -> dict:
        """Bytes this rank sends and receives in one exchange of ``num_columns`` wide rows."""
        row = num_columns * element_size
        return {"sent": sum(self.send_counts) * row, "received": sum(self.recv_counts) * row}


def rank_plan(pattern: CommPattern, rank: int) -> RankPlan:
    """Slices the plan of ``rank`` out of the global pattern (O(N + pairs)).

    Args:
        pattern (CommPattern): the global pattern (:func:`comm_pattern`).
        rank (int): the rank whose plan to slice.
    """
    P = pattern.num_parts
    if not 0 <= rank < P:
        raise ValueError(f"rank {rank} is outside the partition's {P} parts")
    part = pattern.part
    n_id = np.flatnonzero(part == rank)

    # bounds in the array's dtype: mixed dtypes would make numpy convert the whole array per call
    lo, hi = np.searchsorted(pattern.pair_dst, np.array([rank, rank + 1], dtype=pattern.pair_dst.dtype))
    halo_n_id = pattern.pair_node[lo:hi]
    halo_owner = pattern.pair_owner[lo:hi]

    sends = pattern.pair_owner == rank  # already ordered by (destination, node)
    send_nodes, send_dst = pattern.pair_node[sends], pattern.pair_dst[sends]

    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    return RankPlan(
        rank=rank, world_size=P, num_nodes=pattern.num_nodes,
        n_id=t(n_id), halo_n_id=t(halo_n_id), halo_owner=t(halo_owner),
        halo_remote_index=t(pattern.local_index[halo_n_id]),
        send_index=t(pattern.local_index[send_nodes]),
        send_counts=np.bincount(send_dst, minlength=P).tolist(),
        recv_counts=np.bincount(halo_owner, minlength=P).tolist(),
        part_sizes=pattern.part_sizes.tolist(),
    )


def restrict_counts(send_counts: list[int], recv_counts: list[int], rank: int,
                    blocks: list[int]) -> tuple[list[int], list[int]]:
    """A 1D exchange limited to the block columns ``blocks`` (1.5D's stage blocks): rows come
    only from owners in ``blocks``, and ``rank`` sends only if it is one of them (every rank
    of a grid column multiplies the same blocks)."""
    in_stage = set(blocks)
    sends = rank in in_stage
    return ([c if sends else 0 for c in send_counts],
            [c if k in in_stage else 0 for k, c in enumerate(recv_counts)])


class InEdgeRelabel:
    """Local ids of the edges into ``plan.rank``: ``(row, col)`` of global edges ``ids``, ``row``
    the target's owned row, ``col`` its source's column in ``[owned | halo]`` (see
    :func:`local_edges`; ``target_part`` for a bipartite relation)."""

    def __init__(self, pattern: CommPattern, plan: RankPlan, target_part=None) -> None:
        self.pattern, self.plan = pattern, plan
        self.target_index = (pattern.local_index if target_part is None
                             else owner_rows(numpy_long(target_part), pattern.num_parts)[1])
        halo = plan.halo_n_id.numpy()
        self.halo_key = pattern.part[halo] * pattern.num_nodes + halo  # sorted: pairs are (dst, owner, node)

    def __call__(self, src: np.ndarray, dst: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pattern, part, r = self.pattern, self.pattern.part, self.plan.rank
        s = src[ids]
        col = np.where(part[s] == r, pattern.local_index[s],
                       self.plan.num_owned + np.searchsorted(self.halo_key, part[s] * pattern.num_nodes + s))
        return self.target_index[dst[ids]], col


def local_edges(edge_index, pattern: CommPattern, plan: RankPlan, target_part=None, chunk: int = EDGE_CHUNK):
    """The edges whose target ``plan.rank`` owns, relabelled to local ids.

    Returns ``(row, col, edge_id)``: ``row`` indexes owned rows, ``col`` indexes
    ``[owned | halo]`` columns, ``edge_id`` the position in the global edge list
    (to slice edge weights).  Sorted by (row, col): ready for CSR.  With ``target_part``
    (a bipartite relation, see :func:`comm_pattern`) ``row`` indexes the owned targets.
    The rank's edges are found ``chunk`` edges at a time (O(its edges + chunk) memory).
    """
    src, dst = numpy_ids(edge_index)  # int32 ids index as they are (InEdgeRelabel widens)
    owner = pattern.part if target_part is None else numpy_long(target_part)
    step = max(1, chunk)
    edge_id = np.concatenate([np.empty(0, dtype=np.int64)] + [
        a + np.flatnonzero(owner[dst[a:a + step]] == plan.rank) for a in range(0, dst.size, step)])
    relabel = InEdgeRelabel(pattern, plan, target_part)
    row, col = np.empty_like(edge_id), np.empty_like(edge_id)
    for a in range(0, edge_id.size, step):  # relabelled a chunk at a time
        row[a:a + step], col[a:a + step] = relabel(src, dst, edge_id[a:a + step])
    order = np.lexsort((col, row))
    row = row[order]  # one array at a time: the rank's edges are the writer's largest arrays
    col = col[order]
    edge_id = edge_id[order]
    return torch.from_numpy(row), torch.from_numpy(col), torch.from_numpy(edge_id)
