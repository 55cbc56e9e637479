"""ParHiP binary graph files written from CSR arrays, for KaMinPar's loader.

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
block of rows by block of rows from the graph's CSR and its transpose and
streamed to the file, so besides those two arrays only one block is in memory.
"""
from __future__ import annotations

import numpy as np
import torch

from ..sorted_keys import sorted_unique

HEADER_BYTES = 24
# bits of the version field (set = absent / 32-bit)
_NO_EDGE_WEIGHTS, _NO_VERTEX_WEIGHTS, _EID32, _VID32, _VWGT32 = 1, 2, 4, 8, 16
_U32_MAX = (1 << 32) - 1
_I32_MAX = (1 << 31) - 1
#: entries (both directions, before de-duplication) symmetrised per block: at most this many, and at
#: most 1/16 of the graph's (a block takes about 40 bytes per entry; the CSR, 8 to 16)
BLOCK_ENTRIES = 1 << 23
MIN_BLOCK_ENTRIES = 1 << 16


def sorted_by_row(row: np.ndarray, col: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(ptr, col)`` of the entries ``(row[e], col[e])``, columns kept in their dtype and in no
    promised order within a row (the symmetrised graph does not depend on it).

    Ids below :math:`2^{31}` are packed into one ``int64`` key per entry (``row << 32 | col``) and
    sorted in place by numpy (vectorised: on 32M entries twice as fast as a stable ``torch.sort`` of
    the rows and a gather of the columns, with no index array); larger ids take that stable sort.
    """
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=num_nodes), out=ptr[1:])
    if num_nodes > _I32_MAX:
        order = torch.sort(torch.from_numpy(np.ascontiguousarray(row)), stable=True).indices.numpy()
        return ptr, col[order]
    key = row.astype(np.int64)
    key <<= 32
    key |= col.astype(np.int64, copy=False)
    key.sort()
    key &= _U32_MAX  # the low 32 bits: the column
    return ptr, key.astype(col.dtype, copy=False)


def transpose_csr(ptr: np.ndarray, col: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR of the transposed matrix (columns as rows), with ``col``'s dtype."""
    row = np.repeat(np.arange(num_nodes, dtype=col.dtype), np.diff(ptr))
    return sorted_by_row(col, row, num_nodes)


def _row_blocks(ptr: np.ndarray, tptr: np.ndarray, block_entries: int) -> np.ndarray:
    """Row boundaries ``[0, ..., n]`` of blocks holding about ``block_entries`` entries of both CSRs."""
    n = len(ptr) - 1
    total = ptr + tptr
    cuts = np.searchsorted(total, np.arange(block_entries, int(total[-1]), block_entries), side="right")
    return np.unique(np.concatenate([[0], cuts, [n]]))


def _symmetric_block(ptr, col, tptr, tcol, r0: int, r1: int):
    """Degrees ``[r1 - r0]`` and sorted neighbours of rows ``r0 .. r1 - 1`` in the symmetrised graph."""
    (a, b), (c, d) = ptr[[r0, r1]], tptr[[r0, r1]]
    rows = np.arange(r1 - r0, dtype=np.int64)
    key = np.empty(b - a + d - c, dtype=np.int64)  # local row << 32 | neighbour (ids < 2**32)
    key[:b - a], key[b - a:] = np.repeat(rows, np.diff(ptr[r0:r1 + 1])), np.repeat(rows, np.diff(tptr[r0:r1 + 1]))
    key <<= 32
    key[:b - a] |= col[a:b]
    key[b - a:] |= tcol[c:d]
    key = sorted_unique(key)  # each row's neighbours come out ascending
    row, nbr = key >> 32, key & _U32_MAX
    loop = row + r0 == nbr
    if loop.any():  # self-loops dropped
        row, nbr = row[~loop], nbr[~loop]
    return np.bincount(row, minlength=max(r1 - r0, 1))[:r1 - r0], nbr


def write_parhip(path: str, ptr: np.ndarray, col: np.ndarray, num_nodes: int,
                 vertex_weights: np.ndarray | None = None, block_entries: int | None = None) -> int:
    r"""Writes the symmetrised graph of the CSR ``(ptr, col)`` as a ParHiP binary file.

    Args:
        path: the file to write.
        ptr, col: CSR of a directed graph (``[num_nodes + 1]`` and ``[nnz]``; which end is the
            row does not matter, the symmetrised graph is the same).  Self-loops and duplicate
            entries are dropped.
        num_nodes: :math:`n`.
        vertex_weights: ``[n]`` positive integer weights (``None``: unweighted).
        block_entries: entries symmetrised at once (memory: about 40 bytes each); default
            ``2 nnz / 16`` between :data:`MIN_BLOCK_ENTRIES` and :data:`BLOCK_ENTRIES`.

    Returns:
        :math:`m`, the entries of the symmetrised adjacency (twice its undirected edges).
    """
    n = int(num_nodes)
    if len(ptr) != n + 1 or int(ptr[-1]) != len(col):
        raise ValueError(f"ptr must have num_nodes + 1 = {n + 1} entries ending at len(col) = {len(col)}, "
                         f"got {len(ptr)} entries ending at {int(ptr[-1]) if len(ptr) else None}")
    if n >= _U32_MAX:
        raise ValueError(f"{n} nodes do not fit the 32-bit vertex ids written here")
    # ids are written as 32-bit; in memory int32 halves the transpose when they fit it
    col = col.astype(np.int32 if n <= np.iinfo(np.int32).max else np.int64, copy=False)
    tptr, tcol = transpose_csr(ptr, col, n)
    vid = 4
    eid_dtype = np.uint32 if HEADER_BYTES + (n + 1) * 4 + 2 * len(col) * vid <= _U32_MAX else np.uint64
    eid = np.dtype(eid_dtype).itemsize
    version = _NO_EDGE_WEIGHTS | _VID32 | (_EID32 if eid == 4 else 0)
    weights = None
    if vertex_weights is not None:
        weights = np.asarray(vertex_weights, dtype=np.int64)
        if weights.shape != (n,) or (n and int(weights.min()) < 1):
            raise ValueError(f"vertex_weights must be {n} positive integers, got shape {weights.shape}")
        fits32 = not n or int(weights.max()) <= np.iinfo(np.int32).max
        weights = weights.astype(np.int32 if fits32 else np.int64)
        version |= _VWGT32 if fits32 else 0
    else:
        version |= _NO_VERTEX_WEIGHTS
    degree = np.empty(n, dtype=np.int64)
    first = HEADER_BYTES + (n + 1) * eid
    with open(path, "wb") as f:
        f.seek(first)
        if block_entries is None:
            block_entries = min(max(2 * len(col) // 16, MIN_BLOCK_ENTRIES), BLOCK_ENTRIES)
        bounds = _row_blocks(ptr, tptr, block_entries).tolist()
        for r0, r1 in zip(bounds[:-1], bounds[1:], strict=True):
            degree[r0:r1], nbr = _symmetric_block(ptr, col, tptr, tcol, r0, r1)
            f.write(nbr.astype(np.uint32).tobytes())
        del tptr, tcol
        if weights is not None:
            f.write(weights.tobytes())
        m = int(degree.sum())
        offsets = np.empty(n + 1, dtype=np.int64)
        offsets[0] = 0
        np.cumsum(degree, out=offsets[1:])
        f.seek(0)
        f.write(np.array([version, n, m], dtype=np.uint64).tobytes())
        f.write((first + offsets * vid).astype(eid_dtype).tobytes())
    return m
