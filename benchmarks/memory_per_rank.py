"""Peak memory per rank against the ideal, from part files written out of core.

    python benchmarks/memory_per_rank.py                       # R-MAT scale 17, P = 2, 4, 8
    python benchmarks/memory_per_rank.py --large --write       # + scale 21 (>= 30M edges) at P = 4
                                                               #   (the writer alone at P = 64, 256 too)

For every graph: a child process writes the graph as ``.npy`` files (edges ``[2, E]`` int64,
features ``[N, F]`` float32, labels, a training mask); another runs
``partition_files`` (the out-of-core writer) and reports its peak resident memory; then ``P``
gloo ranks each ``load_shard`` their part file, train a 2-layer ``DistributedGCNConv`` for a few
epochs and report their peak (``ru_maxrss``).

The ideal of a rank is what it must hold, on top of its process's resident memory before it
loads anything (Python, torch, PyG, gloo: the baseline):

* its shard, as loaded: its rows of ``x``, ``y`` and the mask, its in-edges (CSR ``col``,
  ``e_id``, ``rowptr``) and its plan (ids of its rows, halo and send lists);
* the normalised adjacency the cached GCN layers keep, self-loops added (``nnz' = nnz + n``):
  CSR ``col`` and values (12 B per entry) and its transpose for the backward product (column,
  permutation and values, 20 B): :math:`32\\,\\mathrm{nnz}'` bytes;
* the exchanged rows: :math:`4\\,h\\,(H + C)` bytes each way (halo ``h``, widths ``H``, ``C``);
* activations: :math:`4\\,(n + h)(H + C)` for the ``[owned | halo]`` operands and
  :math:`24\\,n\\,(H + C)` for the layers' outputs, aggregations and their gradients.

The ``+loaded``, ``+conv1``, ``+conv2``, ``+backward`` columns are the rank's resident memory
above its baseline after loading (and touching ``x``), after each layer's first forward and after
the first backward: where the memory beyond the ideal goes.

The writer's peak above its baseline is compared with the topology plus one chunk
(``chunk_bytes``), the topology counted two ways: the ``int64`` ``[2, E]`` edge list a PyG
``Data`` holds (``16 E``) and the ``int64`` CSR (``8 (N + 1 + E)``); the whole feature matrix is
printed for comparison.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, markdown_table, print_table, write_section  # noqa: E402

NUM_CLASSES, HIDDEN = 8, 16


def rss_now() -> int:
    """Current resident set size of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# -- child processes ------------------------------------------------------------------------------
def generate(out: Path, scale: int, edge_factor: int, features: int, seed: int = 0) -> dict:
    """The graph as .npy files; the features written a chunk at a time."""
    from pyg_sparsecomm.graph.datasets import rmat_graph

    edge_index = rmat_graph(scale, edge_factor, seed=seed).edge_index.numpy()
    np.save(out / "edges.npy", edge_index)
    N, E = 1 << scale, edge_index.shape[1]
    del edge_index
    rng = np.random.default_rng(seed)
    x = np.lib.format.open_memmap(out / "x.npy", mode="w+", dtype=np.float32, shape=(N, features))
    step = max(1, (32 << 20) // (4 * features))
    for a in range(0, N, step):
        x[a:a + step] = rng.standard_normal((min(step, N - a), features), dtype=np.float32)
    x.flush()
    del x
    np.save(out / "y.npy", rng.integers(0, NUM_CLASSES, N))
    np.save(out / "train_mask.npy", rng.random(N) < 0.1)
    return {"num_nodes": N, "num_edges": E}


def write_parts(files: Path, root: Path, num_parts: int, method: str) -> dict:
    from pyg_sparsecomm.memory import peak_memory_bytes
    from pyg_sparsecomm.store.from_files import CHUNK_BYTES, partition_files

    base = rss_now()
    t0 = time.perf_counter()
    partition_files(files / "edges.npy", root, num_parts, method, x=files / "x.npy", y=files / "y.npy",
                    masks={"train_mask": files / "train_mask.npy"})
    return {"baseline": base, "peak": peak_memory_bytes(), "seconds": time.perf_counter() - t0,
            "chunk": CHUNK_BYTES}


def _child(mode: str, *args: str) -> dict:
    """Runs ``mode`` of this script in a fresh process (its own peak memory); returns its JSON line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, f"--{mode}", *args], check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


# -- the ranks ------------------------------------------------------------------------------------
def _nbytes(value) -> int:
    import torch
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def _rank_worker(rank: int, world_size: int, root: str, epochs: int) -> dict:
    import torch
    import torch.nn.functional as F

    from pyg_sparsecomm import DistributedGCNConv, distributed_loss, load_shard, sync_gradients
    from pyg_sparsecomm.memory import peak_memory_bytes

    base = rss_now()
    stages = {}  # resident memory above the baseline after each step of the first epoch
    t0 = time.perf_counter()
    local = load_shard(root)
    load_s = time.perf_counter() - t0
    float(local.x.sum())  # a memory-mapped part file: its pages become resident when first used
    stages["loaded"] = rss_now() - base
    adj, plan = local.adj, local.adj.plan
    shard = sum(_nbytes(v) for k, v in local.items() if k not in ("adj", "edge_weight")) + sum(
        _nbytes(t) for t in (adj.rowptr, adj.col, adj.value, plan.halo_n_id, plan.halo_owner,
                             plan.halo_remote_index, plan.send_index))
    torch.manual_seed(0)
    conv1 = DistributedGCNConv(local.x.size(1), HIDDEN, cached=True)
    conv2 = DistributedGCNConv(HIDDEN, NUM_CLASSES, cached=True)
    params = [*conv1.parameters(), *conv2.parameters()]
    optimizer = torch.optim.Adam(params, lr=0.01)
    times = []
    for epoch in range(epochs):
        t1 = time.perf_counter()
        optimizer.zero_grad()
        hidden = conv1(local.x, adj).relu()
        if epoch == 0:
            stages["conv1"] = rss_now() - base
        out = conv2(hidden, adj)
        if epoch == 0:
            stages["conv2"] = rss_now() - base
        mask = local.train_mask
        loss = distributed_loss(F.cross_entropy, out[mask], local.y[mask])
        loss.backward()
        if epoch == 0:
            stages["backward"] = rss_now() - base
        sync_gradients(torch.nn.ModuleList([conv1, conv2]))
        optimizer.step()
        times.append(time.perf_counter() - t1)
    n, h, nnz = local.num_nodes, adj.halo_size, adj.nnz
    width = HIDDEN + NUM_CLASSES
    model = 32 * (nnz + n) + 2 * 4 * h * width + 4 * (n + h) * width + 24 * n * width
    return {"rank": rank, "baseline": base, "peak": peak_memory_bytes(), "shard": shard, "model": model,
            "rows": n, "halo": h, "nnz": nnz, "load_s": load_s, "epoch_s": float(np.median(times)), **stages}


# -- the table ------------------------------------------------------------------------------------
def mb(n: float) -> str:
    return f"{n / 1e6:.0f}"


def measure(files: Path, graph: dict, parts: list[int], method: str, epochs: int, features: int,
            writer_parts: list[int]) -> tuple:
    """Writer and rank rows: the writer at every P of ``parts`` and ``writer_parts``, the ranks
    trained at those of ``parts``."""
    from pyg_sparsecomm.testing import launch

    N, E = graph["num_nodes"], graph["num_edges"]
    rank_rows, writer_rows = [], []
    for P in [*parts, *writer_parts]:
        with tempfile.TemporaryDirectory(dir=files) as tmp:
            root = Path(tmp) / "parts"
            w = _child("write-parts", str(files), str(root), str(P), method)
            per_rank = launch(_rank_worker, P, str(root), epochs, timeout=7200) if P in parts else []
        above, csr = w["peak"] - w["baseline"], 8 * (N + 1 + E)
        writer_rows.append([P, method, f"{E / 1e6:.1f}M", mb(w["baseline"]), mb(16 * E), mb(csr), mb(w["chunk"]),
                            mb(4 * N * features), mb(w["peak"]), mb(above), f"{above / (16 * E + w['chunk']):.2f}",
                            f"{above / (csr + w['chunk']):.2f}", f"{w['seconds']:.1f}"])
        for r in per_rank:
            ideal = r["baseline"] + r["shard"] + r["model"]
            rank_rows.append([P, r["rank"], r["rows"], r["halo"], r["nnz"], mb(r["baseline"]), mb(r["shard"]),
                              mb(r["model"]), mb(ideal), mb(r["peak"]), f"{r['peak'] / ideal:.2f}",
                              f"{(r['peak'] - r['baseline']) / (ideal - r['baseline']):.2f}",
                              *(mb(r[k]) for k in STAGES), f"{r['load_s']:.2f}", f"{r['epoch_s'] * 1e3:.0f}"])
        print(f"P={P} done: writer peak {mb(w['peak'])} MB, ranks {[mb(r['peak']) for r in per_rank]} MB", flush=True)
    return writer_rows, rank_rows


WRITER_HEADERS = ["P", "method", "edges", "baseline MB", "edge list 16E MB", "CSR MB", "chunk MB", "features MB",
                  "peak MB", "above baseline MB", "above / (16E + chunk)", "above / (CSR + chunk)", "seconds"]
STAGES = ("loaded", "conv1", "conv2", "backward")
RANK_HEADERS = ["P", "rank", "rows", "halo", "in-edges", "baseline MB", "shard MB", "model MB", "ideal MB",
                "peak MB", "peak/ideal", "above baseline: peak/ideal", "+loaded", "+conv1", "+conv2",
                "+backward", "load s", "epoch ms"]


def run_graph(scale: int, edge_factor: int, features: int, parts: list[int], method: str, epochs: int,
              writer_parts: list[int]) -> tuple:
    with tempfile.TemporaryDirectory(prefix="memory_per_rank") as tmp:
        files = Path(tmp)
        graph = _child("generate", str(files), str(scale), str(edge_factor), str(features))
        print(f"R-MAT scale {scale}, edge factor {edge_factor}: {graph['num_nodes']} nodes, "
              f"{graph['num_edges']} edges, {features} features", flush=True)
        writer, ranks = measure(files, graph, parts, method, epochs, features, writer_parts)
    print_table(WRITER_HEADERS, writer)
    print_table(RANK_HEADERS, ranks)
    return graph, writer, ranks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--generate", nargs=4, metavar=("DIR", "SCALE", "EDGE_FACTOR", "FEATURES"), help=argparse.SUPPRESS)
    p.add_argument("--write-parts", nargs=4, metavar=("FILES", "ROOT", "P", "METHOD"), help=argparse.SUPPRESS)
    p.add_argument("--scale", type=int, default=17)
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--parts", default="2,4,8")
    p.add_argument("--method", default="metis")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--large", action="store_true", help="also R-MAT scale 21, edge factor 16 (>= 30M edges) at P = 4")
    p.add_argument("--large-method", default="random", help="partitioning method of the large graph")
    p.add_argument("--large-writer-parts", default="64,256",
                   help="part counts at which the large graph's writer runs alone (no training)")
    p.add_argument("--write", action="store_true", help="write the RESULTS.md section")
    args = p.parse_args()
    if args.generate:
        d, s, ef, f = args.generate
        print(json.dumps(generate(Path(d), int(s), int(ef), int(f))))
        return
    if args.write_parts:
        files, root, P, method = args.write_parts
        print(json.dumps(write_parts(Path(files), Path(root), int(P), method)))
        return
    load = os.getloadavg()
    runs = [(args.scale, [int(x) for x in args.parts.split(",")], args.method, [])]
    if args.large:
        runs.append((21, [4], args.large_method, [int(x) for x in args.large_writer_parts.split(",") if x]))
    sections = []
    for scale, parts, method, writer_parts in runs:
        graph, writer, ranks = run_graph(scale, args.edge_factor, args.features, parts, method, args.epochs,
                                         writer_parts)
        sections.append(f"R-MAT scale {scale}, edge factor {args.edge_factor} ({graph['num_nodes']} nodes, "
                        f"{graph['num_edges']} edges), {args.features} float32 features, "
                        f"{args.epochs} epochs of a 2-layer GCN (hidden {HIDDEN}, {NUM_CLASSES} classes).\n\n"
                        f"Writer (`partition_files`, one process):\n\n{markdown_table(WRITER_HEADERS, writer)}\n\n"
                        f"Ranks (`load_shard` of their part file, then training):\n\n"
                        f"{markdown_table(RANK_HEADERS, ranks)}")
    if args.write:
        end = os.getloadavg()
        write_section("memory_per_rank", f"## Peak memory per rank, from part files written out of core\n\n"
                      f"`python benchmarks/memory_per_rank.py{' --large' if args.large else ''}` — machine: "
                      f"{machine()}; load average {load[0]:.1f} at the start, {end[0]:.1f} at the end (shared "
                      f"machine). MB = 10^6 bytes. Ideal: see the script's docstring (baseline = the process's "
                      f"resident memory before loading).\n\n" + "\n\n".join(sections))


if __name__ == "__main__":
    main()
