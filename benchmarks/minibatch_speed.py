"""Mini-batch speed (issue 46): seeds per second of ``DistributedNeighborLoader`` + ``distribute(GraphSAGE)``
and every batch's time split into sampling / plan / exchange / model, on random graphs of one node
count and average in-degree 10, 50, 100 and 500, at P = 1, 2, 4 gloo ranks of one thread each
(launched by ``pyg_sparsecomm.testing.processes.launch``; P = 4 oversubscribes a 2-core machine 2x).

The split comes from timers wrapped around the loader's functions (exclusive times, the batch
sampled in the training loop's thread, ``prefetch=0``): *sampling* is ``DistributedNeighborLoader.sample``
less what it calls below, *plan* is ``build_batch`` (the batch's relabelling and plan) less its
exchanges, *exchange* is every exchange of sampling and planning (``exchange_ids``), *model* the
forward, backward and optimizer step; seeds / s = the batches' seeds over the sum of all four
(slowest rank).  Side by side in the same run, at P = 1: the sampling time per sampled edge on
graphs of average in-degree 8 and 96 (same node count, same fanouts) and its ratio (floor <= 1.3x);
and PyG's ``NeighborLoader`` with the same fanouts, batch size and model when torch_sparse or
pyg-lib is installed (its sampler named in the table).

    python benchmarks/minibatch_speed.py --sweep [--nodes 20000] [--degrees 10 50 100 500] [--parts 1 2 4]

Issue 56: ``--account`` prints the per-part table of a batch (sampling, id exchanges, planning,
feature gather, the layers' halo exchanges forward and backward, the layer-call checks, gradient
sync, optimizer, the rest of the model's compute) at ``--parts`` on a uniform random graph and on a
graph with locality (SBM, METIS partition); the default run (no flag) makes that table for the tree
at ``--before`` and for this one in the same job and writes both RESULTS.md sections (~1-2 min):

    python benchmarks/minibatch_speed.py [--before f7b2bf0] [--batches 8]

``--row-sets``: a batch's sampling on the host's sorted row sets against the masks of the shard's rows
an accelerator keeps (issue 56, item 3), at P = 1 on shards of ``--row-set-nodes`` rows.
"""
import argparse
import functools
import os
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from _common import machine, markdown_table, median, print_table, write_section

from pyg_sparsecomm import distributed_loss
from pyg_sparsecomm.testing import launch

FEATURES, HIDDEN, CLASSES = 64, 64, 8
PARTS = ("sampling", "plan", "exchange", "model")


def random_graph(num_nodes: int, degree: int, seed: int = 0):
    """``num_nodes * degree`` directed edges of uniform random endpoints (in-degree ~ Poisson(degree)),
    random features and labels, a random partition vector set later."""
    from torch_geometric.data import Data
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_nodes * degree), generator=gen)
    return Data(x=torch.randn(num_nodes, FEATURES, generator=gen), edge_index=edge_index, num_nodes=num_nodes,
                y=torch.randint(0, CLASSES, (num_nodes,), generator=gen))


class ExclusiveTimer:
    """Seconds per name of the functions it wraps, each less the wrapped functions it called."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.idle: dict[str, float] = defaultdict(float)  # of those, the seconds this thread ran no code
        self._stack: list[tuple[float, float]] = []

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._stack.append((0.0, 0.0))
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                total, total_cpu = time.perf_counter() - start, time.thread_time() - cpu
                inner, inner_cpu = self._stack.pop()
                self.seconds[name] += total - inner
                self.idle[name] += (total - total_cpu) - (inner - inner_cpu)
                if self._stack:
                    self._stack[-1] = (self._stack[-1][0] + total, self._stack[-1][1] + total_cpu)
        return timed


def instrument() -> ExclusiveTimer:
    """Wraps the loader's sampling, planning and id exchanges (module globals, as the loader calls them)."""
    import importlib

    from pyg_sparsecomm.loader import neighbor_loader, neighbor_sampler
    timer = ExclusiveTimer()
    loader_class = neighbor_loader.DistributedNeighborLoader
    if hasattr(loader_class.sample, "__wrapped__"):
        raise RuntimeError("instrument() runs once per process")
    loader_class.sample = timer.wrap("sampling", loader_class.sample)
    neighbor_sampler.build_batch = timer.wrap("plan", neighbor_sampler.build_batch)
    # the id exchanges: the plan's reply (batch) and the hops' requests (halo_requests; batch before it)
    for name in ("batch", "halo_requests"):
        try:
            module = importlib.import_module(f"pyg_sparsecomm.loader.{name}")
        except ImportError:
            continue
        if hasattr(module, "exchange_ids"):
            module.exchange_ids = timer.wrap("exchange", module.exchange_ids)
    return timer


#: the model step's parts (``--account``): what the timers below wrap, each less what it calls
STEP_PARTS = ("feature gather", "halo fwd", "halo bwd", "layer checks", "gradient sync", "optimizer",
              "model rest")


def instrument_step(timer: ExclusiveTimer) -> None:
    """Also wraps the batch's feature gather, the layers' halo exchanges (forward, backward), the
    layer-call checks and the gradient sync (module globals, as their callers call them)."""
    import importlib

    from pyg_sparsecomm.comm import halo
    from pyg_sparsecomm.loader import batch as batch_module
    from pyg_sparsecomm.nn import gradient_sync
    from pyg_sparsecomm.nn.runtime import call
    batch_module.batch_attributes = timer.wrap("feature gather", batch_module.batch_attributes)
    halo._to_halo = timer.wrap("halo fwd", halo._to_halo)
    halo._to_owners = timer.wrap("halo bwd", halo._to_owners)
    if hasattr(halo, "_all_to_all_body"):  # the headered exchange (issue 57): forward and backward by their kind
        body = halo._all_to_all_body
        forward, backward = timer.wrap("halo fwd", body), timer.wrap("halo bwd", body)

        def headered(send, send_counts, recv_counts, counted, group, kind):
            return (backward if kind == "halo_grad" else forward)(send, send_counts, recv_counts, counted, group, kind)
        halo._all_to_all_body = headered
    # the agreed checks: called from call.py in trees before issue 57, from checks.py (check_stage) after
    checks = importlib.import_module("pyg_sparsecomm.nn.runtime.checks")
    for module in (call, checks):
        if hasattr(module, "check_call"):
            module.check_call = timer.wrap("layer checks", module.check_call)  # type: ignore[attr-defined]
    sync = gradient_sync.GradientSync
    sync._finish = timer.wrap("gradient sync", sync._finish)  # type: ignore[method-assign]
    sync._launch = timer.wrap("gradient sync", sync._launch)  # type: ignore[method-assign]


def graph_of(kind: str, num_nodes: int, degree: int, world_size: int):
    """The benchmark's graph and its partition into ``world_size`` parts: ``"uniform"`` (uniform random
    endpoints, a random partition) or ``"sbm"`` (a sparse SBM of 64 blocks, 90% of the pairs inside
    a block, a METIS partition: a graph with locality, partitioned as the README recommends)."""
    if kind == "uniform":
        data = random_graph(num_nodes, degree)
        data.part = torch.randint(0, world_size, (num_nodes,), generator=torch.Generator().manual_seed(1))
    else:
        from _common import sparse_sbm_graph, with_features

        from pyg_sparsecomm.partition.methods import metis_partition
        data = with_features(sparse_sbm_graph(num_nodes, 64, degree, 0.9, seed=0), FEATURES, CLASSES)
        del data.train_mask
        data.part = metis_partition(data.edge_index, num_nodes, world_size, seed=1)
    data.num_parts = world_size
    return data


#: the environment variable naming the tree whose package the ranks must run (the default run's two trees)
EXPECTED_ROOT = "MINIBATCH_SPEED_PACKAGE_ROOT"


def _check_package_root() -> None:
    """Raises when this rank imported ``pyg_sparsecomm`` from another tree than the one being measured."""
    import pyg_sparsecomm
    root = os.environ.get(EXPECTED_ROOT)
    if root and not os.path.realpath(pyg_sparsecomm.__file__).startswith(os.path.realpath(root) + os.sep):
        raise RuntimeError(f"this rank runs pyg_sparsecomm from {pyg_sparsecomm.__file__}, not from {root}")


def _worker(rank, world_size, num_nodes, degree, fanouts, batch_size, batches, kind="uniform", account=False):
    from torch_geometric.nn.models import GraphSAGE

    from pyg_sparsecomm import distribute, shard
    _check_package_root()
    from pyg_sparsecomm.loader import DistributedNeighborLoader
    data = graph_of(kind, num_nodes, degree, world_size)
    local = shard(data) if world_size > 1 else shard(data, rank=0, world_size=1)
    del data
    timer = instrument()
    if account:
        instrument_step(timer)
    loader = DistributedNeighborLoader(local, fanouts, batch_size=batch_size, shuffle=True, seed=0, prefetch=0)
    torch.manual_seed(0)
    model = distribute(GraphSAGE(FEATURES, HIDDEN, len(fanouts), CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    rows = []
    for i, batch in enumerate(loader):
        if i > batches:
            break
        loader_split = dict(timer.seconds)
        timer.seconds.clear()
        start = time.perf_counter()
        _step(model, optimizer, batch, timer)
        model_s = time.perf_counter() - start
        split = {**loader_split, **{k: v for k, v in timer.seconds.items() if k not in loader_split}}
        step_split = dict(timer.seconds)
        timer.seconds.clear()
        idle_s = sum(timer.idle.values()) if account else 0.0
        timer.idle.clear()
        if i:  # the first batch warms up
            row = {"model": model_s, **{k: split.get(k, 0.0) for k in PARTS[:3]},
                   "seeds": int(batch.global_batch_size), "edges": sum(batch.num_sampled_edges)}
            if account:
                # the loader's feature gather is part of "plan" (build_batch calls it): moved out of it
                row["feature gather"] = loader_split.get("feature gather", 0.0)
                row.update({k: step_split.get(k, 0.0) for k in STEP_PARTS[1:-1]})
                row["model rest"] = model_s - sum(step_split.values())
                row["idle"] = idle_s
            rows.append(row)
    if account:
        return rows, []
    ahead = DistributedNeighborLoader(local, fanouts, batch_size=batch_size, shuffle=True, seed=0, prefetch=1)
    waits = _waits(ahead, model, optimizer, batches)
    return rows, waits


def _step(model, optimizer, batch, timer: ExclusiveTimer | None = None) -> None:
    optimizer.zero_grad()
    out = model(batch.x, batch.adj, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                num_sampled_edges_per_hop=batch.num_sampled_edges)
    s = int(batch.batch_size)
    distributed_loss(F.cross_entropy, out[:s], batch.y[:s]).backward()
    (optimizer.step if timer is None else timer.wrap("optimizer", optimizer.step))()


def _waits(loader, model, optimizer, batches: int) -> list[tuple[float, float]]:
    """``(seconds waiting in the loader, seconds of the whole step)`` per batch, the loader sampling
    one batch ahead on its thread (``prefetch=1``); the first batch warms up."""
    out, it = [], iter(loader)
    for i in range(batches + 1):
        start = time.perf_counter()
        batch = next(it, None)
        if batch is None:
            break
        loaded = time.perf_counter()
        _step(model, optimizer, batch)
        if i:
            out.append((loaded - start, time.perf_counter() - start))
    return out


def measure(num_nodes: int, degree: int, P: int, args) -> dict:
    """Per batch medians over ranks' slowest: seconds of every part, seeds / s, sampled edges."""
    results = launch(_worker, P, num_nodes, degree, args.fanouts, args.batch_size, args.batches, timeout=3600)
    per_rank = [rows for rows, _ in results]
    waits = [max(w[b][0] for _, w in results) for b in range(len(results[0][1]))]
    steps = [max(w[b][1] for _, w in results) for b in range(len(results[0][1]))]
    per_batch = []
    for b in range(len(per_rank[0])):
        rows = [r[b] for r in per_rank]
        step = {k: max(r[k] for r in rows) for k in PARTS}
        step["total"] = max(sum(r[k] for k in PARTS) for r in rows)
        step["seeds"], step["edges"] = rows[0]["seeds"], sum(r["edges"] for r in rows)
        per_batch.append(step)
    out = {k: median([s[k] for s in per_batch]) for k in (*PARTS, "total")}
    out["seeds_per_s"] = sum(s["seeds"] for s in per_batch) / sum(s["total"] for s in per_batch)
    out["edges"] = median([s["edges"] for s in per_batch])
    out["sampling_per_edge"] = sum(s["sampling"] for s in per_batch) / sum(s["edges"] for s in per_batch)
    out["loader_share"] = sum(waits) / sum(steps)  # prefetch=1: the sampling the step did not hide
    out["seeds_per_s_ahead"] = sum(s["seeds"] for s in per_batch) / sum(steps) * len(per_batch) / len(steps)
    return out


ACCOUNT_PARTS = ("sampling", "exchange", "plan", *STEP_PARTS)
#: not a part: the wrapped parts' wall time in which the rank's thread ran no code (waiting for a
#: peer in a collective, or descheduled by other load)
IDLE = "idle"


def account(kind: str, num_nodes: int, degree: int, P: int, args) -> dict:
    """``--account``: the per-part milliseconds of a batch (each part the slowest rank's, median over
    batches), their sum and the seeds / s of the sums, on graph ``kind``."""
    results = launch(_worker, P, num_nodes, degree, args.fanouts, args.batch_size, args.batches, kind, True,
                     timeout=3600)
    per_rank = [rows for rows, _ in results]
    out = {k: median([max(r[b][k] for r in per_rank) for b in range(len(per_rank[0]))])
           for k in (*ACCOUNT_PARTS, IDLE)}
    totals = [max(sum(r[b][k] for k in ACCOUNT_PARTS) for r in per_rank) for b in range(len(per_rank[0]))]
    out["total"] = median(totals)
    out["seeds_per_s"] = sum(per_rank[0][b]["seeds"] for b in range(len(totals))) / sum(totals)
    return out


#: the tree before issue 56's changes, which the default run compares with this one
BEFORE_REV = "f7b2bf0"


def compare_main(args) -> None:
    """The default run: the per-part tables of the package at ``--before`` (its ``pyg_sparsecomm/``
    extracted by ``git archive`` into a temporary folder, this script run on it) and of this tree,
    one after the other in the same job, each written to its RESULTS.md section."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path
    here = Path(__file__).resolve().parent
    common = ["--account", "--batches", str(args.batches), "--nodes", str(args.nodes),
              "--degrees", str(args.degrees[0]), "--parts", *map(str, args.parts), "--graphs", *args.graphs,
              *(["--no-write"] if args.no_write else [])]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", args.before, "pyg_sparsecomm"], cwd=here.parent,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        # the ranks are forked from a server started with ``python -c``, whose sys.path starts with the
        # working directory: each tree runs from its own root, and every rank checks what it imported
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, str(here)]), EXPECTED_ROOT: tmp}
        subprocess.run([sys.executable, __file__, *common, "--label", f"before ({args.before})",
                        "--section", "_before"], env=env, check=True, cwd=tmp)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)]), EXPECTED_ROOT: str(here.parent)}
    subprocess.run([sys.executable, __file__, *common, "--label", "after (this tree)", "--section", "_after"],
                   env=env, check=True, cwd=here.parent)


def account_main(args) -> None:
    """Prints (and writes to RESULTS.md) the per-part table of ``--account`` for every graph and ``P``."""
    import subprocess
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    headers = ["graph", "P", "seeds / s", "vs P = 1", "ms / batch", *[f"{p} ms" for p in ACCOUNT_PARTS],
               "of which idle ms"]
    rows = []
    for kind in args.graphs:
        base = None
        for P in args.parts:
            r = account(kind, args.nodes, args.degrees[0], P, args)
            base = base or r["seeds_per_s"]
            rows.append([kind, P, f"{r['seeds_per_s']:,.0f}", f"{r['seeds_per_s'] / base:.2f}x", ms(r["total"]),
                         *[ms(r[p]) for p in ACCOUNT_PARTS], ms(r[IDLE])])
            print_table(headers, rows[-1:])
    if args.no_write:
        return
    label = f", {args.label}" if args.label else ""
    notes = (f"{args.nodes:,} nodes, average in-degree {args.degrees[0]}: *uniform* (random endpoints, random "
             f"partition) and *sbm* (64 blocks, 90% of pairs inside one, METIS partition); GraphSAGE "
             f"{args.fanouts}, global batch {args.batch_size}, one thread per rank, `prefetch=0`; median over "
             f"{args.batches} batches of the slowest rank's part.  *plan* excludes the feature gather; *model "
             f"rest* is the forward/backward compute (and the loss) outside the wrapped parts; *of which idle*: "
             f"the wrapped parts' wall time in which the rank's thread ran no code (wall less thread CPU time: "
             f"waiting for a peer in a collective, or descheduled by the machine's other load).  Load at the "
             f"start: `{load}` -- a shared machine: compare ratios within this table only.")
    write_section(f"minibatch_accounting{args.section}", f"## Mini-batch accounting (issue 56){label}\n\n"
                  f"`python benchmarks/minibatch_speed.py --account` -- machine: {machine()}.\n{notes}\n\n"
                  + markdown_table(headers, rows))


def row_sets_main(args) -> None:
    """``--row-sets``: one rank's sampling and planning of a batch (``DistributedNeighborLoader.sample``)
    with the hops' sorted row sets (the host's path) against masks of the shard's rows (the
    accelerator's path, ``loader.sampler._sample_masks``), alternated batch by batch in one process, at P = 1."""
    import subprocess

    from pyg_sparsecomm import shard
    from pyg_sparsecomm.loader import DistributedNeighborLoader
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    headers = ["shard rows", "batch seeds", "rows / batch", "sets ms", "masks ms", "sets / masks"]
    rows = []
    for num_nodes in args.row_set_nodes:
        data = random_graph(num_nodes, args.degrees[0])
        data.part, data.num_parts = torch.zeros(num_nodes, dtype=torch.long), 1
        local = shard(data, rank=0, world_size=1)
        del data
        for batch_size in args.row_set_batches:
            loader = DistributedNeighborLoader(local, args.fanouts, batch_size=batch_size, prefetch=0)
            gen = torch.Generator().manual_seed(0)
            times: dict[str, list[float]] = {"sets": [], "masks": []}
            sizes = []
            for b in range(args.batches + 1):
                seeds = torch.randperm(num_nodes, generator=gen)[:batch_size].sort().values
                for name, sample in (("sets", loader.sampler.sample), ("masks", loader.sampler._sample_masks)):
                    start = time.perf_counter()
                    batch = sample(0, b, seeds, loader.sample_group)
                    if b:
                        times[name].append(time.perf_counter() - start)
                sizes.append(batch.num_nodes)
            sets, masks = median(times["sets"]), median(times["masks"])
            rows.append([f"{num_nodes:,}", batch_size, f"{median(sizes):,.0f}", ms(sets), ms(masks),
                         f"{sets / masks:.2f}x"])
            print_table(headers, rows[-1:])
    if args.no_write:
        return
    notes = (f"Random graphs of average in-degree {args.degrees[0]}, fanouts {args.fanouts}, one rank (P = 1), one "
             f"thread; median over {args.batches} batches, the two paths alternated batch by batch on the same "
             f"seeds (their batches are equal: `tests/loader/test_loader_devices.py`). Load at the start: `{load}`.")
    write_section("minibatch_row_sets", "## Mini-batch hops: sorted row sets vs masks of the shard (issue 56, item 3)"
                  f"\n\n`python benchmarks/minibatch_speed.py --row-sets` -- machine: {machine()}.\n{notes}\n\n"
                  + markdown_table(headers, rows))


def pyg_sampler() -> str | None:
    """The sampler PyG's ``NeighborLoader`` uses here, or ``None`` when it has none."""
    import torch_geometric.typing as pyg_typing
    if pyg_typing.WITH_PYG_LIB:
        return "pyg-lib"
    if pyg_typing.WITH_TORCH_SPARSE:
        return "torch_sparse"
    return None


def pyg_baseline(num_nodes: int, degree: int, args) -> dict:
    """PyG's ``NeighborLoader`` + ``GraphSAGE`` on the same graph, fanouts, batch size and model, one process."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn.models import GraphSAGE
    data = random_graph(num_nodes, degree)
    loader = NeighborLoader(data, num_neighbors=args.fanouts, batch_size=args.batch_size, shuffle=True)
    torch.manual_seed(0)
    model = GraphSAGE(FEATURES, HIDDEN, len(args.fanouts), CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    steps, it = [], iter(loader)
    for i in range(args.batches + 1):
        start = time.perf_counter()
        batch = next(it)
        loaded = time.perf_counter()
        optimizer.zero_grad()
        # torch_sparse's sampler gives no per-hop counts: the model then runs untrimmed
        out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=getattr(batch, "num_sampled_nodes", None),
                    num_sampled_edges_per_hop=getattr(batch, "num_sampled_edges", None))
        F.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size]).backward()
        optimizer.step()
        if i:
            steps.append((loaded - start, time.perf_counter() - loaded, batch.batch_size, batch.edge_index.size(1)))
    total = sum(a + b for a, b, *_ in steps)
    return {"sampling": median([a for a, *_ in steps]), "model": median([b for _, b, *_ in steps]),
            "total": median([a + b for a, b, *_ in steps]), "seeds_per_s": sum(s[2] for s in steps) / total,
            "edges": median([s[3] for s in steps]),
            "sampling_per_edge": sum(s[0] for s in steps) / sum(s[3] for s in steps)}


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--degrees", type=int, nargs="+", default=[10, 50, 100, 500])
    parser.add_argument("--ratio-degrees", type=int, nargs=2, default=[8, 96])
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=8, help="batches timed after one warm-up")
    parser.add_argument("--label", default="", help="a note for the table's title (e.g. the code version)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    parser.add_argument("--account", action="store_true",
                        help="the per-part table of a batch (issue 56) on --graphs at the first of --degrees")
    parser.add_argument("--graphs", nargs="+", default=["uniform", "sbm"], choices=["uniform", "sbm"])
    parser.add_argument("--section", default="", help="suffix of the RESULTS.md section (--account)")
    parser.add_argument("--before", default=BEFORE_REV, help="the git revision the default run compares with")
    parser.add_argument("--sweep", action="store_true",
                        help="issue 46's table instead: --degrees at --parts, per-edge sampling cost, PyG's loader")
    parser.add_argument("--row-sets", action="store_true",
                        help="issue 56 item 3: a batch's sampling with sorted row sets vs masks of the shard (P = 1)")
    parser.add_argument("--row-set-nodes", type=int, nargs="+", default=[20_000, 400_000])
    parser.add_argument("--row-set-batches", type=int, nargs="+", default=[64, 1024])
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if args.row_sets:
        row_sets_main(args)
        return
    if args.account:
        account_main(args)
        return
    if not args.sweep:
        compare_main(args)
        return
    headers = ["avg in-degree", "P", "sampler", "seeds / s", "ms / batch", *[f"{p} ms" for p in PARTS],
               "sampled edges / batch", "sampling ns / edge", "prefetch=1: seeds / s", "prefetch=1: loader share"]
    rows, per_edge = [], {}
    for degree in dict.fromkeys([*args.degrees, *args.ratio_degrees]):
        for P in (args.parts if degree in args.degrees else [1]):
            r = measure(args.nodes, degree, P, args)
            if P == 1:
                per_edge[degree] = r["sampling_per_edge"]
            rows.append([degree, P, "this package", f"{r['seeds_per_s']:,.0f}", ms(r["total"]),
                         *[ms(r[p]) for p in PARTS], f"{r['edges']:,.0f}", f"{r['sampling_per_edge'] * 1e9:.0f}",
                         f"{r['seeds_per_s_ahead']:,.0f}", f"{r['loader_share']:.0%}"])
            print_table(headers, rows[-1:])
        sampler = pyg_sampler()
        if sampler is not None and degree in args.degrees and 1 in args.parts:
            r = pyg_baseline(args.nodes, degree, args)
            rows.append([degree, 1, f"PyG NeighborLoader ({sampler})", f"{r['seeds_per_s']:,.0f}", ms(r["total"]),
                         ms(r["sampling"]), "-", "-", ms(r["model"]), f"{r['edges']:,.0f}",
                         f"{r['sampling_per_edge'] * 1e9:.0f}", "-", "-"])
            print_table(headers, rows[-1:])
    low, high = args.ratio_degrees
    ratio = per_edge[high] / per_edge[low]
    print(f"sampling time per sampled edge, avg in-degree {high} vs {low}: {ratio:.2f}x (floor <= 1.3x)")
    if args.no_write:
        return
    notes = (f"{args.nodes:,} nodes, `num_nodes * degree` random directed edges, {FEATURES} features, "
             f"GraphSAGE {len(args.fanouts)} layers of {HIDDEN} (trimmed per layer), fanouts {args.fanouts}, "
             f"batch size {args.batch_size}, Adam; median of {args.batches} batches after one warm-up (slowest "
             f"rank), random partition, one thread per rank, the loader sampling in the training thread "
             f"(`prefetch=0`).  Sampling time per sampled edge at average in-degree {high} vs {low}: "
             f"**{ratio:.2f}x** ({per_edge[high] * 1e9:.0f} vs {per_edge[low] * 1e9:.0f} ns; floor <= 1.3x).")
    if pyg_sampler() is None:
        notes += "  PyG's `NeighborLoader` rows are missing: neither torch_sparse nor pyg-lib is installed."
    else:
        notes += ("  PyG's `NeighborLoader` rows: one process, its loader's `__next__` as *sampling* (its sampler, "
                  "the subgraph and the feature gather), the same GraphSAGE (untrimmed with torch_sparse's sampler, "
                  "which gives no per-hop counts), exactly `batch_size` seeds per batch.")
    title = "Mini-batch speed: O(fanout) sampling (issue 46)" + (f", {args.label}" if args.label else "")
    write_section("minibatch_speed", f"## {title}\n\n`python benchmarks/minibatch_speed.py --sweep` — machine: "
                                     f"{machine()}.\n{notes}\n\n" + markdown_table(headers, rows))


if __name__ == "__main__":
    main()
