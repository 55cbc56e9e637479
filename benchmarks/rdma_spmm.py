"""One-sided RDMA SpMM / SpGEMM (issue #5 part 2): stationary-C vs stationary-A vs work stealing vs SUMMA.

Run as ``python benchmarks/rdma_spmm.py``: the script launches itself as
``mpiexec -n P python benchmarks/rdma_spmm.py --worker ...`` for every P (the
MPI backend needs mpiexec), collects the per-rank breakdowns (paper Table 2:
compute / communication / accumulation / load imbalance), prints them, runs the
Figure 1 load-imbalance experiment and the roofline (get bandwidth micro-
benchmark), writes ``benchmarks/rdma_roofline.svg`` (SVG: matplotlib is not a
dependency) and the ``rdma`` section of RESULTS.md.  Times are medians over
``--reps`` runs of the slowest rank's end-to-end time.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import GRAPHS, machine, markdown_table, print_table, write_section  # noqa: E402 -- after sys.path
from rdma_measure import PARTS  # noqa: E402 -- after sys.path

from pyg_sparsecomm.rdma.mpi_backend import find_mpiexec  # noqa: E402

SPMM_ALGS = ("stationary_c", "stationary_a", "ws_random", "ws_locality", "summa")
SPGEMM_ALGS = ("stationary_c", "stationary_a", "summa")
TILES = 8  # tile grid of A: TILES x TILES (ragged last tiles)
FIG1_HEADERS = ["R-MAT scale", "vertex order", "grid", "end-to-end max/avg", "per-stage max/avg", "worst stage"]


def load_matrix(name: str, rmat_scale: int, permute: bool = False) -> sp.csr_matrix:
    """R-MAT (a=0.6, b=c=d=0.4/3, edge factor 8, the paper's Figure 1 parameters) or a libmetis mesh.

    ``permute`` relabels the vertices randomly (as Graph500's R-MAT generator does).
    """
    if name == "rmat":
        from pyg_sparsecomm.graph.datasets import rmat_graph
        data = rmat_graph(scale=rmat_scale, edge_factor=8, a=0.6, b=0.4 / 3, c=0.4 / 3, seed=0)
    else:
        from pyg_sparsecomm.graph.io import read_metis_graph
        data = read_metis_graph(GRAPHS / f"{name}.graph")
    ei, n = data.edge_index.numpy(), data.num_nodes
    if permute:
        ei = np.random.default_rng(1).permutation(n)[ei]
    return sp.csr_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(n, n))


def worker(args: argparse.Namespace) -> None:
    """Runs under mpiexec: every algorithm on every (graph, op); rank 0 prints one JSON row each."""
    from rdma_measure import breakdown_row, measure_get_bandwidth

    from pyg_sparsecomm.rdma import DenseTiledMatrix, SparseTiledMatrix, spgemm, spmm
    from pyg_sparsecomm.rdma.mpi_backend import MPIBackend
    be = MPIBackend()

    def emit(row: dict) -> None:
        if be.rank == 0:
            print("ROW " + json.dumps(row), flush=True)
    if be.world_size > 1:
        emit({"bandwidth": measure_get_bandwidth(be, sizes=(1 << 10, 1 << 14, 1 << 18, 1 << 21))})
    for graph in args.graphs:
        S = load_matrix(graph, args.rmat_scale)
        tile = -(-S.shape[0] // TILES)
        A = SparseTiledMatrix.from_global(be, S, (tile, tile))
        ops = [(f"SpMM N={n}", n) for n in args.cols] + ([("SpGEMM A·A", 0)] if args.spgemm else [])
        for op, n in ops:
            if n:
                X = np.random.default_rng(0).standard_normal((S.shape[0], n))
                B = DenseTiledMatrix.from_global(be, X, (tile, -(-n // 2)))
            else:
                B = SparseTiledMatrix.from_global(be, S, (tile, tile))
            for alg in (SPMM_ALGS if n else SPGEMM_ALGS):
                runs = []
                for _ in range(args.reps):
                    be.barrier()
                    res = (spmm if n else spgemm)(A, B, alg)
                    runs.append((max(s["total"] for s in res.breakdowns), res.breakdowns))
                    res.C.free()
                runs.sort(key=lambda r: r[0])
                t, summaries = runs[len(runs) // 2]
                flops = sum(s["flops"] for s in summaries)
                fetched = sum(s["bytes_fetched"] for s in summaries)
                emit({"P": be.world_size, "graph": graph, "n": S.shape[0], "nnz": S.nnz, "op": op, "alg": alg,
                      "time": t, "times": [r[0] for r in runs], "parts": breakdown_row(summaries),
                      "flops": flops, "bytes": fetched})
            B.free()
        A.free()


def launch(P: int, args: argparse.Namespace) -> list:
    cmd = [find_mpiexec(), "-n", str(P), sys.executable, str(Path(__file__).resolve()), "--worker",
           "--reps", str(args.reps), "--rmat-scale", str(args.rmat_scale), "--graphs", *args.graphs,
           "--cols", *map(str, args.cols)] + ([] if args.spgemm else ["--no-spgemm"])
    env = dict(os.environ, OMP_NUM_THREADS="1", UCX_LOG_LEVEL="error", PYTHONWARNINGS="ignore",
               PYTHONPATH=f"{HERE.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    t0 = time.time()
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode:
        raise SystemExit(f"mpiexec -n {P} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(f"# P={P} done in {time.time() - t0:.0f} s", flush=True)
    return [json.loads(ln[4:]) for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]


def ms(x: float) -> str:
    return f"{1e3 * x:.1f}"


def figure1(scale: int) -> list:
    """End-to-end vs per-stage flop imbalance of R-MAT A·A on q x q grids (paper Figure 1)."""
    from rdma_measure import stage_load_imbalance
    rows = []
    for permute in (False, True):
        S = load_matrix("rmat", scale, permute)
        for q in (4, 8, 16):
            out = stage_load_imbalance(S, S, q)
            rows.append([scale, "random" if permute else "generator", f"{q}x{q}", f"{out['end_to_end']:.2f}",
                         f"{out['per_stage']:.2f}", f"{max(out['stage_ratios']):.2f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--graphs", nargs="+", default=["rmat", "4elt", "copter2"],
                        help="rmat and/or libmetis meshes (mdual, copter2, 4elt)")
    parser.add_argument("--cols", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--no-spgemm", dest="spgemm", action="store_false")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rmat-scale", type=int, default=12)
    parser.add_argument("--fig1-scale", type=int, default=17)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--no-write", action="store_true", help="do not touch RESULTS.md / the SVG")
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    rows = [r for P in args.procs for r in launch(P, args)]
    bandwidth = max((bw for r in rows if "bandwidth" in r for _, bw in r["bandwidth"]), default=None)
    rows = [r for r in rows if "alg" in r]
    headers = ["graph", "op", "P", "algorithm", "time ms", "comp", "comm", "acc", "imbal", "resv", "other", "stolen"]
    table = [[r["graph"], r["op"], r["P"], r["alg"], ms(r["time"]), ms(r["parts"]["compute"]),
              ms(r["parts"]["comm"]), ms(r["parts"]["accumulate"]), ms(r["parts"]["imbalance"]),
              ms(r["parts"]["reserve"]), ms(r["parts"]["total"] - sum(r["parts"][p] for p in PARTS if p != "total")),
              r["parts"]["stolen"]] for r in rows]
    print_table(headers, table)

    from rdma_measure import attainable, local_peak_flops, roofline_svg
    peak = local_peak_flops()
    roof_rows, points = [], {}
    for r in rows:
        if r["alg"] == "stationary_c" and r["P"] == max(args.procs) and r["bytes"]:
            ai = r["flops"] / r["bytes"]
            achieved = r["flops"] / r["time"] / r["P"]  # per-rank flop/s
            roof_rows.append([r["graph"], r["op"], f"{ai:.3f}", f"{attainable(ai, bandwidth, peak) / 1e9:.2f}",
                              f"{achieved / 1e9:.3f}"])
            points[f"{r['graph']} {r['op']}"] = (ai, achieved)
    print(f"\nget bandwidth {bandwidth / 1e9:.2f} GB/s, local SpMM peak {peak / 1e9:.2f} GFlop/s")
    print_table(["graph", "op", "AI flop/B", "roofline GF/s", "achieved GF/s"], roof_rows)
    fig1 = figure1(args.fig1_scale)
    print_table(FIG1_HEADERS, fig1)
    if args.no_write:
        return
    roofline_svg(HERE / "rdma_roofline.svg", bandwidth, peak, points,
                 title=f"intra-node roofline, stationary-C, P={max(args.procs)}")
    intro = (f"`python benchmarks/rdma_spmm.py` (launches `mpiexec -n P` itself; MPI one-sided RMA over mpich, "
             f"1 thread per process; torch tile kernels) — machine: {machine()}. P = 4 runs two processes per core. "
             f"A tiled {TILES}x{TILES} (ragged), 2D block-cyclic process grid; dense B in 2 column tiles. "
             f"Times: median over {args.reps} runs of the slowest rank's end-to-end ms; the breakdown is the mean "
             f"over ranks of that run (paper Table 2): comp = local tile products, comm = waiting for gets / "
             f"broadcasts / pushes, acc = accumulation into C, imbal = idle in the final barrier, waiting for "
             f"queued updates and (SpGEMM stationary-A) in the collective outbox allocation after the local "
             f"products, resv = work-stealing fetch-and-add reservations, other = the rest (Python loop "
             f"overhead, collective allocation of queues, outboxes and reservation grids). "
             f"R-MAT: scale {args.rmat_scale}, a=0.6, b=c=d=0.4/3, edge factor 8.")
    roof = (f"**Roofline** (stationary-C, P = {max(args.procs)}; *intra-node*: all ranks share one machine, so "
            f"the bandwidth is shared-memory MPI RMA, not a network): measured get bandwidth "
            f"{bandwidth / 1e9:.2f} GB/s (largest of 8 KiB–16 MiB gets, rank r from r+1), local peak = measured "
            f"torch CSR SpMM (the tile kernel) {peak / 1e9:.2f} GFlop/s; AI = flops / bytes fetched by gets; plot: "
            f"`benchmarks/rdma_roofline.svg`.")
    fig = ("**Figure 1** (flop load imbalance of R-MAT A·A on a simulated q x q SUMMA grid): end-to-end = "
           "max/avg of each rank's total flops; per-stage = what a code that synchronises after every k-stage "
           "pays, sum_k max / sum_k avg; generator order = R-MAT labels as generated, random = vertices "
           "randomly relabelled.")
    body = "\n\n".join(["## One-sided RDMA SpMM / SpGEMM (issue #5 part 2)", intro, markdown_table(headers, table),
                         roof, markdown_table(["graph", "op", "AI flop/B", "roofline GF/s", "achieved GF/s per rank"],
                                              roof_rows), fig, markdown_table(FIG1_HEADERS, fig1)])
    write_section("rdma", body)
    print("wrote the rdma section of", HERE / "RESULTS.md")


if __name__ == "__main__":
    main()
