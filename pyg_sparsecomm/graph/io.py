"""Readers for graph files used by the benchmarks and the CLI."""
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data


def read_metis_graph(path: str | Path) -> Data:
    """Reads a METIS ``.graph`` file (undirected, 1-based adjacency lists) into ``Data``.

    The header is ``n m [fmt [ncon]]``; vertex sizes/weights and edge weights
    (``fmt`` 100/10/1 flags) are parsed and the edge weights kept as
    ``edge_weight``.  Both directions of every edge are stored, as PyG does for
    undirected graphs.  Raises ``ValueError`` on a malformed file.
    """
    lines = [ln for ln in Path(path).read_text().splitlines() if not ln.lstrip().startswith("%")]
    if not lines:
        raise ValueError(f"{path}: empty METIS graph file")
    header = lines[0].split()
    if len(header) < 2:
        raise ValueError(f"{path}: bad header {lines[0]!r}, expected 'n m [fmt [ncon]]'")
    n, m = int(header[0]), int(header[1])
    fmt = header[2].zfill(3) if len(header) > 2 else "000"
    ncon = int(header[3]) if len(header) > 3 else (1 if fmt[1] == "1" else 0)
    has_size, has_vwgt, has_ewgt = fmt[0] == "1", fmt[1] == "1", fmt[2] == "1"
    body = lines[1:1 + n]
    if len(body) < n:
        raise ValueError(f"{path}: header announces {n} vertices but the file has {len(body)} lines")
    src_rows: list[np.ndarray] = []
    dst_rows: list[np.ndarray] = []
    wgt: list[np.ndarray] = []
    skip = int(has_size) + (ncon if has_vwgt else 0)
    for v, line in enumerate(body):
        vals = np.array(line.split(), dtype=np.int64)[skip:]
        if has_ewgt:
            nbrs, w = vals[0::2], vals[1::2]
            wgt.append(w)
        else:
            nbrs = vals
        src_rows.append(np.full(nbrs.size, v, dtype=np.int64))
        dst_rows.append(nbrs - 1)
    src, dst = np.concatenate(src_rows), np.concatenate(dst_rows)
    if dst.size and (dst.min() < 0 or dst.max() >= n):
        raise ValueError(f"{path}: neighbour ids outside [1, {n}]")
    if src.size != 2 * m:
        raise ValueError(f"{path}: header announces {m} edges but the lists hold {src.size // 2}")
    data = Data(edge_index=torch.from_numpy(np.stack([dst, src])), num_nodes=n)
    if has_ewgt:
        data.edge_weight = torch.from_numpy(np.concatenate(wgt)).float()
    return data
