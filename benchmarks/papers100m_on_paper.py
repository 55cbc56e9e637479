"""ogbn-papers100M on paper (issue 27, item 5): volumes and per-rank memory from the partition alone.

An R-MAT graph (``--scale``, edge factor 16; generated in chunks into int32 ids, so scale 24 fits
in a few GB) is partitioned with KaMinPar into every ``P`` of ``--parts`` (a child process per P:
wall and CPU time, peak resident set above the loaded input, as ``partition_scale.py``).  From each
partition alone (no process is launched) it measures

* the volume matrix ``V[s, d]`` (rows rank s sends rank d per SpMM), rows and in-edges per rank,
  computed block of sources by block of sources (``comm_pattern`` would hold several int64
  copies of the edge list);
* the α-β prediction of one epoch of a 3-layer GCN (SpMM widths 256, 256, 172: papers100M's
  classes) for the 1D algorithms and, from the partitions into ``P / c`` parts, the 1.5D ones,
  under ``--alpha``/``--beta`` (default: 10 µs, 25 GB/s, an InfiniBand HDR node link);

then writes a RESULTS.md section that extrapolates partition time and memory to
ogbn-papers100M (111M nodes, 1.6B edges) from the measured scaling (this script's graph plus
``partition_scale``'s rows) and its per-rank memory and epoch communication at P = 64 and 256
from the measured per-node ratios.  What is measured and what is extrapolated is said per line.

    python benchmarks/papers100m_on_paper.py [--scale 24] [--parts 64 256 1024] [--write]
        [--method-for 1024=kaminpar:threads=2,compress=True]    # another method at one P
"""
import argparse
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
from _common import RESULTS, markdown_table, print_table, write_section
from partition_scale import run_child

from pyg_sparsecomm.algorithms import algorithm_class, auto_candidates
from pyg_sparsecomm.algorithms.cost import CostModel, volumes_of_all_ranks
from pyg_sparsecomm.algorithms.layout import admissible_replications
from pyg_sparsecomm.plan.sorted_keys import sorted_unique

PAPERS = {"nodes": 111_059_956, "edges": 1_615_685_872, "features": 128, "classes": 172}
WIDTHS = (256, 256, 172)  # GCNConv's SpMM width is each layer's out_channels
HIDDEN = 256


def rmat_edges(scale: int, edge_factor: int, seed: int = 0, chunk: int = 1 << 24,
               abc=(0.57, 0.19, 0.19)) -> np.ndarray:
    """``int32 [2, E]`` R-MAT edges sorted by (source, target), without duplicates or self-loops
    (the distribution of :func:`pyg_sparsecomm.graph.datasets.rmat_graph`, another random stream)."""
    rng = np.random.default_rng(seed)
    a, b, c = abc
    keys = []
    for start in range(0, edge_factor << scale, chunk):
        m = min(chunk, (edge_factor << scale) - start)
        src, dst = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64)
        for level in range(scale):
            u = rng.random(m, dtype=np.float32)
            src |= (u >= a + b).astype(np.int64) << level              # quadrants c, d: lower half
            dst |= ((u >= a) & (u < a + b) | (u >= a + b + c)).astype(np.int64) << level  # b, d: right
        keep = src != dst
        keys.append((src[keep] << scale) | dst[keep])
    key = sorted_unique(np.concatenate(keys))
    del keys
    edges = np.empty((2, len(key)), dtype=np.int32)
    edges[0], edges[1] = key >> scale, key & ((1 << scale) - 1)
    return edges


def volumes(src: np.ndarray, dst: np.ndarray, part: np.ndarray, num_parts: int, chunk: int = 1 << 24):
    """``(V, part_sizes, block_nnz)`` of ``plan.comm_pattern`` for source-sorted edges, chunk by chunk
    (chunks end at a source boundary, so a (node, destination) pair is never counted twice)."""
    P = num_parts
    V = np.zeros(P * P, dtype=np.int64)
    block_nnz = np.zeros(P * P, dtype=np.int64)
    start = 0
    while start < len(src):
        end = min(start + chunk, len(src))
        if end < len(src):  # move the end to the first edge of the next source
            end = int(np.searchsorted(src, src[end - 1], side="right"))
        s, d = np.asarray(src[start:end], dtype=np.int64), np.asarray(dst[start:end], dtype=np.int64)
        sp, dp = part[s], part[d]
        block_nnz += np.bincount(dp * P + sp, minlength=P * P)
        cut = sp != dp
        pair = sorted_unique(s[cut] * P + dp[cut])
        V += np.bincount(part[pair // P] * P + pair % P, minlength=P * P)
        start = end
    return V.reshape(P, P), np.bincount(part, minlength=P), block_nnz.reshape(P, P)


def predict(parts_of: dict, world_size: int, model: CostModel):
    """Per (algorithm, c): predicted seconds and max/total bytes of one epoch at ``world_size``."""
    rows = []
    for c in admissible_replications(world_size):
        Q = world_size // c
        if Q not in parts_of:
            continue
        Vq, sizes_q, nnz_q = parts_of[Q]
        ranks = volumes_of_all_ranks(Vq, sizes_q, c, None, nnz_q)
        for name in auto_candidates(c > 1):
            seconds, sent = algorithm_class(name).predict_epoch(ranks, WIDTHS, model, 4)
            rows.append((name, c, float(seconds.max()), int(sent.max()), int(sent.sum())))
    return rows


def scaling_points(method: str) -> list[tuple[int, float, float]]:
    """(edges, CPU seconds, peak MB) of ``method``'s rows (or its name's without options: CPU seconds
    do not depend on the threads) in RESULTS.md's ``partition_scale`` section."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    section = re.search(r"<!-- BEGIN partition_scale -->(.*?)<!-- END partition_scale -->", text, re.S)
    points = []
    for line in (section.group(1).splitlines() if section else []):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 6 and cells[3] in (method, method.split(":")[0]) and cells[0].isdigit():
            points.append((int(cells[2]), float(cells[5]), float(cells[6])))
    return points


def power_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(a, b)`` of ``y = a x^b`` fitted in log-log space."""
    x, y = np.log([p[0] for p in points]), np.log([max(p[1], 1e-9) for p in points])
    b, log_a = np.polyfit(x, y, 1)
    return float(np.exp(log_a)), float(b)


def rank_memory_gb(rows: float, in_edges: float, halo: float) -> dict:
    """Bytes of one rank of a 3-layer width-256 GCN, fp32 (``widths`` in, hidden, hidden -> classes):
    features ``rows x 128``; adjacency ``12`` bytes per in-edge (int64 column, fp32 value) plus an int64
    row pointer; halo buffers ``halo x out`` per layer, forward and backward; activations per layer
    ``rows x (in + 2 out)`` kept for the backward (input, ``X W``, output) and as much again for
    their gradients."""
    dims = [PAPERS["features"], HIDDEN, HIDDEN, PAPERS["classes"]]
    layers = list(zip(dims[:-1], dims[1:], strict=True))
    gb = {"features": rows * dims[0] * 4, "adjacency": in_edges * 12 + rows * 8,
          "halo": sum(2 * halo * out * 4 for _, out in layers),
          "activations": sum(2 * rows * (i + 2 * o) * 4 for i, o in layers)}
    gb = {k: v / 1e9 for k, v in gb.items()}
    gb["total"] = sum(gb.values())
    return gb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=int, default=24)
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--parts", nargs="+", type=int, default=[64, 256, 1024])
    p.add_argument("--method", default="kaminpar:threads=2", help="NAME[:OPTION=VALUE,...]")
    p.add_argument("--method-for", action="append", default=[], metavar="P=SPEC",
                   help="the method at one part count (e.g. KaMinPar's compressed graph where memory binds)")
    p.add_argument("--alpha", type=float, default=10e-6, help="seconds per message")
    p.add_argument("--beta", type=float, default=1 / 25e9, help="seconds per byte")
    p.add_argument("--cache", type=Path, default=Path("/tmp/pyg_sparsecomm_rmat"))
    p.add_argument("--timeout", type=float, default=7200)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    path = args.cache / f"rmat{args.scale}_{args.edge_factor}_lean.npy"
    if not path.exists():
        args.cache.mkdir(parents=True, exist_ok=True)
        np.save(path, rmat_edges(args.scale, args.edge_factor))
    edges = np.load(path, mmap_mode="r")
    N, E = 1 << args.scale, edges.shape[1]
    model = CostModel(args.alpha, args.beta, source=f"assumed: α = {args.alpha * 1e6:g} µs, "
                                                    f"{1 / args.beta / 1e9:g} GB/s")
    load = os.getloadavg()
    measured, parts_of = [], {}
    for P in args.parts:
        run, part = partition(args, path, N, P)
        V, sizes, nnz = volumes(edges[0], edges[1], part, P)
        parts_of[P] = (V, sizes, nnz)
        row_nnz = nnz.sum(axis=1) + sizes
        measured.append({"P": P, "method": run["method"], "seconds": run["seconds"], "cpu": run["cpu"],
                         "peak_mb": (run["peak_kb"] - run["rss_before_kb"]) / 1e3, "total": int(V.sum()),
                         "max_send": int(V.sum(axis=1).max()), "max_recv": int(V.sum(axis=0).max()),
                         "node_imb": float(sizes.max() / sizes.mean()),
                         "nnz_imb": float(row_nnz.max() / row_nnz.mean()),
                         "max_rows": int(sizes.max()), "max_in_edges": int(nnz.sum(axis=1).max())})
        print(measured[-1], file=sys.stderr, flush=True)
        report(args, N, E, measured, parts_of, model, load)  # after every P: a long run leaves what it measured


def method_at(args, num_parts: int) -> str:
    """The method spec at ``num_parts``: its ``--method-for``, else ``--method``."""
    chosen = dict(item.split("=", 1) for item in args.method_for)
    return chosen.get(str(num_parts), args.method)


def partition(args, path: Path, num_nodes: int, num_parts: int) -> tuple[dict, np.ndarray]:
    """The child's measurements and the partition into ``num_parts`` parts, kept in the cache
    (``part_<scale>_<P>.npy`` and ``.json``) and re-used by later runs with the same method."""
    method = method_at(args, num_parts)
    slug = "" if method == args.method else "_" + re.sub(r"[^A-Za-z0-9]+", "-", method)
    stem = args.cache / f"papers_part_{args.scale}_{num_parts}{slug}"
    if not (stem.with_suffix(".npy").exists() and stem.with_suffix(".json").exists()):
        run = run_child(method, path, num_nodes, num_parts, 1, stem.with_suffix(".npy"), args.timeout)
        stem.with_suffix(".json").write_text(json.dumps(dict(run, method=method)))
    run = json.loads(stem.with_suffix(".json").read_text())
    return run, np.load(stem.with_suffix(".npy"))


def report(args, N, E, measured, parts_of, model, load) -> None:
    headers = ["P", "method", "seconds", "CPU s", "peak MB", "total rows", "total/N", "max send", "max recv (halo)",
               "node imb", "nnz imb", "best 1D/1.5D (c)", "predicted ms", "max MB sent"]
    rows = []
    for m in measured:
        pred = predict(parts_of, m["P"], model)
        best = min(pred, key=lambda r: r[2])
        rows.append([m["P"], m["method"], f"{m['seconds']:.0f}", f"{m['cpu']:.0f}", f"{m['peak_mb']:.0f}", m["total"],
                     f"{m['total'] / N:.2f}", m["max_send"], m["max_recv"], f"{m['node_imb']:.2f}",
                     f"{m['nnz_imb']:.3f}", f"{best[0]} ({best[1]})", f"{best[2] * 1e3:.1f}",
                     f"{best[3] / 1e6:.0f}"])
    print_table(headers, rows)
    # extrapolation to papers100M: partition cost from the measured scaling
    name = args.method
    points = scaling_points(name) + [(E, m["cpu"], m["peak_mb"]) for m in measured
                                     if m["P"] == 64 and m["method"] == name]
    Ep, Np = PAPERS["edges"], PAPERS["nodes"]
    extrap = "Fewer than two measured points: no extrapolation."
    if len({e for e, _, _ in points}) >= 2:
        cpu_a, cpu_b = power_fit([(e, c) for e, c, _ in points])
        mem_a, mem_b = power_fit([(e, mb) for e, _, mb in points])
        extrap = (f"Fitted on {len(points)} measured points "
                  f"({', '.join(f'{e / 1e6:.0f}M' for e, _, _ in points)} edges, P = 64): CPU seconds ≈ "
                  f"{cpu_a:.3g} E^{cpu_b:.2f}, peak MB ≈ {mem_a:.3g} E^{mem_b:.2f}. **Extrapolated** to "
                  f"papers100M (E = {Ep / 1e9:.2f}B): {cpu_a * Ep ** cpu_b / 60:.0f} CPU-minutes (÷ threads for "
                  f"wall time on an idle machine), peak ≈ {mem_a * Ep ** mem_b / 1e3:.0f} GB above the input "
                  f"edge list ({Ep * 8 / 1e9:.0f} GB as int32 pairs, {8 * (Np + Ep) / 1e9:.0f} GB as int64 CSR).")
    mem_rows = []
    for m, node_imb in ((row, imb) for row in measured for imb in (row["node_imb"], 1.0)):
        if m["P"] not in (64, 256):
            continue
        P = m["P"]
        rows_p = Np / P * node_imb
        in_p = Ep / P * m["max_in_edges"] / (E / P)
        halo_p = m["max_recv"] / N * Np
        gb = rank_memory_gb(rows_p, in_p, halo_p)
        V, sizes, nnz = parts_of[P]
        factor = Np / N
        scaled = {P: (np.rint(V * factor).astype(np.int64), np.rint(sizes * factor).astype(np.int64),
                      np.rint(nnz * Ep / E).astype(np.int64))}
        pred = predict(scaled, P, model)
        one_d = next(r for r in pred if r[0] == "1d")
        mem_rows.append([P, f"{node_imb:.2f}", f"{rows_p / 1e6:.2f}M", f"{in_p / 1e6:.0f}M", f"{halo_p / 1e6:.1f}M",
                         *(f"{gb[k]:.1f}" for k in ("features", "adjacency", "halo", "activations", "total")),
                         "yes" if gb["total"] < 80 else "no", f"{one_d[3] / 1e9:.2f}", f"{one_d[2] * 1e3:.0f}"])
    mem_headers = ["P", "node imb", "rows/rank", "in-edges/rank", "halo rows/rank", "features GB", "adjacency GB",
                   "halo GB", "activations GB", "total GB", "fits 80 GB", "1D GB sent/epoch (max rank)",
                   "1D ms/epoch (model)"]
    print(extrap)
    print_table(mem_headers, mem_rows)
    if not args.write:
        return
    body = (f"## ogbn-papers100M on paper (R-MAT scale {args.scale}, {args.method})\n\n"
            f"`python benchmarks/papers100m_on_paper.py --scale {args.scale}"
            f"{''.join(f' --method-for {item}' for item in args.method_for)}` — load average "
            f"{load[0]:.1f} / {load[1]:.1f} at the start (2 shared cores).\n\n"
            f"**Measured** on R-MAT scale {args.scale} (N = {N}, E = {E}, edge factor {args.edge_factor}): "
            f"KaMinPar's partition into P parts (child process: wall and CPU time, peak resident set above "
            f"the loaded input), and from the partition alone the rows each rank sends/receives per SpMM, "
            f"imbalances (max/avg), and the α-β prediction of one epoch of a 3-layer GCN (SpMM widths "
            f"{', '.join(map(str, WIDTHS))}; {model}) for the best of 1D and 1.5D (c: replication; the 1.5D "
            f"layouts use the partitions into P/c parts of this table).\n\n"
            + markdown_table(headers, rows) + "\n\n" + extrap + "\n\n"
            f"**Extrapolated** per-rank memory of papers100M ({Np / 1e6:.0f}M nodes, {Ep / 1e9:.2f}B edges, "
            f"128 fp32 features, 3-layer width-256 GCN) from the R-MAT ratios at the same P: rows = N/P × "
            f"node imbalance (the measured one, and 1.00: what a partition balancing rows as well would "
            f"give), in-edges = E/P × R-MAT's max/avg in-edges, halo = R-MAT's max received rows "
            f"per node × N; bytes as `rank_memory_gb` says (activations: input, XW and output of each "
            f"layer kept for the backward, and their gradients). Epoch communication: the R-MAT volume "
            f"matrix scaled by N_papers/N_rmat, priced by the same model. R-MAT (hubs, little locality) "
            f"is a pessimistic proxy for a citation graph: the halo fractions are upper-end guesses, "
            f"not measurements of papers100M.\n\n" + markdown_table(mem_headers, mem_rows))
    write_section("papers100m_on_paper", body)


if __name__ == "__main__":
    main()
