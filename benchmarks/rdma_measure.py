"""Measurements of the ICS'24 paper: Table 2 breakdowns, Figure 1 load imbalance, a roofline.

Benchmark code, kept out of the library (was ``pyg_sparsecomm.rdma.measure``): used by
``benchmarks/rdma_spmm.py`` and tested by ``tests/rdma/test_rdma.py``.

* :func:`breakdown_row` — one Table 2 row from every rank's breakdown: the
  **mean over ranks** of the seconds of compute, communication, accumulation,
  load imbalance, reservation and total, plus the slowest rank's total
  (``max_total``) and the summed steal / product counts.
* :func:`stage_load_imbalance` — end-to-end vs per-stage max/avg flop
  imbalance of a 2D SpGEMM ``A A`` on a simulated ``q x q`` grid (Figure 1).
* :func:`measure_get_bandwidth` and :func:`roofline_points` — the roofline of
  Section 4: arithmetic intensity of each iteration ``AI = flops / bytes
  fetched`` against the backend's measured get bandwidth ``beta``; attainable
  rate ``min(peak, AI * beta)``.  The paper's roofline is *inter-node*; here the
  bandwidth is measured between MPI processes **on one node** (shared memory),
  so this is an intra-node roofline and says nothing about network bandwidth.
* :func:`roofline_svg` — the roofline plot as an SVG (no plotting dependency).
"""
import math
import time
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from pyg_sparsecomm.rdma.backend import RMABackend
from pyg_sparsecomm.rdma.kernels import csr_tile, tile_product

PARTS = ("compute", "comm", "accumulate", "imbalance", "reserve", "total")


def breakdown_row(summaries: Sequence[dict]) -> dict[str, float]:
    """Table 2 row from every rank's summary: mean seconds per part, plus max total and steals."""
    row = {p: float(np.mean([s[p] for s in summaries])) for p in PARTS}
    row["max_total"] = max(s["total"] for s in summaries)
    row["stolen"] = sum(s["stolen"] for s in summaries)
    row["products"] = sum(s["products"] for s in summaries)
    return row


def stage_load_imbalance(A: sp.spmatrix, B: sp.spmatrix, q: int) -> dict[str, object]:
    """Figure 1: flops of ``A B`` on a ``q x q`` 2D (SUMMA) grid, end-to-end vs per stage.

    With ``F[k, i, j] = flops(A_ik B_kj)`` (``2 sum_{a_rc != 0} nnz(B_c,:)`` over tile
    blocks), the end-to-end imbalance is ``max_ij sum_k F / mean_ij sum_k F`` and a
    code that synchronises after every stage ``k`` is slowed by
    ``sum_k max_ij F[k] / sum_k mean_ij F[k]``.
    """
    A, B = sp.csr_matrix(A), sp.csr_matrix(B)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes {A.shape} and {B.shape} cannot be multiplied")
    tr, tk, tc = (-(-A.shape[0] // q), -(-A.shape[1] // q), -(-B.shape[1] // q))
    bcoo = B.tocoo()
    # row_counts[c, j]: nonzeros of row c of B inside column block j
    row_counts = np.zeros((B.shape[0], q))
    np.add.at(row_counts, (bcoo.row, bcoo.col // tc), 1)
    acoo = A.tocoo()
    flops = np.zeros((q, q, q))  # [i, k, j]
    np.add.at(flops, (acoo.row // tr, acoo.col // tk), 2 * row_counts[acoo.col])
    flops = flops.transpose(1, 0, 2)  # [k, i, j]
    per_rank = flops.sum(axis=0)
    end_to_end = per_rank.max() / max(per_rank.mean(), 1e-300)
    per_stage = flops.reshape(q, -1).max(axis=1).sum() / max(flops.reshape(q, -1).mean(axis=1).sum(), 1e-300)
    stage_ratio = flops.reshape(q, -1).max(axis=1) / np.maximum(flops.reshape(q, -1).mean(axis=1), 1e-300)
    return {"end_to_end": float(end_to_end), "per_stage": float(per_stage), "stage_ratios": stage_ratio.tolist(),
            "per_rank_flops": per_rank}


def measure_get_bandwidth(backend: RMABackend, sizes: Sequence[int] = (1 << 10, 1 << 14, 1 << 18, 1 << 21),
                          repeats: int = 5) -> list[tuple[int, float]]:
    """Collective micro-benchmark: median seconds of a get of ``n`` float64 from rank ``rank + 1``.

    Returns ``[(bytes, bytes_per_second)]``; with one rank the "remote" rank is itself.
    """
    region = backend.alloc(max(sizes), torch.float64)
    peer = (backend.rank + 1) % backend.world_size
    out = []
    backend.barrier()
    for n in sizes:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            backend.get(peer, region, 0, n)
            times.append(time.perf_counter() - t0)
        out.append((n * 8, n * 8 / float(np.median(times))))
    backend.barrier()
    backend.free(region)
    return out


def local_peak_flops(n: int = 20000, cols: int = 64, density: float = 1e-3, repeats: int = 3,
                     device: str | torch.device = "cpu") -> float:
    """The roofline's flat part: measured flop rate of the tile kernel (torch CSR SpMM, the paper's local peak)."""
    A = sp.random(n, n, density=density, format="csr", random_state=0)
    crow, col = (torch.from_numpy(a.astype(np.int64)).to(device) for a in (A.indptr, A.indices))
    At = csr_tile(torch.from_numpy(A.data).to(device), crow, col, A.shape)
    X = torch.from_numpy(np.random.default_rng(0).standard_normal((n, cols))).to(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tile_product(At, X)
        if At.device.type == "cuda":
            torch.cuda.synchronize(At.device)
        times.append(time.perf_counter() - t0)
    return 2 * A.nnz * cols / float(np.median(times))


def roofline_points(iterations: Sequence[tuple[int, int]]) -> list[float]:
    """Arithmetic intensity (flops / byte fetched) of every iteration that fetched something."""
    return [f / b for f, b in iterations if b > 0]


def attainable(ai: float, bandwidth: float, peak: float) -> float:
    return min(peak, ai * bandwidth)


def roofline_svg(path, bandwidth: float, peak: float, points: dict[str, tuple[float, float]],
                 title: str = "intra-node roofline") -> None:
    """Log-log roofline: ``min(peak, AI * bandwidth)`` and one labelled point per (AI, achieved flop/s)."""
    ais = [p[0] for p in points.values()] + [peak / bandwidth]
    rates = [p[1] for p in points.values()] + [peak]
    x0, x1 = math.floor(math.log10(min(ais) / 10)), math.ceil(math.log10(max(ais) * 10))
    y0, y1 = math.floor(math.log10(max(min(rates), 1.0) / 10)), math.ceil(math.log10(peak * 2))
    W, H, m = 640, 420, 60

    def xy(ai, rate):
        return (m + (math.log10(ai) - x0) / (x1 - x0) * (W - 2 * m),
                H - m - (math.log10(max(rate, 10 ** y0)) - y0) / (y1 - y0) * (H - 2 * m))
    grid_ai = np.logspace(x0, x1, 200)
    line = " ".join("{:.1f},{:.1f}".format(*xy(a, attainable(a, bandwidth, peak))) for a in grid_ai)
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
             f'font-size="11">'), f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
             f'<polyline points="{line}" fill="none" stroke="steelblue" stroke-width="2"/>']
    for e in range(x0, x1 + 1):
        x, _ = xy(10 ** e, 10 ** y0)
        parts.append(f'<text x="{x:.1f}" y="{H - m + 15}" text-anchor="middle">1e{e}</text>')
    for e in range(y0, y1 + 1):
        _, y = xy(10 ** x0, 10 ** e)
        parts.append(f'<text x="{m - 5}" y="{y:.1f}" text-anchor="end">1e{e}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 15}" text-anchor="middle">arithmetic intensity (flop / byte fetched)'
                 f'</text><text x="15" y="{H / 2}" transform="rotate(-90 15 {H / 2})" text-anchor="middle">'
                 f'flop/s</text>')
    colors = ["crimson", "darkorange", "seagreen", "purple", "black", "teal"]
    for n, (label, (ai, rate)) in enumerate(points.items()):
        x, y = xy(ai, rate)
        color = colors[n % len(colors)]
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>'
                     f'<text x="{x + 6:.1f}" y="{y - 6:.1f}" fill="{color}">{label}</text>')
    parts.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(parts))
