"""``python -m pyg_sparsecomm partition-stats``: communication volumes of partitioning methods.

Prints, for every P and method, the per-SpMM total volume, max send/receive
volume, max messages and compute imbalance, each also normalised to the random
partition (as Table 2 of the VLDB'23 paper), and can save the P×P volume matrix
as a PNG heatmap.  Needs no processes: everything comes from the plan.
"""
import argparse
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import List, Optional

import numpy as np

from .partition import METHODS, SparsityAwarePartitioner


def load_graph(spec: str, root: Optional[str]):
    if spec.lower() == "sbm":
        from .datasets import sbm_graph
        return sbm_graph()
    if spec in ("Cora", "CiteSeer", "PubMed"):
        if root is None:
            raise SystemExit(f"--graph {spec} needs --root DIR holding {spec}/raw (Planetoid files)")
        from torch_geometric.datasets import Planetoid
        return Planetoid(root, spec)[0]
    path = Path(spec)
    if path.suffix == ".graph" and path.exists():
        from .io import read_metis_graph
        return read_metis_graph(path)
    raise SystemExit(f"unknown graph {spec!r}: use sbm, Cora, CiteSeer, PubMed or a METIS .graph file")


def write_heatmap_png(matrix: np.ndarray, path: str, cell: int = 0) -> None:
    """Writes ``matrix`` as an RGB PNG (white = 0, dark red = max), no plotting library needed."""
    m = np.asarray(matrix, dtype=np.float64)
    scale = m / m.max() if m.max() > 0 else m
    cell = cell or max(1, 512 // max(m.shape[0], 1))
    rgb = np.stack([1 - 0.45 * scale, 1 - scale, 1 - scale], axis=-1)  # white -> dark red
    img = (np.kron(rgb, np.ones((cell, cell, 1))) * 255).round().astype(np.uint8)
    h, w = img.shape[:2]
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    Path(path).write_bytes(png)


def partition_stats(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pyg_sparsecomm partition-stats", description=__doc__)
    p.add_argument("--graph", required=True, help="sbm | Cora | CiteSeer | PubMed | path/to/file.graph")
    p.add_argument("--root", help="Planetoid root directory")
    p.add_argument("--parts", default="4,16,64", help="comma-separated numbers of parts")
    p.add_argument("--methods", default="random,contiguous,metis", help=f"comma-separated, of {sorted(METHODS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heatmap", help="save the P×P volume matrix of the last method and P as PNG")
    args = p.parse_args(argv)
    data = load_graph(args.graph, args.root)
    parts = [int(x) for x in args.parts.split(",")]
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; choose from {sorted(METHODS)}")
    print(f"graph {args.graph}: {data.num_nodes} nodes, {data.edge_index.size(1)} edges")
    header = f"{'P':>5} {'method':>12} {'total':>10} {'max send':>9} {'max recv':>9} {'max msgs':>8} " \
             f"{'imbal.':>7} | {'total/rnd':>9} {'maxsend/rnd':>11} {'seconds':>8}"
    print(header)
    last = None
    for P in parts:
        baseline = SparsityAwarePartitioner(P, "random", seed=args.seed)(data).comm_stats.as_dict()
        for method in methods:
            t0 = time.perf_counter()
            stats = SparsityAwarePartitioner(P, method, seed=args.seed)(data).comm_stats
            seconds = time.perf_counter() - t0
            d = stats.as_dict()
            ratio = lambda k: d[k] / baseline[k] if baseline[k] else float("nan")  # noqa: E731
            print(f"{P:>5} {method:>12} {d['total_rows']:>10} {d['max_rows_sent']:>9.0f} "
                  f"{d['max_rows_received']:>9.0f} {d['max_messages']:>8.0f} {d['compute_imbalance']:>7.3f} | "
                  f"{ratio('total_rows'):>9.3f} {ratio('max_rows_sent'):>11.3f} {seconds:>8.2f}")
            last = stats
    if args.heatmap and last is not None:
        write_heatmap_png(last.volume, args.heatmap)
        print(f"wrote {args.heatmap} (P×P rows sent per SpMM, row = sender)")
    return 0


COMMANDS = {"partition-stats": partition_stats}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m pyg_sparsecomm {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])
