"""A part's in-edges in CSR order, sorted out of core (the out-of-core writer's edges).

:func:`~pyg_sparsecomm.plan.homogeneous.local_edges` holds a rank's in-edges, relabelled and sorted, as
whole arrays (``row``, ``col``, ``edge_id`` and the sort's order: 32 bytes per in-edge).
:func:`sort_in_edges` gives the same ``(rowptr, col, edge_id)`` through scratch files, with
memory bounded by one chunk whatever the part's size.  A counting sort by target row, by
blocks of rows:

1. one pass over the edges counts every owned row's in-edges: ``rowptr``;
2. the rows are cut into blocks of at most ``chunk_bytes / 64`` in-edges (a row with more is a
   block of its own); a second pass relabels the part's edges a step at a time and appends each
   to its block's region of the scratch files (edge order kept within a block);
3. every block is read back, sorted by ``(row, col)`` (stable: parallel edges keep their edge
   order, as in :func:`~pyg_sparsecomm.plan.homogeneous.local_edges`) and written back in place.

The ``col`` and ``edge_id`` files then hold the CSR's columns and the edges' global ids, read in
chunks by whoever writes the part file (:func:`~pyg_sparsecomm.store.streamed_save.file_chunks`).
"""
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..plan.edges import EDGE_CHUNK, EdgeChunks
from ..plan.homogeneous import CommPattern, InEdgeRelabel, RankPlan
from ..plan.sorted_keys import key_groups

_WORKING_BYTES_PER_EDGE = 64  # a block's arrays while it is sorted: row, col, edge_id, order, 2 gathers
_FIELDS = ("row", "col", "e_id")


@dataclass
class SortedInEdges:
    """Part ``plan.rank``'s in-edges in CSR order: ``rowptr`` in memory, ``col`` and ``e_id``
    (``int64``, ``num_edges`` each) in the files ``files["col"]`` and ``files["e_id"]``."""
    rowptr: Tensor
    num_edges: int
    files: dict[str, Path]


def _row_blocks(rowptr: np.ndarray, cap: int) -> np.ndarray:
    """Row indices ``starts`` (first ``0``, last ``len(rowptr) - 1``) cutting the rows into blocks
    of at most ``cap`` entries, a longer row being a block of its own."""
    num_rows, starts = rowptr.size - 1, [0]
    while starts[-1] < num_rows:
        end = int(np.searchsorted(rowptr, rowptr[starts[-1]] + cap, side="right")) - 1
        starts.append(min(num_rows, max(end, starts[-1] + 1)))
    return np.asarray(starts, dtype=np.int64)


def _owned_targets(edges: EdgeChunks, pattern: CommPattern, rank: int, step: int):
    """``(edge ids, sources, targets, positions)`` of every chunk, ``positions`` those of the
    chunk's edges into ``rank``."""
    for e_id, src, dst in edges(step):
        yield e_id, src, dst, np.flatnonzero(pattern.part[dst] == rank)


def _scatter(edges: EdgeChunks, pattern: CommPattern, plan: RankPlan, rowptr: np.ndarray,
             starts: np.ndarray, fds: dict[str, int], step: int) -> None:
    """Pass 2: every in-edge of the part appended to its block's region, in edge order."""
    relabel = InEdgeRelabel(pattern, plan)
    cursor = rowptr[starts[:-1]].copy()
    for e_id, src, dst, at in _owned_targets(edges, pattern, plan.rank, step):
        (row, col), ids = relabel(src, dst, at), e_id[at]
        block = np.searchsorted(starts, row, side="right") - 1
        for b, take in key_groups(block, starts.size - 1):
            for name, values in zip(_FIELDS, (row, col, ids), strict=True):
                os.pwrite(fds[name], values[take].data, int(cursor[b]) * 8)
            cursor[b] += take.size


def _sort_blocks(rowptr: np.ndarray, starts: np.ndarray, fds: dict[str, int]) -> None:
    """Pass 3: every block sorted by ``(row, col)``, stably, and written back in place."""
    for lo, hi in zip(rowptr[starts[:-1]], rowptr[starts[1:]], strict=True):
        if hi == lo:
            continue
        row, col, e_id = (np.frombuffer(os.pread(fds[name], int(hi - lo) * 8, int(lo) * 8), dtype=np.int64)
                          for name in _FIELDS)
        order = np.lexsort((col, row))
        del row
        os.pwrite(fds["col"], col[order].data, int(lo) * 8)
        os.pwrite(fds["e_id"], e_id[order].data, int(lo) * 8)


def sort_in_edges(edges: EdgeChunks, pattern: CommPattern, plan: RankPlan, scratch: Path,
                  chunk_bytes: int) -> SortedInEdges:
    """The in-edges of part ``plan.rank`` of the graph ``edges`` in CSR order, sorted through
    files under ``scratch`` (an existing directory) in about ``chunk_bytes`` of memory.

    Gives what :func:`~pyg_sparsecomm.plan.homogeneous.local_edges` gives (``rowptr`` of its sorted ``row``,
    its ``col`` and ``edge_id``), the arrays as files.

    Args:
        edges (EdgeChunks): the whole graph's edges, read twice (:func:`~pyg_sparsecomm.plan.edges.edge_chunks` of
            a graph in memory, or the writer's edge files).
        pattern (CommPattern): the partition's pattern.
        plan (RankPlan): this part's plan.
        scratch (pathlib.Path): directory for the files (``row``, ``col``, ``e_id``: 24 bytes per in-edge).
        chunk_bytes (int): the memory the sort may use beyond ``rowptr``.
    """
    step = max(1, min(EDGE_CHUNK, chunk_bytes // 80))  # the relabelling's arrays: ~80 B per edge of a step
    num_rows = plan.num_owned
    degree = np.zeros(num_rows, dtype=np.int64)
    for _, _, dst, at in _owned_targets(edges, pattern, plan.rank, step):
        degree += np.bincount(pattern.local_index[dst[at]], minlength=num_rows)
    rowptr = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(degree)])
    del degree
    starts = _row_blocks(rowptr, max(1, chunk_bytes // _WORKING_BYTES_PER_EDGE))
    files = {name: scratch / f"in_edges.{name}" for name in _FIELDS}
    fds = {name: os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) for name, path in files.items()}
    try:
        _scatter(edges, pattern, plan, rowptr, starts, fds, step)
        _sort_blocks(rowptr, starts, fds)
    finally:
        for fd in fds.values():
            os.close(fd)
    files.pop("row").unlink()
    return SortedInEdges(torch.from_numpy(rowptr), int(rowptr[-1]), files)
