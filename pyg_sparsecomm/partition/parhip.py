"""ParHiP binary graph files written from edge lists, for KaMinPar's loader.

The ``kaminpar`` Python binding builds a graph only from a file (METIS text or
ParHiP binary).  :func:`write_parhip` writes the binary format straight from
numpy arrays, without a text round trip::

    | header: version, n, m (3 x uint64)           |
    | offsets: n + 1 byte addresses (EID bytes each) |
    | neighbours: m vertex ids (VID bytes each)      |
    | vertex weights: n (VWGT bytes each)            |

``version`` is a bit field, least significant bit first: no edge weights, no
vertex weights, 32-bit EID, 32-bit VID, 32-bit VWGT, 32-bit EWGT; ``m`` counts
both directions of every undirected edge, and ``offsets[v]`` is the file
position of ``v``'s first neighbour.  32-bit ids are used whenever they fit,
halving the file against 64-bit ones.

The graph written is the *symmetrised* adjacency of a directed graph
(:math:`\\{u, v\\}` for every edge :math:`u \\to v` or :math:`v \\to u`,
:math:`u \\ne v`, each once), which graph partitioners require.  It is built
straight from the edge list, one block of rows at a time (each row's entries:
the edges leaving it and those entering it), and streamed to the file: besides
the edges, only the block ids of their ends (1 or 2 bytes per end), the degrees
and two blocks (built in two threads) are in memory, never a CSR or its transpose.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ..plan.sorted_keys import sorted_unique
from ._threads import ordered_in_threads

HEADER_BYTES = 24
# bits of the version field (set = absent / 32-bit)
_NO_EDGE_WEIGHTS, _NO_VERTEX_WEIGHTS, _EID32, _VID32, _VWGT32 = 1, 2, 4, 8, 16
_U32_MAX = (1 << 32) - 1
#: entries (both directions, before de-duplication) symmetrised per block (two blocks are built at once): at
#: least this many (a block takes about 32 bytes per entry), and enough that the edges are scanned at most
#: :data:`MAX_PASSES` times
BLOCK_ENTRIES = 1 << 21
MAX_PASSES = 64
#: edges whose ends get their block ids at once
_ID_CHUNK = 1 << 22


def _row_blocks(degree: np.ndarray, block_entries: int) -> np.ndarray:
    """Row boundaries ``[0, ..., n]`` of blocks holding about ``block_entries`` of the entries whose
    count per row is ``degree``."""
    total = np.cumsum(degree)
    n = len(degree)
    if n == 0 or int(total[-1]) == 0:
        return np.array([0, n], dtype=np.int64)
    cuts = np.searchsorted(total, np.arange(block_entries, int(total[-1]), block_entries), side="right")
    return np.unique(np.concatenate([[0], cuts, [n]]))


def _mapped(ids: np.ndarray, node_map: np.ndarray | None) -> np.ndarray:
    """``ids`` through ``node_map`` (``None``: unchanged)."""
    return ids if node_map is None else node_map[ids]


def _end_blocks(src: np.ndarray, dst: np.ndarray, bounds: np.ndarray,
                node_map: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The block of both (mapped) ends of every edge (``bounds[b] <= id < bounds[b + 1]``), in the
    smallest unsigned dtype; an edge with an end mapped to ``-1`` gets the block past the last in
    both, so no block reads it."""
    dropped = len(bounds) - 1
    dtype = np.uint8 if dropped <= 255 else np.uint16 if dropped <= 65535 else np.uint32
    out = np.empty(len(src), dtype=dtype), np.empty(len(src), dtype=dtype)
    for start in range(0, len(src), _ID_CHUNK):
        s = _mapped(src[start:start + _ID_CHUNK], node_map)
        d = _mapped(dst[start:start + _ID_CHUNK], node_map)
        for ids, blocks in ((s, out[0]), (d, out[1])):
            blocks[start:start + len(ids)] = np.searchsorted(bounds, ids, side="right") - 1
        if node_map is not None:
            gone = (s < 0) | (d < 0)
            out[0][start:start + len(s)][gone] = dropped
            out[1][start:start + len(s)][gone] = dropped
    return out


def _degrees(src: np.ndarray, dst: np.ndarray, n: int, node_map: np.ndarray | None) -> np.ndarray:
    """Entries of every (mapped) row before de-duplication: both ends of every edge kept."""
    if node_map is None:
        return np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    degree = np.zeros(n, dtype=np.int64)
    for start in range(0, len(src), _ID_CHUNK):
        s = node_map[src[start:start + _ID_CHUNK]]
        d = node_map[dst[start:start + _ID_CHUNK]]
        kept = (s >= 0) & (d >= 0)
        degree += np.bincount(s[kept], minlength=n) + np.bincount(d[kept], minlength=n)
    return degree


def _symmetric_block(src, dst, src_block, dst_block, block: int, r0: int, r1: int, node_map=None):
    """Degrees ``[r1 - r0]`` and sorted neighbours of rows ``r0 .. r1 - 1`` in the symmetrised graph
    (of the ids mapped through ``node_map``)."""
    out_edges, in_edges = np.flatnonzero(src_block == block), np.flatnonzero(dst_block == block)
    key = np.empty(len(out_edges) + len(in_edges), dtype=np.int64)  # local row << 32 | neighbour
    key[:len(out_edges)] = _mapped(src[out_edges], node_map)
    key[len(out_edges):] = _mapped(dst[in_edges], node_map)
    key -= r0
    key <<= 32
    key[:len(out_edges)] |= _mapped(dst[out_edges], node_map)
    key[len(out_edges):] |= _mapped(src[in_edges], node_map)
    del out_edges, in_edges
    key = sorted_unique(key)  # each row's neighbours come out ascending
    row, nbr = key >> 32, key & _U32_MAX
    loop = row + r0 == nbr
    if loop.any():  # self-loops dropped
        row, nbr = row[~loop], nbr[~loop]
    return np.bincount(row, minlength=max(r1 - r0, 1))[:r1 - r0], nbr


def _write_blocks(f, build, bounds: np.ndarray, degree: np.ndarray) -> None:
    """Writes the neighbours of every block of rows ``bounds[b] .. bounds[b + 1] - 1`` to ``f`` in
    order, ``build(b, r0, r1)`` giving their degrees (stored into ``degree``) and neighbours; two
    blocks are built at a time, in threads."""
    rows = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    blocks = ordered_in_threads(lambda block: build(block, *rows[block]), range(len(rows)))
    for (r0, r1), (row_degree, nbr) in zip(rows, blocks, strict=True):
        degree[r0:r1] = row_degree
        f.write(nbr.astype(np.uint32).tobytes())


def write_parhip(path: str, src: np.ndarray, dst: np.ndarray, num_nodes: int,
                 vertex_weights: np.ndarray | None = None, block_entries: int | None = None,
                 node_map: np.ndarray | None = None) -> int:
    r"""Writes the symmetrised graph of the edges ``src -> dst`` as a ParHiP binary file.

    Args:
        path (str): the file to write.
        src (np.ndarray): the edges' sources, ``[E]`` integer ids in ``[0, num_nodes)`` (either
            orientation: the symmetrised graph is the same).  Self-loops and duplicate edges are dropped.
        dst (np.ndarray): the edges' targets, ``[E]``.
        num_nodes (int): :math:`n`.
        vertex_weights (np.ndarray, optional): ``[n]`` positive integer weights (``None``: unweighted).
            (default: :obj:`None`)
        block_entries (int, optional): entries symmetrised at once (memory: about 32 bytes each).
            (default: the larger of :data:`BLOCK_ENTRIES` and :math:`2E /` :data:`MAX_PASSES`)
        node_map (np.ndarray, optional): ``[N]`` ids of the graph written (``< num_nodes``) for the ``N`` ids of ``src``
            and ``dst``, ``-1`` to drop a node with its edges (e.g. :class:`.reductions.LeafFolding`'s): the file holds
            the mapped graph, edges that become self-loops dropped, without a mapped copy of the edges.  ``None``: the
            ids as they are. (default: :obj:`None`)

    Returns:
        :math:`m`, the entries of the symmetrised adjacency (twice its undirected edges).
    """
    n = int(num_nodes)
    src, dst = np.asarray(src), np.asarray(dst)
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"src and dst must be 1-D arrays of equal length, got shapes {src.shape} and {dst.shape}")
    if n >= _U32_MAX:
        raise ValueError(f"{n} nodes do not fit the 32-bit vertex ids written here")
    version, weights = _vertex_weights(vertex_weights, n)
    degree = _degrees(src, dst, n, node_map)
    if block_entries is None:
        block_entries = max(BLOCK_ENTRIES, -(-2 * len(src) // MAX_PASSES))
    bounds = _row_blocks(degree, block_entries)
    src_block, dst_block = _end_blocks(src, dst, bounds, node_map)
    eid_dtype = np.uint32 if HEADER_BYTES + (n + 1) * 4 + 2 * len(src) * 4 <= _U32_MAX else np.uint64
    version |= _NO_EDGE_WEIGHTS | _VID32 | (_EID32 if eid_dtype == np.uint32 else 0)
    first = HEADER_BYTES + (n + 1) * np.dtype(eid_dtype).itemsize
    with open(path, "wb") as f:
        f.seek(first)
        _write_blocks(f, partial(_symmetric_block, src, dst, src_block, dst_block, node_map=node_map), bounds,
                      degree)
        del src_block, dst_block
        if weights is not None:
            f.write(weights.tobytes())
        m = int(degree.sum())
        offsets = np.empty(n + 1, dtype=np.int64)
        offsets[0] = 0
        np.cumsum(degree, out=offsets[1:])
        f.seek(0)
        f.write(np.array([version, n, m], dtype=np.uint64).tobytes())
        f.write((first + offsets * 4).astype(eid_dtype).tobytes())
    return m


def _vertex_weights(vertex_weights: np.ndarray | None, n: int) -> tuple[int, np.ndarray | None]:
    """The version bits and the array written for ``vertex_weights`` (``int32`` when they fit)."""
    if vertex_weights is None:
        return _NO_VERTEX_WEIGHTS, None
    weights = np.asarray(vertex_weights, dtype=np.int64)
    if weights.shape != (n,) or (n and int(weights.min()) < 1):
        raise ValueError(f"vertex_weights must be {n} positive integers, got shape {weights.shape}")
    if not n or int(weights.max()) <= np.iinfo(np.int32).max:
        return _VWGT32, weights.astype(np.int32)
    return 0, weights
