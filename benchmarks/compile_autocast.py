"""Training-step time under ``torch.compile`` and ``torch.autocast`` (issue #23, item 3).

Two 2-layer models of ``torch_geometric.nn.models`` (hidden 64, no dropout): ``GCN`` and
``GraphSAGE``, on a synthetic stochastic block model graph (``--nodes``, average degree
``--degree``, 90 % of the edges inside a block, 64 random features, 8 random classes, ~10 %
training nodes), one full-graph training step = forward + cross-entropy + backward (+ gradient
sync) + Adam step, in three modes:

* **eager**;
* **compiled**: ``torch.compile(model)`` (Inductor; the first steps, which compile, are warm-up);
* **autocast bf16**: the forward under ``torch.autocast("cpu", dtype=torch.bfloat16)``.

Side by side in one run: **PyG, 1 process, 2 threads** (``--pyg-threads``) on ``edge_index`` and on a torch CSR
``adj_t``, and **distribute(model)**, P = 2 processes of 1 thread (gloo, METIS, ``"1d"``).
Median step time of rank 0 over ``--steps`` rounds after ``--warmup`` warm-up steps; a round
runs one step of every mode in turn (of every PyG configuration of a model, on its side).  Agreement:
max |out - PyG's out| of the first forward, same mode and initial weights, against PyG on
``edge_index`` (``adj_t``'s own column against ``edge_index`` too).  The machine is shared: the
load average during the run is printed and written with the table.

    python benchmarks/compile_autocast.py [--nodes 50000] [--degree 8] [--steps 10] [--warmup 3] [--pyg-threads 2]

``--distributed-only`` times ``distribute(model)`` eager against compiled alone, for more rounds in the
same time (section ``compile_vs_eager``): per model the medians, the median of the per-round ratios
compiled / eager (each round times both back to back, so a load swing of the shared machine
cancels out of the ratio), the same ratio for a second eager model of the same weights timed in the
same rounds (what the ratio reads when nothing differs: the noise floor), and dynamo's graph,
graph-break and recompile counts over the steps.
"""
import argparse
import contextlib
import io
import os
import time
import warnings

import torch
import torch.nn.functional as F
from _common import median, print_table, sparse_sbm_graph, with_features, write_table_section
from torch_geometric.nn.models import GCN, GraphSAGE
from torch_geometric.utils import to_torch_csr_tensor

from pyg_sparsecomm import SparsityAwarePartitioner, distribute, distributed_loss, shard, sync_gradients
from pyg_sparsecomm.testing import launch

MODELS = {"GCN": GCN, "GraphSAGE": GraphSAGE}
MODES = ("eager", "compiled", "autocast bf16")
#: --distributed-only: a second eager model of the same weights in the same rounds measures the noise
SIDE_BY_SIDE = ("eager", "compiled", "eager (control)")
HIDDEN, CLASSES, FEATURES = 64, 8, 64


def build(name: str, mode: str, distributed: bool):
    torch.manual_seed(0)
    model = MODELS[name](FEATURES, HIDDEN, num_layers=2, out_channels=CLASSES)
    if distributed:
        distribute(model)
    return torch.compile(model) if mode == "compiled" else model


def autocast(mode: str):
    return torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast bf16" else contextlib.nullcontext()


class Runner:
    """One configuration's training steps; ``first`` is the output of its first forward."""

    def __init__(self, model, mode, x, adj, y, mask, distributed):
        self.model, self.mode, self.x, self.adj, self.y, self.mask = model, mode, x, adj, y, mask
        self.distributed, self.times = distributed, []
        self.opt = torch.optim.Adam(model.parameters(), lr=0.01)
        with torch.no_grad(), autocast(mode):
            self.first = model(x, adj).float()

    def step(self, timed: bool) -> None:
        t0 = time.perf_counter()
        self.opt.zero_grad()
        with autocast(self.mode):
            out = self.model(self.x, self.adj)
        if self.distributed:
            loss = distributed_loss(F.cross_entropy, out[self.mask].float(), self.y[self.mask])
        else:
            loss = F.cross_entropy(out[self.mask].float(), self.y[self.mask])
        loss.backward()
        if self.distributed:
            sync_gradients(self.model)
        self.opt.step()
        if timed:
            self.times.append(time.perf_counter() - t0)


def interleaved(runners: dict, warmup: int, steps: int) -> None:
    """Warm-up steps of each runner (compiling), then ``steps`` rounds of one timed step of each
    in turn, so that the machine's slow phases fall on every mode alike; the order rotates every
    two rounds and every other round runs in reverse, so that every mode takes every position and no
    mode always follows the same one (what a step leaves behind, e.g. a peer still finishing, lands
    on every mode alike)."""
    for runner in runners.values():
        for _ in range(warmup):
            runner.step(False)
    for round_ in range(steps):
        order = list(runners.values())
        shift = round_ // 2 % len(order)
        order = order[shift:] + order[:shift]
        for runner in (order if round_ % 2 == 0 else order[::-1]):
            runner.step(True)


def _distributed(rank, world_size, payload, warmup, steps):
    local = shard(torch.load(io.BytesIO(payload), weights_only=False))
    out = {"n_id": local.n_id}
    for name in MODELS:
        runners = {mode: Runner(build(name, mode, True), mode, local.x, local.adj, local.y, local.train_mask, True)
                   for mode in MODES}
        interleaved(runners, warmup, steps)
        for mode, runner in runners.items():
            out[name, mode] = runner.first, runner.times
            if rank == 0:
                print(f"  distribute {name} {mode}: median {median(runner.times) * 1e3:.1f} ms", flush=True)
    return out


def _compiled_vs_eager(rank, world_size, payload, warmup, steps):
    from torch._dynamo.utils import counters
    local = shard(torch.load(io.BytesIO(payload), weights_only=False))
    out = {}
    for name in MODELS:
        counters.clear()
        runners = {mode: Runner(build(name, mode, True), mode, local.x, local.adj, local.y, local.train_mask, True)
                   for mode in SIDE_BY_SIDE}
        interleaved(runners, warmup, 0)
        compiled_before = dict(counters["stats"])
        interleaved(runners, 0, steps)
        stats = dict(counters["stats"])
        graphs_after_warmup = stats.get("unique_graphs", 0) - compiled_before.get("unique_graphs", 0)
        out[name] = ([runners[m].times for m in SIDE_BY_SIDE], compiled_before.get("unique_graphs", 0),
                     sum(counters["graph_break"].values()), graphs_after_warmup,
                     sum(counters["recompiles"].values()) if "recompiles" in counters else 0)
    return out


def compiled_vs_eager(data, args) -> None:
    payload = io.BytesIO()
    torch.save(data, payload)
    load = [os.getloadavg()[0]]
    per_rank = launch(_compiled_vs_eager, 2, payload.getvalue(), args.warmup, args.steps, timeout=7200)
    load.append(os.getloadavg()[0])
    rows = []
    for name in MODELS:
        (eager, compiled, control), graphs, breaks, new_graphs, recompiles = per_rank[0][name]
        ratios = [c / e for c, e in zip(compiled, eager, strict=True)]
        noise = [c / e for c, e in zip(control, eager, strict=True)]
        faster = sum(r < 1 for r in ratios)
        rows.append([name, f"{median(eager) * 1e3:.1f}", f"{median(compiled) * 1e3:.1f}", f"{median(ratios):.3f}",
                     f"{median(noise):.3f}", f"{faster} / {len(ratios)}", str(graphs), str(breaks), str(new_graphs),
                     str(recompiles)])
    headers = ["model", "eager ms", "compiled ms", "compiled / eager (median of per-round ratios)",
               "second eager / eager (the same, the noise floor)", "rounds compiled faster",
               "graphs compiled (no-grad first forward + training)",
               "graph breaks (both)",
               "graphs compiled after warm-up", "recompiles"]
    print_table(headers, rows)
    notes = (f"\nSBM graph, {data.num_nodes} nodes, {data.edge_index.size(1)} directed edges, width 64, 2-layer "
             f"models, Adam, `distribute(model)` at P = 2 (gloo, 1 thread per rank, METIS); rank 0's step times "
             f"over {args.steps} rounds of one eager, one compiled and one more eager step back to back, after "
             f"{args.warmup} "
             f"warm-up steps each (compiling).  1-minute load average before / after: "
             f"{', '.join(f'{v:.1f}' for v in load)} (a shared 2-core machine: the per-round ratio is the "
             f"comparison to read).  Layer calls a steady-state record reproduces (`nn/runtime/steady_call.py`) "
             f"trace without a graph break; the others run eagerly, as one graph break (`nn.runtime.call.EagerCall`), "
             f"and `BasicGNN`'s forward loops over its layers, so dynamo then runs that frame eagerly as a whole "
             f"(`graph breaks` and `graphs compiled` below say which).  Before the steady state (2026-12-02: "
             f"nothing of these models compiled) 0.986 GCN, 0.996 GraphSAGE; before that (one graph per `Linear` "
             f"or bias add inside the layers, AOTAutograd's wrappers around each): 1.064 GCN, 1.016 GraphSAGE "
             f"(load 10-14), 1.062 and 1.260 in a 40-round run at load 1-3.")
    if not args.no_write:
        write_table_section("compile_vs_eager", "torch.compile against eager: distribute(model), many rounds",
                            "compile_autocast.py --distributed-only", notes, headers, rows)


def single(data, warmup, steps, threads) -> dict:
    torch.set_num_threads(threads)
    adj_t = to_torch_csr_tensor(data.edge_index.flip(0), size=(data.num_nodes, data.num_nodes))
    out: dict = {}
    for name in MODELS:
        runners = {}
        for graph, adj in (("edge_index", data.edge_index), ("adj_t", adj_t)):
            for mode in MODES:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        runner = Runner(build(name, mode, False), mode, data.x, adj, data.y, data.train_mask, False)
                        runner.step(False)  # a configuration PyG cannot train fails here, not mid-round
                    runners[graph, mode] = runner
                except Exception as e:  # noqa: BLE001 - reported in the table
                    out[name, graph, mode] = f"{type(e).__name__}: {str(e).splitlines()[0][:70]}"
                    print(f"  PyG {name} {graph} {mode}: fails ({out[name, graph, mode]})", flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            interleaved(runners, max(warmup - 1, 0), steps)
        for (graph, mode), runner in runners.items():
            out[name, graph, mode] = runner.first, runner.times
            print(f"  PyG {name} {graph} {mode}: median {median(runner.times) * 1e3:.1f} ms", flush=True)
    return out


def bf16_hardware() -> str:
    """Whether this CPU multiplies bfloat16 natively (else autocast's bf16 matmuls convert in software)."""
    try:
        flags = set(open("/proc/cpuinfo").read().split())
    except OSError:
        return "unknown"
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    return ", ".join(native) if native else "none (no AVX512-BF16 / AMX: bf16 products are converted in software)"


def cell(result) -> str:
    return f"{median(result[1]) * 1e3:.1f}" if isinstance(result, tuple) else "fails"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=50000)
    p.add_argument("--degree", type=float, default=8.0)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--pyg-threads", type=int, default=2, help="threads of the single process (1 on a loaded "
                   "machine: an OpenMP team whose threads are descheduled waits at every barrier)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--distributed-only", action="store_true", help="distribute(model) eager against compiled only")
    args = p.parse_args()
    data = with_features(sparse_sbm_graph(args.nodes, 8, args.degree, 0.9, seed=0), FEATURES, CLASSES, 0)
    data = SparsityAwarePartitioner(num_parts=2, method="metis")(data)
    if args.distributed_only:
        compiled_vs_eager(data, args)
        return
    print(f"graph: {data.num_nodes} nodes, {data.edge_index.size(1)} directed edges; load {os.getloadavg()}")
    load = [os.getloadavg()[0]]
    payload = io.BytesIO()  # as bytes: handing tensors to the fork server through shared memory failed here
    torch.save(data, payload)
    dist_out = launch(_distributed, 2, payload.getvalue(), args.warmup, args.steps, timeout=7200)[0]
    load.append(os.getloadavg()[0])
    ref = single(data, args.warmup, args.steps, args.pyg_threads)
    load.append(os.getloadavg()[0])
    rows = []
    for name in MODELS:
        for mode in MODES:
            base = ref[name, "edge_index", mode]
            first, times = dist_out[name, mode]
            agree = adj_agree = "-"
            if isinstance(base, tuple):
                agree = f"{float((first - base[0][dist_out['n_id']]).abs().max()):.1e}"
                if isinstance(ref[name, "adj_t", mode], tuple):
                    adj_agree = f"{float((ref[name, 'adj_t', mode][0] - base[0]).abs().max()):.1e}"
            fastest = min((median(ref[name, g, mode][1]) for g in ("edge_index", "adj_t")
                           if isinstance(ref[name, g, mode], tuple)), default=float("nan"))
            rows.append([name, mode, cell(ref[name, "edge_index", mode]), cell(ref[name, "adj_t", mode]),
                         f"{median(times) * 1e3:.1f}", f"{median(times) / fastest:.2f}", agree, adj_agree])
    headers = ["model", "mode", "PyG edge_index ms", "PyG adj_t ms", "distribute P=2 ms", "dist / PyG fastest",
               "max abs diff dist vs PyG", "max abs diff adj_t vs edge_index"]
    print_table(headers, rows)
    failures = {k: v for k, v in ref.items() if isinstance(v, str)}
    notes = (f"\nSBM graph, {data.num_nodes} nodes, {data.edge_index.size(1)} directed edges, width 64, 2-layer "
             f"models, Adam; median step time (rank 0 for P = 2) over {args.steps} rounds of one step per mode, "
             f"after {args.warmup} warm-up steps (the compiled ones compile there).  PyG: 1 process, "
             f"{args.pyg_threads} thread(s); "
             f"distribute: 2 processes of 1 thread, gloo.  1-minute load average before / between "
             f"(distributed, then PyG) / after: "
             f"{', '.join(f'{v:.1f}' for v in load)} on a machine shared with other jobs: compare within a row.  "
             f"Agreement: max abs difference of the first forward's output from PyG's on edge_index, same mode.  "
             f"CPU bf16 instructions: {bf16_hardware()}.\n"
             + "".join(f"\nPyG {k[0]} on {k[1]} in mode {k[2]}: {v}" for k, v in failures.items()))
    if not args.no_write:
        write_table_section("compile_autocast", "torch.compile and autocast: step time and agreement",
                            "compile_autocast.py", notes, headers, rows)


if __name__ == "__main__":
    main()
