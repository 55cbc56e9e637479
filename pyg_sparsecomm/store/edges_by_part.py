"""The edges of a graph grouped by the part that owns their target, in scratch files.

The out-of-core writer sorts every part's in-edges
(:func:`~pyg_sparsecomm.store.part_in_edges.sort_in_edges`), which reads them twice.  Reading the
whole edge list for every part would cost :math:`2P` passes over :math:`E` edges (for a
billion-edge graph at :math:`P = 1024`, thousands of reads of its files);
:func:`group_edges_by_part` instead copies every edge once, in edge order, into the region of
its target's owner in three scratch files (sources, targets, edge ids), so that the parts'
passes read :math:`2E` edges in all.  The regions' sizes are the pattern's ``edge_nnz``.
"""
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..plan.edges import EdgeChunks
from ..plan.homogeneous import CommPattern, id_dtype
from ..plan.sorted_keys import key_groups

_FIELDS = ("e_id", "src", "dst")


@dataclass
class EdgesByPart:
    """Part ``r``'s in-edges (edges whose target it owns), in edge order, at rows
    ``offsets[r] .. offsets[r + 1] - 1`` of the files ``files[field]``, ``dtypes[field]`` each."""
    offsets: np.ndarray
    files: dict[str, Path]
    dtypes: dict[str, np.dtype]

    def chunks_of(self, rank: int) -> EdgeChunks:
        """Part ``rank``'s in-edges as :data:`~pyg_sparsecomm.plan.edges.EdgeChunks`."""
        lo, hi = int(self.offsets[rank]), int(self.offsets[rank + 1])

        def chunks(step: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
            fds = {name: os.open(path, os.O_RDONLY) for name, path in self.files.items()}
            try:
                for a in range(lo, hi, step):
                    count = min(step, hi - a)
                    e_id, src, dst = (_read(fds[name], self.dtypes[name], a, count) for name in _FIELDS)
                    yield e_id, src, dst
            finally:
                for fd in fds.values():
                    os.close(fd)
        return chunks


def _read(fd: int, dtype: np.dtype, start: int, count: int) -> np.ndarray:
    data = os.pread(fd, count * dtype.itemsize, start * dtype.itemsize)
    if len(data) != count * dtype.itemsize:
        raise RuntimeError(f"scratch file of the edges by part ended early: expected {count} ids from {start} on")
    return np.frombuffer(data, dtype=dtype)


def group_edges_by_part(edges: EdgeChunks, pattern: CommPattern, scratch: Path, step: int) -> EdgesByPart:
    """One pass over ``edges`` (``step`` at a time) writing each edge into the region of the part
    owning its target, in files under ``scratch`` (an existing directory): 8 bytes per edge for
    its id, 4 (fewer than :math:`2^{31}` nodes) or 8 for each end."""
    node: np.dtype = np.dtype(id_dtype(pattern.num_nodes))
    dtypes: dict[str, np.dtype] = {"e_id": np.dtype(np.int64), "src": node, "dst": node}
    offsets = np.concatenate([[0], np.cumsum(pattern.edge_nnz)]).astype(np.int64)
    files = {name: scratch / f"edges_by_part.{name}" for name in _FIELDS}
    cursor = offsets[:-1].copy()
    fds = {name: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for name, path in files.items()}
    try:
        for chunk in edges(max(1, step)):
            for r, take in key_groups(pattern.part[chunk[2]], pattern.num_parts):  # edge order within a part
                for name, values in zip(_FIELDS, chunk, strict=True):
                    os.pwrite(fds[name], values[take].astype(dtypes[name], copy=False).data,
                              int(cursor[r]) * dtypes[name].itemsize)
                cursor[r] += take.size
    finally:
        for fd in fds.values():
            os.close(fd)
    if not np.array_equal(cursor, offsets[1:]):
        raise RuntimeError("the edges grouped by part do not match the pattern's edge counts")
    return EdgesByPart(offsets, files, dtypes)
