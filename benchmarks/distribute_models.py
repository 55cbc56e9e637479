"""``distribute(model)`` on PyG's own models vs PyG's fastest single process (issue #13).

Four 2-layer models of ``torch_geometric.nn.models`` (hidden 64): ``GCN``, ``GraphSAGE``,
``GIN``, ``GAT`` (heads = 1), default settings (no dropout, no norm), Adam, cross-entropy on
the ~10 % train mask, full-graph epochs (forward + backward + gradient sync + step) on a
synthetic stochastic block model graph (random block of every node, 90 % of the edges
inside a block, undirected, fixed seed; 64 random features, 8 random classes).

* **PyG, 1 process, 2 threads** (``torch.set_num_threads(2)``): every model on
  ``edge_index`` and, where its convolution takes one (GCN, GraphSAGE, GIN), on a torch
  CSR ``adj_t`` (``adj_t[target, source]``; checked to give the ``edge_index`` outputs on
  a small directed graph and on the benchmark graph before timing).  The faster of the two
  is "PyG fastest".
* **distribute(model)**, P = 2 processes of 1 thread (gloo), METIS partition, algorithm
  ``"1d"`` and, for the models whose aggregation is a linear SpMM (GCN, GraphSAGE, GIN),
  ``"oblivious"`` (CAGNET 1D broadcast).  GAT's attention messages always use the 1D halo
  exchange; its oblivious bytes are computed from the broadcast volume of the same
  exchanges (every rank's whole block forward, every peer block's partial sums backward).

Medians over ``--epochs`` epochs after ``--warmup`` warm-up epochs (rank 0).  Bytes: halo
payload the exchanges counted (``comm_counter``) per epoch, rank 0 and the sum over
ranks; the gradient all-reduce and the loss-count all-reduce are not counted.  The loss of
epoch 0 of every distributed run is compared with the single-process one (same seed).  A
model whose distributed/PyG-fastest ratio misses the target gets a profile of one epoch
on rank 0 (torch.profiler operators and cProfile functions).

    python benchmarks/distribute_models.py [--nodes 100000] [--degree 8] [--epochs 10]
"""
import argparse
import cProfile
import io
import os
import pstats
import resource
import time
import warnings

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE
from torch_geometric.utils import coalesce, remove_self_loops, to_torch_csr_tensor, to_undirected

from _common import median, print_table, with_features, write_table_section
from pyg_sparsecomm import (SparsityAwarePartitioner, comm_counter, distribute, distributed_loss, shard,
                            sync_gradients)
from pyg_sparsecomm.training import global_sum
from pyg_sparsecomm.testing import launch

MODELS = {"GCN": GCN, "GraphSAGE": GraphSAGE, "GIN": GIN, "GAT": GAT}
CSR_MODELS = ("GCN", "GraphSAGE", "GIN")        # convolutions that take a torch sparse adj_t
LINEAR_MODELS = ("GCN", "GraphSAGE", "GIN")     # aggregation = one SpMM: "oblivious" applies
HIDDEN, CLASSES, FEATURES = 64, 8, 64
TARGET = 0.8
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")


# graph ------------------------------------------------------------------------------------
def sbm_graph(num_nodes: int, num_blocks: int, degree: float, p_in: float, seed: int) -> Data:
    """Sparse stochastic block model: ``num_nodes * degree / 2`` undirected pairs, a fraction
    ``p_in`` inside the source's (random) block, the rest uniform; self-loops and duplicates
    dropped, both directions kept."""
    gen = torch.Generator().manual_seed(seed)
    block = torch.randint(num_blocks, (num_nodes,), generator=gen)
    order = torch.argsort(block)
    sizes = torch.bincount(block, minlength=num_blocks)
    start = torch.cumsum(sizes, 0) - sizes
    m = int(num_nodes * degree / 2)
    src = torch.randint(num_nodes, (m,), generator=gen)
    b = block[src]
    inside = order[start[b] + (torch.rand(m, generator=gen) * sizes[b]).long().clamp_(max=sizes[b] - 1)]
    outside = torch.randint(num_nodes, (m,), generator=gen)
    dst = torch.where(torch.rand(m, generator=gen) < p_in, inside, outside)
    edge_index, _ = remove_self_loops(torch.stack([src, dst]))
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    return with_features(Data(edge_index=edge_index, num_nodes=num_nodes), FEATURES, CLASSES, seed)


def csr_adj_t(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """PyG's ``adj_t`` as a torch CSR tensor: row = target, column = source."""
    return to_torch_csr_tensor(edge_index.flip(0), size=(num_nodes, num_nodes))


def build(name: str, in_channels: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return MODELS[name](in_channels, HIDDEN, num_layers=2, out_channels=CLASSES)


def check_adj_t(data: Data, names) -> dict:
    """Max |out(adj_t) - out(edge_index)| per model, on ``data`` (no grad)."""
    out = {}
    with torch.no_grad():
        adj_t = csr_adj_t(data.edge_index, data.num_nodes)
        for name in names:
            model = build(name, data.x.size(1))
            a, b = model(data.x, data.edge_index), model(data.x, adj_t)
            out[name] = float((a - b).abs().max())
    return out


def small_directed_graph() -> Data:
    gen = torch.Generator().manual_seed(3)
    ei = coalesce(remove_self_loops(torch.randint(0, 300, (2, 1500), generator=gen))[0], num_nodes=300)
    return Data(x=torch.randn(300, FEATURES, generator=gen), edge_index=ei, num_nodes=300)


# training ---------------------------------------------------------------------------------
def run_epochs(model, x, adj, y, mask, epochs: int, distributed: bool, profile_epoch: int = -1):
    """Per epoch: wall time, time inside communication calls, bytes this rank sent, loss
    (the whole-graph loss: summed over ranks when distributed); and the profiles."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    counter = comm_counter()
    times, comm, sent, losses, profiles = [], [], [], [], {}
    for epoch in range(epochs):
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) \
            if epoch == profile_epoch else None
        cprof = cProfile.Profile() if epoch == profile_epoch + 1 and profile_epoch >= 0 else None
        if prof is not None:
            prof.__enter__()
        if cprof is not None:
            cprof.enable()
        counter.reset()
        t0 = time.perf_counter()
        opt.zero_grad()
        out = model(x, adj)
        if distributed:
            loss = distributed_loss(F.cross_entropy, out[mask], y[mask])
        else:
            loss = F.cross_entropy(out[mask], y[mask])
        loss.backward()
        if distributed:
            sync_gradients(model)
        opt.step()
        times.append(time.perf_counter() - t0)
        comm.append(counter.seconds)
        sent.append(counter.bytes_sent())
        losses.append(float(global_sum(loss.detach())) if distributed else float(loss.detach()))
        if prof is not None:
            prof.__exit__(None, None, None)
            averages = prof.key_averages()
            profiles["ops"] = averages.table(sort_by="self_cpu_time_total", row_limit=25)
            profiles["events"] = [(e.key, e.self_cpu_time_total / 1e3) for e in averages]
            profiles["ops_epoch_ms"] = times[-1] * 1e3
            profiles["ops_comm_ms"] = comm[-1] * 1e3
        if cprof is not None:
            cprof.disable()
            s = io.StringIO()
            stats = pstats.Stats(cprof, stream=s)
            stats.sort_stats("tottime").print_stats(25)
            stats.sort_stats("cumulative").print_stats(35)
            profiles["python"] = s.getvalue()
            profiles["python_epoch_ms"] = times[-1] * 1e3
    return times, comm, sent, losses, profiles


def _single(rank, world_size, data, names, epochs, warmup):
    """PyG in one process (the launcher sets the thread count): edge_index and CSR adj_t."""
    adj_t = csr_adj_t(data.edge_index, data.num_nodes)
    out = {}
    for name in names:
        for graph in (["edge_index", "csr"] if name in CSR_MODELS else ["edge_index"]):
            model = build(name, data.x.size(1))
            adj = data.edge_index if graph == "edge_index" else adj_t
            times, _, _, losses, _ = run_epochs(model, data.x, adj, data.y, data.train_mask,
                                                warmup + epochs, distributed=False)
            out[name, graph] = {"times": times[warmup:], "loss0": losses[0], "threads": torch.get_num_threads()}
            print(f"  PyG {name} {graph}: {median(times[warmup:]) * 1e3:.1f} ms", flush=True)
    return out


def _profile_single(rank, world_size, data, name, graph, warmup):
    """One profiled epoch of PyG (after ``warmup``), for the breakdown next to rank 0's."""
    adj = data.edge_index if graph == "edge_index" else csr_adj_t(data.edge_index, data.num_nodes)
    model = build(name, data.x.size(1))
    return run_epochs(model, data.x, adj, data.y, data.train_mask, warmup + 2, distributed=False,
                      profile_epoch=warmup)[4]


def _distributed(rank, world_size, data, runs, epochs, warmup, profile):
    local = shard(data)
    out = {"owned": local.num_nodes, "halo": local.adj.halo_size, "nnz": local.adj.nnz}
    for name, algorithm in runs:
        model = distribute(build(name, local.x.size(1)), algorithm=algorithm)
        # every rank runs the same epochs (collectives); rank 0 profiles the last two
        n = warmup + epochs + (2 if profile else 0)
        times, comm, sent, losses, profiles = run_epochs(
            model, local.x, local.adj, local.y, local.train_mask, n, distributed=True,
            profile_epoch=(n - 2) if profile and rank == 0 else -1)
        keep = slice(warmup, warmup + epochs)
        out[name, algorithm] = {"times": times[keep], "comm": comm[keep], "sent": sent[keep],
                                "loss0": losses[0], "profiles": profiles}
        if rank == 0:
            print(f"  distribute {name} {algorithm}: {median(times[keep]) * 1e3:.1f} ms "
                  f"(comm {median(comm[keep]) * 1e3:.1f} ms)", flush=True)
    return out


def exchanges(name: str):
    """``(floats per row, has a backward exchange)`` of every source-row exchange of one
    epoch's forward, in order (layer 1, layer 2).  GraphSAGE and GIN aggregate their input
    first (layer 1 moves the 64 features, which need no gradient); GAT exchanges alpha_j
    (heads) in its edge_updater and x_j (heads * out) in propagate; GCN's degree exchanges
    (1 float, no backward) always use the 1D halo exchange and are left out."""
    return {"GAT": [(1, True), (HIDDEN, True), (1, True), (CLASSES, True)],
            "GCN": [(HIDDEN, True), (CLASSES, True)],
            "GraphSAGE": [(FEATURES, False), (HIDDEN, True)],
            "GIN": [(FEATURES, False), (HIDDEN, True)]}[name]


def oblivious_bytes(name: str, owned):
    """Bytes per epoch every rank would send under the oblivious broadcast of the same
    exchanges: forward its whole block to the P - 1 peers, backward its partial sums of
    every other block to their owners."""
    P, N = len(owned), sum(owned)
    return [sum(4 * w * (n_r * (P - 1) + ((N - n_r) if backward else 0)) for w, backward in exchanges(name))
            for n_r in owned]


#: operator categories of the profile breakdown, matched in order on torch.profiler's names
CATEGORIES = [
    ("halo exchange", ("_haloexchange", "_haloreduce", "alltoall", "all_to_all")),
    ("all-reduce (grads, loss)", ("allreduce", "all_reduce")),
    ("sort/CSR build", ("sort", "bincount", "cumsum", "unique", "nonzero", "repeat_interleave", "coalesce")),
    ("SpMM (CSR)", ("sparse", "csr", "spmm")),
    ("scatter (aggregation, softmax)", ("scatter", "index_add", "segment")),
    ("gather (x_j, alpha_j)", ("index_select", "gather", "aten::index")),
    ("dense matmul", ("aten::mm", "addmm", "linear", "bmm")),
    ("alloc/fill/copy/cat", ("fill_", "zero", "empty", "copy", "cat", "clone", "contiguous", "resize")),
    ("elementwise/reductions", ("mul", "add", "div", "exp", "sub", "relu", "threshold", "leaky", "where",
                                "neg", "pow", "sum", "max", "mean", "softmax", "nll", "masked", "sqrt")),
]


def breakdown(events) -> dict:
    """Self CPU ms per category (``events``: ``(name, self ms)`` of one profiled epoch)."""
    out = {c: 0.0 for c, _ in CATEGORIES}
    out["other"] = 0.0
    for key, ms in events:
        k = key.lower()
        cat = next((c for c, pats in CATEGORIES if any(p in k for p in pats)), "other")
        out[cat] += ms
    return out


# machine load ------------------------------------------------------------------------------
def _busy_seconds() -> float:
    """CPU seconds all processes of the machine spent busy (user, nice, system, irq, softirq)."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return sum(fields[i] for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class ForeignLoad:
    """CPU seconds that processes other than this one and its children used (other jobs on
    the machine perturb the timings); accumulated over every ``with`` block."""

    def __init__(self) -> None:
        self.seconds = self.wall = 0.0

    def __enter__(self):
        self._t = (time.perf_counter(), _busy_seconds(), _own_seconds())
        return self

    def __exit__(self, *exc) -> None:
        t, busy, own = self._t
        self.wall += time.perf_counter() - t
        self.seconds += max(0.0, (_busy_seconds() - busy) - (_own_seconds() - own))


def wait_idle(max_wait: float, busy_cores: float = 0.15) -> float:
    """Waits (up to ``max_wait`` s) until the machine's other processes use < ``busy_cores``
    cores over one second; returns the seconds waited."""
    t0 = time.perf_counter()
    while True:
        b0, o0 = _busy_seconds(), _own_seconds()
        time.sleep(1.0)
        if (_busy_seconds() - b0) - (_own_seconds() - o0) < busy_cores or time.perf_counter() - t0 > max_wait:
            return time.perf_counter() - t0


# main -------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--blocks", type=int, default=100)
    p.add_argument("--degree", type=float, default=8.0, help="average (directed) degree before dedup")
    p.add_argument("--p-in", type=float, default=0.9)
    p.add_argument("--epochs", type=int, default=12, help="measured epochs per configuration (all rounds)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-wait", type=float, default=60.0, help="s to wait for other jobs to go idle")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--no-write", action="store_true", help="do not write RESULTS.md")
    args = p.parse_args()
    t_start = time.perf_counter()

    small = small_directed_graph()
    small_err = check_adj_t(small, [m for m in args.models if m in CSR_MODELS])
    print("adj_t vs edge_index, small directed graph, max |diff|:", small_err)
    assert all(e < 1e-4 for e in small_err.values()), small_err

    data = sbm_graph(args.nodes, args.blocks, args.degree, args.p_in, seed=0)
    N, E = data.num_nodes, data.edge_index.size(1)
    print(f"graph: {N} nodes, {E} directed edges, {int(data.train_mask.sum())} train nodes")
    torch.set_num_threads(2)
    big_err = check_adj_t(data, [m for m in args.models if m in CSR_MODELS])
    print("adj_t vs edge_index, benchmark graph, max |diff|:", big_err)
    assert all(e < 1e-3 for e in big_err.values()), big_err

    t0 = time.perf_counter()
    part = SparsityAwarePartitioner(num_parts=args.parts, method="metis")(data)
    t_part = time.perf_counter() - t0
    print(f"METIS P={args.parts}: {t_part:.1f} s")

    # Rounds alternate the single-process and the distributed runs, so that a slow phase of
    # the machine (other jobs) does not fall on one side only; epochs of all rounds are pooled.
    runs = [(m, "1d") for m in args.models] + [(m, "oblivious") for m in args.models if m in LINEAR_MODELS]
    per_round = -(-args.epochs // args.rounds)
    load, waited, single, dist_out = ForeignLoad(), 0.0, {}, None
    for r in range(args.rounds):
        waited += wait_idle(args.max_wait)
        print(f"round {r + 1}/{args.rounds}: PyG single process, 2 threads:", flush=True)
        with load:
            got = launch(_single, 1, data, args.models, per_round, args.warmup, threads=2, timeout=1800)[0]
        for key, v in got.items():
            single.setdefault(key, {"times": [], "loss0": v["loss0"]})["times"] += v["times"]
        waited += wait_idle(args.max_wait)
        print(f"round {r + 1}/{args.rounds}: distribute, P={args.parts}, 1 thread each:", flush=True)
        with load:
            got = launch(_distributed, args.parts, part, runs, per_round, args.warmup, False, threads=1,
                         timeout=1800)
        if dist_out is None:
            dist_out = got
        else:
            for mine, new in zip(dist_out, got):
                for key in runs:
                    for k in ("times", "comm", "sent"):
                        mine[key][k] += new[key][k]
    print(f"other processes used {load.seconds:.0f} CPU-s during the {load.wall:.0f} s of measurement "
          f"({load.seconds / max(load.wall, 1e-9):.2f} cores on average); waited {waited:.0f} s for idle")
    owned = [r["owned"] for r in dist_out]
    halos = [r["halo"] for r in dist_out]

    headers = ["model", "PyG edge_index ms", "PyG CSR adj_t ms", "PyG fastest ms", "distribute 1d ms",
               "1d comm ms", "1d / fastest", f"<= {TARGET}x", "1d MB/epoch r0", "1d MB/epoch total",
               "oblivious ms", "obl. comm ms", "obl. MB/epoch r0", "obl. MB/epoch total", "epoch-0 loss diff"]
    rows, ratios, misses, loss_diffs, fastest = [], {}, [], {}, {}
    for name in args.models:
        ei_ms = median(single[name, "edge_index"]["times"]) * 1e3
        csr_ms = median(single[name, "csr"]["times"]) * 1e3 if (name, "csr") in single else None
        fast = min(v for v in (ei_ms, csr_ms) if v is not None)
        fastest[name] = "csr" if csr_ms is not None and csr_ms < ei_ms else "edge_index"
        r1d = [r[name, "1d"] for r in dist_out]
        d_ms = median(r1d[0]["times"]) * 1e3
        ratio = d_ms / fast
        ratios[name] = ratio
        if ratio > TARGET:
            misses.append(name)
        sent0 = median(r1d[0]["sent"])
        sent_all = sum(median(r["sent"]) for r in r1d)
        diff = abs(r1d[0]["loss0"] - single[name, "edge_index"]["loss0"])
        loss_diffs[name] = (r1d[0]["loss0"], single[name, "edge_index"]["loss0"])
        if (name, "oblivious") in dist_out[0]:
            ro = [r[name, "oblivious"] for r in dist_out]
            obl = [f"{median(ro[0]['times']) * 1e3:.1f}", f"{median(ro[0]['comm']) * 1e3:.1f}",
                   f"{median(ro[0]['sent']) / 1e6:.2f}", f"{sum(median(r['sent']) for r in ro) / 1e6:.2f}"]
            diff = max(diff, abs(ro[0]["loss0"] - single[name, "edge_index"]["loss0"]))
            print(f"oblivious bytes {name}: measured {[median(r['sent']) for r in ro]}, formula "
                  f"{oblivious_bytes(name, owned)}" + (" (+ degree exchanges)" if name == "GCN" else ""))
        else:
            ob = oblivious_bytes(name, owned)
            obl = ["-", "-", f"{ob[0] / 1e6:.2f} (computed)", f"{sum(ob) / 1e6:.2f} (computed)"]
        rows.append([name, f"{ei_ms:.1f}", "-" if csr_ms is None else f"{csr_ms:.1f}", f"{fast:.1f}",
                     f"{d_ms:.1f}", f"{median(r1d[0]['comm']) * 1e3:.1f}", f"{ratio:.2f}",
                     "yes" if ratio <= TARGET else "no", f"{sent0 / 1e6:.2f}", f"{sent_all / 1e6:.2f}",
                     *obl, f"{diff:.1e}"])
    print()
    print_table(headers, rows)
    print("\nepoch-0 loss (distribute 1d, single process):",
          {k: (f"{a:.7f}", f"{b:.7f}") for k, (a, b) in loss_diffs.items()})

    profile_text, profile_notes = "", []
    if misses:
        print(f"\nprofiling one epoch of {misses} on rank 0 (P={args.parts}, 1d):")
        wait_idle(args.max_wait)
        prof_out = launch(_distributed, args.parts, part, [(m, "1d") for m in misses], 1, 1, True,
                          threads=1, timeout=1800)[0]
        for name in misses:
            pr = prof_out[name, "1d"]["profiles"]
            graph = "csr" if (name, "csr") in single and fastest[name] == "csr" else "edge_index"
            wait_idle(args.max_wait)
            ps = launch(_profile_single, 1, data, name, graph, 1, threads=2, timeout=1800)[0]
            mine, theirs = breakdown(pr["events"]), breakdown(ps["events"])
            tot_m, tot_t = sum(mine.values()), sum(theirs.values())
            brow = [[c, f"{theirs[c]:.0f}", f"{100 * theirs[c] / tot_t:.0f}%", f"{mine[c]:.0f}",
                     f"{100 * mine[c] / tot_m:.0f}%"] for c in mine if mine[c] + theirs[c] > 0.005 * (tot_m + tot_t)]
            bhead = ["category", f"PyG {graph} 2 thr ms", "share", "distribute r0 ms", "share"]
            print(f"\n{name}: self-CPU breakdown of one profiled epoch (PyG {graph}: {ps['ops_epoch_ms']:.0f} ms "
                  f"wall, {tot_t:.0f} ms self CPU over 2 threads; distribute rank 0: {pr['ops_epoch_ms']:.0f} "
                  f"ms wall, comm {pr['ops_comm_ms']:.0f} ms)")
            print_table(bhead, brow)
            profile_notes.append(
                f"{name} profile (one epoch, self CPU, rank 0 of distribute vs PyG {graph} on 2 threads): "
                + ", ".join(f"{c} {mine[c]:.0f} vs {theirs[c]:.0f} ms" for c in sorted(mine, key=mine.get,
                                                                                       reverse=True)[:6]))
            text = (f"\n=== {name}: torch.profiler, rank 0, epoch {pr['ops_epoch_ms']:.1f} ms "
                    f"(comm {pr['ops_comm_ms']:.1f} ms; profiled) ===\n{pr['ops']}\n"
                    f"=== {name}: cProfile, rank 0, epoch {pr['python_epoch_ms']:.1f} ms (profiled) ===\n"
                    f"{pr['python']}")
            print(text)
            profile_text += text

    total = time.perf_counter() - t_start
    print(f"\ntotal {total:.0f} s")
    if args.no_write:
        return
    notes = (
        f"Synthetic SBM ({N} nodes, {E} directed edges, {args.blocks} random blocks, {args.p_in:.0%} of the "
        f"edges inside a block, seed 0; 64 random features, 8 random classes, {int(data.train_mask.sum())} "
        f"train nodes). Models of `torch_geometric.nn.models`, 2 layers, hidden 64, defaults (GAT heads = 1). "
        f"Medians over {args.rounds} x {per_round} epochs, each round after {args.warmup} warm-up epochs (forward, backward, gradient "
        f"sync, Adam step). PyG: one process, 2 threads, `edge_index` and a torch CSR `adj_t` "
        f"(outputs checked equal to `edge_index`'s); `distribute(model)`: P = {args.parts} gloo processes of "
        f"1 thread, METIS ({owned} owned, {halos} halo rows per rank), rank 0's times. "
        f"Ratio = distribute 1d / PyG fastest, target <= {TARGET}x: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
        + f". MB/epoch: halo payload counted by `comm_counter` (rank 0 and the sum over ranks; the "
        f"gradient all-reduce is not counted); GAT's oblivious bytes are computed (broadcast of the same "
        f"exchanges), the others measured. Epoch-0 loss diff: |distributed - single-process| loss of the "
        f"first epoch, same initial weights. {args.rounds} rounds alternating single-process and distributed "
        f"runs; other processes on the machine used {load.seconds / max(load.wall, 1e-9):.2f} cores on average "
        f"during the measurements." + "".join(f" {n}." for n in profile_notes))
    write_table_section("distribute_models", "distribute(model) on PyG models vs PyG's fastest single process",
                        "distribute_models.py", notes, headers, rows)


if __name__ == "__main__":
    main()
