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
and one block are in memory, never a CSR or its transpose.
"""
from __future__ import annotations

import numpy as np

from ..sorted_keys import sorted_unique

HEADER_BYTES = 24
# bits of the version field (set = absent / 32-bit)
_NO_EDGE_WEIGHTS, _NO_VERTEX_WEIGHTS, _EID32, _VID32, _VWGT32 = 1, 2, 4, 8, 16
_U32_MAX = (1 << 32) - 1
#: entries (both directions, before de-duplication) symmetrised per block: at least this many (a
#: block takes about 32 bytes per entry), and enough that the edges are scanned at most
#: :data:`MAX_PASSES` times
BLOCK_ENTRIES = 1 << 22
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


def _block_ids(ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The block of every id (``bounds[b] <= id < bounds[b + 1]``), in the smallest unsigned dtype."""
    out = np.empty(len(ids), dtype=np.uint8 if len(bounds) <= 256 else np.uint16 if len(bounds) <= 65536
                   else np.uint32)
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start:start + _ID_CHUNK]
        out[start:start + len(chunk)] = np.searchsorted(bounds, chunk, side="right") - 1
    return out


def _symmetric_block(src, dst, src_block, dst_block, block: int, r0: int, r1: int):
    """Degrees ``[r1 - r0]`` and sorted neighbours of rows ``r0 .. r1 - 1`` in the symmetrised graph."""
    out_edges, in_edges = np.flatnonzero(src_block == block), np.flatnonzero(dst_block == block)
    key = np.empty(len(out_edges) + len(in_edges), dtype=np.int64)  # local row << 32 | neighbour
    key[:len(out_edges)] = src[out_edges]
    key[len(out_edges):] = dst[in_edges]
    key -= r0
    key <<= 32
    key[:len(out_edges)] |= dst[out_edges]
    key[len(out_edges):] |= src[in_edges]
    del out_edges, in_edges
    key = sorted_unique(key)  # each row's neighbours come out ascending
    row, nbr = key >> 32, key & _U32_MAX
    loop = row + r0 == nbr
    if loop.any():  # self-loops dropped
        row, nbr = row[~loop], nbr[~loop]
    return np.bincount(row, minlength=max(r1 - r0, 1))[:r1 - r0], nbr


def write_parhip(path: str, src: np.ndarray, dst: np.ndarray, num_nodes: int,
                 vertex_weights: np.ndarray | None = None, block_entries: int | None = None) -> int:
    r"""Writes the symmetrised graph of the edges ``src -> dst`` as a ParHiP binary file.

    Args:
        path: the file to write.
        src, dst: the edges, ``[E]`` integer ids in ``[0, num_nodes)`` (either orientation: the
            symmetrised graph is the same).  Self-loops and duplicate edges are dropped.
        num_nodes: :math:`n`.
        vertex_weights: ``[n]`` positive integer weights (``None``: unweighted).
        block_entries: entries symmetrised at once (memory: about 32 bytes each); default the larger
            of :data:`BLOCK_ENTRIES` and :math:`2E /` :data:`MAX_PASSES`.

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
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)  # entries before de-duplication
    if block_entries is None:
        block_entries = max(BLOCK_ENTRIES, -(-2 * len(src) // MAX_PASSES))
    bounds = _row_blocks(degree, block_entries)
    src_block, dst_block = _block_ids(src, bounds), _block_ids(dst, bounds)
    eid_dtype = np.uint32 if HEADER_BYTES + (n + 1) * 4 + 2 * len(src) * 4 <= _U32_MAX else np.uint64
    version |= _NO_EDGE_WEIGHTS | _VID32 | (_EID32 if eid_dtype == np.uint32 else 0)
    first = HEADER_BYTES + (n + 1) * np.dtype(eid_dtype).itemsize
    with open(path, "wb") as f:
        f.seek(first)
        for block, (r0, r1) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
            degree[r0:r1], nbr = _symmetric_block(src, dst, src_block, dst_block, block, r0, r1)
            f.write(nbr.astype(np.uint32).tobytes())
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
