"""Partitioning at scale: KaMinPar against METIS on R-MAT graphs (issues 27 and 49).

For every R-MAT scale (edge factor 16, ``pyg_sparsecomm.graph.datasets.rmat_graph``'s default
probabilities) and method, a child process loads the graph's ``edge_index`` (cached as ``.npy``),
then calls the partitioning method on it, timed from the ``edge_index`` in memory to the ``part``
vector, as a user pays it: the method's input preparation (METIS: symmetrisation; KaMinPar: the
statistics its automatic options read, the edge sample, the leaf fold and the ParHiP file it
loads) included.  Its peak memory is the child's resident-set high-water mark over that call
(``VmHWM`` reset through ``/proc/self/clear_refs`` after loading the input), against the bytes of
the graph's CSR topology (int64 ``ptr`` and ``col``: ``8 (N + 1 + E)``).  The parent then computes
each partition's total volume (rows per SpMM = km1 of the column-net hypergraph) and its node and
nonzero imbalance (max/avg) from the plan.

Methods are ``NAME[:OPTION=VALUE,...]``, e.g. ``kaminpar:threads=2``; ``plain`` among the options
stands for ``pyg_sparsecomm.partition.kaminpar_defaults.PLAIN_OPTIONS`` (none of KaMinPar's
automatic options: its configuration before issue 49), e.g. ``kaminpar:plain,threads=2``.  The
first method, ``kaminpar`` with no options, is what a user gets by default: its row names the
options it chose from the graph (so does every KaMinPar row leaving some of them unnamed).

    python benchmarks/partition_scale.py [--scales 18 19 20 21] [--parts 64] [--repeats 3]
        [--methods kaminpar kaminpar:plain,threads=2 metis] [--cache /tmp/pyg_sparsecomm_rmat]
        [--merge] [--write]
"""
import argparse
import ast
import json
import os
import re
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import RESULTS, median, print_table, write_table_section

HEADERS = ["scale", "N", "E", "method", "seconds", "CPU s", "peak MB", "peak/CSR", "total rows", "total/METIS",
           "node imb", "nnz imb"]


def parse_method(spec: str) -> tuple[str, dict]:
    """``"kaminpar:threads=2,preset='fast',split=[2,2]"`` -> ``("kaminpar", {"threads": 2, "preset":
    "fast", "split": [2, 2]})`` (commas inside brackets belong to the value); ``plain`` adds
    ``PLAIN_OPTIONS`` (the options after it override them)."""
    name, _, opts = spec.partition(":")
    options = {}
    for item in filter(None, re.split(r",(?![^\[]*\])", opts)):
        if item == "plain":
            from pyg_sparsecomm.partition.kaminpar_defaults import PLAIN_OPTIONS
            options.update(PLAIN_OPTIONS)
            continue
        key, value = item.split("=", 1)
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return name, options


def graph_file(cache: Path, scale: int, edge_factor: int) -> Path:
    """The cached ``edge_index`` (``int64 [2, E]``) of R-MAT ``scale``, generated once."""
    path = cache / f"rmat{scale}_{edge_factor}.npy"
    if not path.exists():
        from pyg_sparsecomm.graph.datasets import rmat_graph
        cache.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        data = rmat_graph(scale, edge_factor, seed=0)
        np.save(path, data.edge_index.numpy())
        print(f"generated R-MAT scale {scale}: {data.edge_index.size(1)} edges in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def _memory_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return usage.ru_utime + usage.ru_stime


def child(method: str, path: str, num_nodes: int, num_parts: int, seed: int, out: str) -> None:
    """Runs one method on the graph in ``path`` and prints its time and peak memory as JSON."""
    import torch

    from pyg_sparsecomm.partition import METHODS

    name, options = parse_method(method)
    edge_index = torch.from_numpy(np.load(path))
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    before = _memory_kb("VmRSS")
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        part = METHODS[name](edge_index, num_nodes, num_parts, seed, **options)
    seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    peak = _memory_kb("VmHWM")
    for warning in said:
        print(f"{method}: {warning.category.__name__}: {warning.message}", file=sys.stderr)
    np.save(out, part.numpy())
    print(json.dumps({"seconds": seconds, "cpu": cpu, "rss_before_kb": before, "peak_kb": peak,
                      "chosen": chosen_options(name, edge_index, num_nodes, num_parts, options)}))


def chosen_options(name: str, edge_index, num_nodes: int, num_parts: int, options: dict) -> dict:
    """The options KaMinPar (``"kaminpar"``, or ``"auto"`` when it picks KaMinPar) chose from the
    graph that differ from ``PLAIN_OPTIONS`` (recomputed after the timed call: a pure function of
    the graph's statistics)."""
    from pyg_sparsecomm.partition import kaminpar_backend, kaminpar_defaults
    from pyg_sparsecomm.partition.auto import recommended_method
    from pyg_sparsecomm.partition.sparsify import edge_degrees

    if name == "auto":
        name = recommended_method(edge_index.size(1), warn=False)
    if name != "kaminpar" or num_parts == 1:
        return {}
    given = {k: options.get(k, kaminpar_defaults.AUTO) for k in kaminpar_defaults.AUTOMATIC}
    given["preset"] = options.get("preset", "default")
    degree = edge_degrees(*edge_index.numpy(), num_nodes)
    stats = kaminpar_defaults.GraphStats.of_degrees(degree, edge_index.size(1))
    chosen, why = kaminpar_defaults.choose_options(stats, num_parts, given, *kaminpar_backend.automatic_threads())
    return {k: chosen[k] for k in why if chosen[k] != kaminpar_defaults.PLAIN_OPTIONS[k]}


def stages(path: str, num_nodes: int, num_parts: int) -> tuple[list, float]:
    """Peak resident set above the input of every step of ``method="kaminpar"`` (MB): the CSR
    of in-edges, the ParHiP file (transpose and symmetrised blocks), KaMinPar loading it
    (uncompressed and compressed) and partitioning (per preset)."""
    import kaminpar
    import torch

    from pyg_sparsecomm.partition.methods import row_nnz
    from pyg_sparsecomm.partition.parhip import write_parhip

    rows = []

    def step(name, fn):
        Path("/proc/self/clear_refs").write_text("5")
        before, cpu0 = _memory_kb("VmRSS"), _cpu_seconds()
        out = fn()
        rows.append([name, f"{(_memory_kb('VmHWM') - before) / 1e3:.0f}",
                     f"{(_memory_kb('VmRSS') - before) / 1e3:.0f}", f"{_cpu_seconds() - cpu0:.1f}"])
        print(*rows[-1], flush=True)
        return out

    edge_index = torch.from_numpy(np.load(path))
    src, dst = edge_index.numpy()
    csr_mb = 8 * (num_nodes + 1 + len(src)) / 1e6
    file = str(Path(path).with_suffix(".parhip"))
    step("ParHiP file from the edges", lambda: write_parhip(file, src, dst, num_nodes, row_nnz(edge_index, num_nodes)))
    edge_index = src = dst = None  # free them before KaMinPar loads the file
    for compress in (False, True):
        graph = step(f"KaMinPar load (compress={compress})",
                     lambda: kaminpar.load_graph(file, kaminpar.GraphFileFormat.PARHIP, compress=compress))
        for preset in ("terapart",) if compress else ("default", "fast", "largek"):
            step(f"KaMinPar partition ({preset})",
                 lambda: kaminpar.KaMinPar(1, kaminpar.context_by_name(preset)).compute_partition(graph, num_parts))
        graph = None
    os.remove(file)
    return rows, csr_mb


def run_child(method: str, path: Path, num_nodes: int, num_parts: int, seed: int, out: Path, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--child", method, str(path), str(num_nodes), str(num_parts), str(seed), str(out)]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{method} failed:\n{done.stderr[-2000:]}")
    print(done.stderr, end="", file=sys.stderr)  # the method's warnings (KaMinPar's choices)
    return json.loads(done.stdout.strip().splitlines()[-1])


def quality(edge_index, num_nodes: int, part: np.ndarray, num_parts: int) -> dict:
    """Total volume (rows per SpMM), node and nonzero imbalance (max/avg) of a partition."""
    from pyg_sparsecomm import CommStats
    from pyg_sparsecomm.plan import comm_pattern

    pattern = comm_pattern(edge_index, part, num_nodes, num_parts)
    stats = CommStats.from_pattern(pattern)
    sizes = pattern.part_sizes
    return {"total": int(stats.total_rows), "node_imb": float(sizes.max() / sizes.mean()),
            "nnz_imb": float(stats.as_dict()["compute_imbalance"])}


def merged(rows: list) -> list:
    """``rows`` plus the RESULTS.md section's rows of other (scale, method) pairs, by scale then method
    (the total/METIS column recomputed against the METIS row of the same scale)."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    section = re.search(r"<!-- BEGIN partition_scale -->(.*?)<!-- END partition_scale -->", text, re.S)
    new = {(int(r[0]), r[3]) for r in rows}
    for line in section.group(1).splitlines() if section else []:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(HEADERS) and cells[0].isdigit() and (int(cells[0]), cells[3]) not in new:
            rows.append([int(cells[0]), int(cells[1]), int(cells[2]), *cells[3:8], int(cells[8]), *cells[9:]])
    metis = {r[0]: r[8] for r in rows if r[3] == "metis"}
    for r in rows:
        r[9] = f"{r[8] / metis[r[0]]:.2f}" if r[0] in metis else "-"
    return sorted(rows, key=lambda r: (r[0], not is_default(r[3]), r[3]))


def labelled(method: str, chosen: dict) -> str:
    """``method`` and the options it chose from the graph: ``kaminpar (chose threads=2, ...)``."""
    return f"{method} (chose {', '.join(f'{k}={v!r}' for k, v in chosen.items())})" if chosen else method


def is_default(label: str) -> bool:
    """Whether a row is ``method="kaminpar"`` with no options (the configuration a user gets)."""
    return label == "kaminpar" or label.startswith("kaminpar (")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", nargs="+", type=int, default=[18, 19, 20, 21])
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--parts", type=int, default=64)
    p.add_argument("--methods", nargs="+", default=["kaminpar", "kaminpar:plain,threads=2", "metis"],
                   help="the default configuration (kaminpar) first")
    p.add_argument("--repeats", type=int, default=1, help="runs per method (median time and peak)")
    p.add_argument("--cache", type=Path, default=Path("/tmp/pyg_sparsecomm_rmat"))
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--write", action="store_true", help="write the RESULTS.md section")
    p.add_argument("--merge", action="store_true", help="keep the section's rows of (scale, method) not rerun")
    p.add_argument("--stages", action="store_true",
                   help="print the peak memory of every step of method='kaminpar' on the first scale")
    p.add_argument("--child", nargs=6, metavar=("METHOD", "PATH", "N", "P", "SEED", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        method, path, num_nodes, num_parts, seed, out = args.child
        return child(method, path, int(num_nodes), int(num_parts), int(seed), out)

    if args.stages:
        scale = args.scales[0]
        steps, csr_mb = stages(str(graph_file(args.cache, scale, args.edge_factor)), 1 << scale, args.parts)
        if args.write:
            write_table_section("partition_scale_stages", f"Where KaMinPar's memory goes (R-MAT scale {scale}, "
                                f"P = {args.parts})", f"partition_scale.py --stages --scales {scale}",
                                f"Peak resident set of every step of `method=\"kaminpar\"` above the resident "
                                f"set before it, run one after the other in one process, against the CSR "
                                f"topology's {csr_mb:.0f} MB; load average {os.getloadavg()[0]:.1f}. The method "
                                f"writes the file from the edges (no CSR) and KaMinPar then loads it, so its "
                                f"peak is about the larger of: the ParHiP step, and KaMinPar's load + "
                                f"partition.",
                                ["step", "peak MB", "held after MB", "CPU s"], steps)
        return None
    import torch
    rows = []
    load = os.getloadavg()
    for scale in args.scales:
        path = graph_file(args.cache, scale, args.edge_factor)
        edge_index = torch.from_numpy(np.load(path))
        num_nodes, num_edges = 1 << scale, edge_index.size(1)
        csr_mb = 8 * (num_nodes + 1 + num_edges) / 1e6
        results = {}
        for method in args.methods:
            out = args.cache / f"part_{os.getpid()}.npy"  # one file per run: runs may go on side by side
            runs = [run_child(method, path, num_nodes, args.parts, 1, out, args.timeout) for _ in range(args.repeats)]
            part = np.load(out)
            results[labelled(method, runs[0]["chosen"])] = dict(quality(edge_index, num_nodes, part, args.parts),
                                   seconds=median([r["seconds"] for r in runs]),
                                   cpu=median([r["cpu"] for r in runs]),
                                   peak_mb=median([(r["peak_kb"] - r["rss_before_kb"]) * 1e3 / 1e6 for r in runs]))
            print(f"scale {scale} {method}: {results[labelled(method, runs[0]['chosen'])]}", file=sys.stderr,
                  flush=True)
        metis = results.get("metis", {}).get("total")
        for method, r in results.items():
            rows.append([scale, num_nodes, num_edges, method, f"{r['seconds']:.1f}", f"{r['cpu']:.1f}",
                         f"{r['peak_mb']:.0f}",
                         f"{r['peak_mb'] / csr_mb:.2f}", r["total"],
                         f"{r['total'] / metis:.2f}" if metis else "-", f"{r['node_imb']:.3f}",
                         f"{r['nnz_imb']:.3f}"])
        del edge_index
        table = merged(list(rows)) if args.merge else rows
        print_table(HEADERS, table)
        if args.write:  # after every scale, so a long run leaves what it measured
            write(args, table, load)


def write(args, rows: list, load: tuple) -> None:
    """The RESULTS.md section of ``rows``."""
    notes = (f"R-MAT (a, b, c = 0.57, 0.19, 0.19, edge factor {args.edge_factor}, duplicates and "
             f"self-loops removed) into P = {args.parts} parts, seed 1, {args.repeats} run(s) per method "
             f"(median); load average {load[0]:.1f} / {load[1]:.1f} at the start (the 2 cores are "
             f"shared). *method*: `kaminpar` is `method=\"kaminpar\"` with no options, as a user gets it, "
             f"followed by the options it chose from the graph (`partition/kaminpar_defaults.py`; so is "
             f"every KaMinPar row leaving some of them unnamed); `plain`: none chosen "
             f"(`PLAIN_OPTIONS`, the configuration before issue 49). *seconds*: from the `edge_index` in "
             f"memory to the partition, input preparation included (*CPU s*: user + system time of all "
             f"its threads, less sensitive to the shared machine's load; METIS: symmetrisation; KaMinPar: "
             f"the graph's degree statistics, sample, leaf fold and groups as chosen, the symmetrised "
             f"graph streamed into a ParHiP file, KaMinPar loading it). *peak MB*: the child's peak "
             f"resident set during that "
             f"call above its resident set before it (interpreter, torch and the loaded `edge_index` "
             f"excluded); *peak/CSR*: that over the CSR topology's bytes 8 (N + 1 + E). *total rows*: "
             f"rows sent per SpMM (km1); *imb*: max/avg owned nodes and row nonzeros (in-degree + 1, "
             f"the vertex weight every method balances).")
    write_table_section("partition_scale", "Partitioning at scale: KaMinPar vs METIS (R-MAT, P = "
                        f"{args.parts})", " ".join(["partition_scale.py", *sys.argv[1:]]), notes, HEADERS, rows)


if __name__ == "__main__":
    main()
