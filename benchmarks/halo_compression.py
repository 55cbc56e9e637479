"""Quantized and stale halos vs exact: accuracy, bytes, epoch time, P = 64 prediction (issue #16, part 4).

Graphs: Cora and CiteSeer (Planetoid split) and ``SBM-100k``, a sparse stochastic block model
(100 000 nodes, 8 blocks = classes, average degree 8, 50 % of the edges inside a block;
features = class centroid + Gaussian noise, scaled to unit noise, 64 wide; 1 % train, 5 % validation, 94 % test).
Models, hidden 64, 2 layers, dropout 0.5, Adam (lr 0.01, weight decay 5e-4), full-graph
epochs: GCN (``DistributedGCNConv`` x 2), ``distribute(GraphSAGE)`` and ``distribute(GAT)``
(heads = 1).  Options (``_halo_training.OPTIONS``): exact, ``halo_precision`` bf16 / fp16 /
int8 / int4 (halo gradients "same"), ``staleness=1`` with and without ``stale_smoothing=0.9``,
and int8 + staleness.  An option the package refuses is reported as "not available: <error>".

Budget (2 shared cores): 200 epochs on Cora / CiteSeer, 100 on SBM-100k, where only GCN runs by
default (``--big-models GCN GraphSAGE GAT`` for all; its epoch-time rows are GCN's).  The runs
are cached per configuration in ``--cache`` (so a long sweep can be split across invocations;
``--cached-only`` builds the tables from the cache without running any).

(a) Accuracy and bytes, P = 2 gloo ranks, METIS, ``--seeds`` seeds (``--seeds-of``: more for some
    options): test accuracy after the last epoch (mean ± std), its difference to exact (of the
    means, and paired: mean ± standard error of the per-seed differences, a seed fixing initial
    parameters and dropout masks), bytes per epoch (halo + halo_grad payload counted by
    ``comm_counter``, all ranks, mean over the epochs after the first), per layer (forward bytes inside each
    layer, as a ratio to exact's), and the α-β prediction of the epoch's exchange time at
    P = 64 (64-way METIS, algorithm "1d"'s ``predict`` per layer with the measured bytes per
    halo row, α = 2 µs, β of a 25 GB/s network).  Stale rows: the package's exposed time
    (``SpMMAlgorithm.predict_as_run``): each layer's exchange hides behind at least its own
    local SpMMs, forward and backward, ``max(0, comm - 2 γ nnz f)`` per layer and rank (an upper
    bound: the rest of the epoch hides it too).
(b) Epoch time, P = 2 and 4: the options of each model trained side by side in one job, in
    ``--rounds`` interleaved rounds; median epoch and median time inside communication calls
    (for stale runs: posting the exchange plus the wait that was not hidden), rank 0; fraction hidden = 1 - stale comm /
    exact comm.  Per-epoch loss and accuracy curves: ``halo_compression_curves.json`` and the
    PNGs next to this script.

    python benchmarks/halo_compression.py [--graphs Cora CiteSeer SBM-100k] [--seeds 3] [--seeds-of int8=10]
    python benchmarks/halo_compression.py --quick     # Cora, 1 seed, 20 epochs; writes to /tmp only
"""
import argparse
import fcntl
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _common import HERE, median, print_table, write_section
from _halo_report import P64_MODEL, curves, exchange_time, plot_curves, ranks_of_partition
from _halo_training import MODELS, OPTIONS, SBM_NAME, Run, graph

from pyg_sparsecomm import SparsityAwarePartitioner, shard
from pyg_sparsecomm.testing import launch

GRAPHS = ("Cora", "CiteSeer", SBM_NAME)
EPOCHS = {"Cora": 200, "CiteSeer": 200, SBM_NAME: 100}
#: models run on the big graph by default (the machine is 2 shared cores): --big-models to change
BIG_MODELS = {SBM_NAME: ["GCN"]}
LOADS: list[str] = []  # the machine's 1-minute load average before each timing job
TARGETS: list[str] = []  # the targets, as measured (filled while the tables are built)
REFUSED = (NotImplementedError, ValueError, TypeError)  # TypeError: the option does not exist yet


def partitioned(name: str, num_parts: int):
    data = graph(name)
    data.part = SparsityAwarePartitioner(num_parts, "metis", seed=0)(data.clone()).part
    data.num_parts = num_parts
    return data


# jobs (run on every rank) ---------------------------------------------------------------------
def _accuracy_job(rank, world_size, data, configs, epochs, eval_every):
    local, classes = shard(data), int(data.y.max()) + 1
    out = {}
    for model, option, seed in configs:
        try:
            out[(model, option, seed)] = Run(model, local, classes, OPTIONS[option], seed).train(epochs, eval_every)
        except REFUSED as e:
            out[(model, option, seed)] = {"error": f"{type(e).__name__}: {e}"}
    return out


def _timing_job(rank, world_size, data, models, options, rounds, epochs, warmup):
    local, classes = shard(data), int(data.y.max()) + 1
    runs, out = {}, {}
    for model in models:
        for option in options:
            try:
                runs[(model, option)] = Run(model, local, classes, OPTIONS[option], 0)
                for _ in range(warmup):
                    runs[(model, option)].epoch()
            except REFUSED as e:
                out[(model, option)] = {"error": f"{type(e).__name__}: {e}"}
                runs.pop((model, option), None)
    for _ in range(rounds):
        for run in runs.values():
            for _ in range(epochs):
                run.epoch()
    for key, run in runs.items():
        h = run.history
        out[key] = {"epoch_s": h["epoch_s"][warmup:], "comm_s": h["comm_s"][warmup:]}
    return out


# the runs, cached per configuration ----------------------------------------------------------
def load_cache(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def store_runs(path: Path, runs: dict) -> dict:
    """Adds ``runs`` to the cache file under a lock and returns its whole content, so that several
    invocations sharing one cache (a sweep split across jobs) never drop each other's runs."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = {**load_cache(path), **runs}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, path)
    return cache


def models_for(name: str, args, timing: bool = False) -> list[str]:
    """The models run on ``name``: all, but on the big graph ``--big-models`` (and GCN only for timing)."""
    if name not in BIG_MODELS:
        return args.models
    return [m for m in args.models if m in (BIG_MODELS[name] if timing else args.big_models)]


def accuracy_runs(name, data, args, cache, cache_path) -> dict:
    """``{(model, option, seed): per-rank results}``, cached per configuration; a refused option is
    cached as its error and tried again, unless ``--cached-only`` (nothing runs; missing: "not run")."""
    epochs = args.epochs or EPOCHS[name]

    def key(config) -> str:
        return f"{name}|{epochs}|{'|'.join(map(str, config))}"

    results = {}
    for option in args.options:
        configs = [(m, option, s) for m in models_for(name, args) for s in range(seeds_of(option, args))]
        todo = [] if args.cached_only else [c for c in configs if key(c) not in cache or "error" in cache[key(c)][0]]
        if todo:
            t0 = time.perf_counter()
            per_rank = launch(_accuracy_job, 2, data, todo, epochs, args.eval_every, timeout=7200)
            cache.update(store_runs(cache_path, {key(c): [r[c] for r in per_rank] for c in todo}))
            print(f"  {name} {option}: {len(todo)} runs in {time.perf_counter() - t0:.0f} s", flush=True)
        results.update({c: cache.get(key(c)) for c in configs})
    return results


def seeds_of(option: str, args) -> int:
    """The seeds run for ``option``: ``--seeds``, or its ``--seeds-of option=N`` (exact: the most of any)."""
    counts = dict(item.split("=") for item in args.seeds_of)
    if option == "exact":
        return max([args.seeds] + [int(n) for n in counts.values()])
    return int(counts.get(option, args.seeds))


def summarize(runs) -> dict:
    """One configuration's per-rank results -> global loss / accuracy curves and bytes."""
    r0 = runs[0]
    correct = torch.tensor([r["evals"]["correct"] for r in runs]).sum(0)
    total = torch.tensor([r["evals"]["total"] for r in runs]).sum(0)
    acc = (correct / total).tolist()
    layer_bytes = [sum(r["layer_bytes"][i] for r in runs) for i in range(len(r0["layer_bytes"]))]
    sent = [sum(r["bytes"][e] for r in runs) for e in range(len(r0["bytes"]))]
    return {"loss": [sum(r["loss"][e] for r in runs) for e in range(len(r0["loss"]))],
            "eval_epochs": r0["evals"]["epoch"], "test_acc": [a[2] for a in acc], "val_acc": [a[1] for a in acc],
            "bytes": statistics.mean(sent[1:] or sent), "layer_bytes": layer_bytes,
            "row_bytes": [b / sum(r["rows_sent"] for r in runs) for b in layer_bytes]}


# tables --------------------------------------------------------------------------------------
def short(error: str) -> str:
    """An error's type and first clause (the tables repeat it per row)."""
    kind, _, message = error.partition(": ")
    return f"not available: {kind}: {message.split(': ')[0]}"


def paired_delta(accs, exact_accs) -> str:
    """Mean ± standard error (pp) of the per-seed differences to exact's run with the same seed.

    A seed fixes the initial parameters and the dropout masks of both runs (the rounding of
    compressed halos draws from its own generator), so the difference isolates the option's effect
    from the seed-to-seed spread of final accuracies."""
    diffs = [100 * (a - b) for a, b in zip(accs, exact_accs, strict=False)]
    if len(diffs) < 2:
        return f"{diffs[0]:+.2f}" if diffs else "-"
    return f"{statistics.mean(diffs):+.2f} ± {statistics.stdev(diffs) / len(diffs) ** 0.5:.2f}"


def pm(values) -> str:
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values) if len(values) > 1 else 0:.2f}"


def accuracy_rows(name, data, results, timing, args) -> tuple[list, dict]:
    rows, summaries = [], {}
    ranks = ranks_of_partition(data)
    for model in models_for(name, args):
        base = None
        for option in args.options:
            wanted = seeds_of(option, args)
            seeds = [r for r in (results[(model, option, s)] for s in range(wanted)) if r is not None]
            if not seeds or "error" in seeds[0][0]:
                rows.append([name, model, option, short(seeds[0][0]["error"]) if seeds else "not run"] + ["-"] * 9)
                continue
            s = [summarize(runs) for runs in seeds]
            summaries[(model, option)] = s
            accs = [x["test_acc"][-1] for x in s]
            base = base or (accs, s[0])
            delta = 100 * (statistics.mean(accs) - statistics.mean(base[0]))
            paired = paired_delta(accs, base[0]) if option != "exact" else "-"
            # a layer may move nothing per epoch (distribute exchanges constant input rows once)
            layer_ratio = [b / e if e else float("nan") for b, e in
                           zip(s[0]["layer_bytes"], base[1]["layer_bytes"], strict=True)]
            # staleness: the window of each layer is its SpMM over the exact row width (float32)
            widths = [round(b / 4) for b in base[1]["row_bytes"]] if OPTIONS[option].get("staleness") else None
            comm, sent64, exposed = exchange_time(ranks, s[0]["row_bytes"], widths)
            if option == "int8":
                TARGETS.append(f"{name} {model}: int8 Δ {delta:+.2f} pp (paired {paired}), layer bytes ratios "
                               + " / ".join(f"{r:.3f}" for r in layer_ratio))
            rows.append([name, model, option, pm(accs) + f" ({len(s)} seeds)",
                         f"{delta:+.2f}", paired, f"{s[0]['bytes'] / 1e6:.3f}",
                         f"{s[0]['bytes'] / base[1]['bytes']:.3f}",
                         " / ".join(f"{r:.3f}" for r in layer_ratio),
                         " / ".join(f"{b / 4:.0f}" for b in base[1]["row_bytes"]),
                         f"{sent64 / 1e6:.3f}", f"{comm * 1e3:.3f}",
                         f"{exposed * 1e3:.3f}"])
    return rows, summaries


def timing_rows(name, timing, args) -> list:
    rows = []
    for model in models_for(name, args, timing=True):
        for option in args.options:
            row = [name, model, option]
            for P in args.parts:
                t = timing.get((P, model, option))
                if t is None or "error" in t:
                    row += [short(t["error"]) if t else "not run", "-", "-"]
                    continue
                exact = timing.get((P, model, "exact"), {})
                hidden = "-"
                if OPTIONS[option].get("staleness") and "comm_s" in exact and median(exact["comm_s"]) > 0:
                    hidden = f"{1 - median(t['comm_s']) / median(exact['comm_s']):.2f}"
                row += [f"{median(t['epoch_s']) * 1e3:.1f}", f"{median(t['comm_s']) * 1e3:.2f}", hidden]
                if option == "stale" and P == 2:
                    TARGETS.append(f"{name} {model}: staleness=1 hides {hidden} of the exchange time at P = 2")
            rows.append(row)
    return rows


def timings(name, data_by_p, args) -> dict:
    out = {}
    for P in args.parts:
        t0 = time.perf_counter()
        LOADS.append(f"{name} P={P}: {os.getloadavg()[0]:.1f}")
        per_rank = launch(_timing_job, P, data_by_p[P], models_for(name, args, timing=True), args.options, args.rounds,
                          args.time_epochs, 2, timeout=7200)
        for key, value in per_rank[0].items():
            out[(P, *key)] = value
        print(f"  {name} timing P={P}: {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--options", nargs="+", default=list(OPTIONS))
    p.add_argument("--big-models", nargs="+", default=BIG_MODELS[SBM_NAME], help=f"models run on {SBM_NAME}")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seeds-of", nargs="*", default=[], metavar="OPTION=N",
                   help="more seeds for some options, e.g. int8=10 (exact then runs as many)")
    p.add_argument("--epochs", type=int, default=None, help="default: 200 (Planetoid), 100 (SBM-100k)")
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--parts", nargs="+", type=int, default=[2, 4], help="P of the epoch-time rows")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--time-epochs", type=int, default=3, help="epochs per configuration and round")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "halo_compression_runs.json")
    p.add_argument("--out", type=Path, default=HERE, help="where the curves JSON and PNGs go")
    p.add_argument("--cached-only", action="store_true", help="report the cached accuracy runs, run none")
    p.add_argument("--no-timing", action="store_true", help="accuracy runs only (fills the cache; no tables)")
    p.add_argument("--quick", action="store_true", help="Cora, 1 seed, 20 epochs, P = 2; RESULTS.md untouched")
    args = p.parse_args()
    if args.quick:
        args.graphs, args.seeds, args.epochs, args.parts, args.rounds = ["Cora"], 1, 20, [2], 1
        args.out = Path(tempfile.mkdtemp(prefix="halo_compression"))
    torch.set_num_threads(1)
    cache = load_cache(args.cache)
    acc_head = ["graph", "model", "option", "test acc % (mean ± std)", "Δ vs exact (pp)",
                "paired Δ (pp, mean ± s.e.)", "MB/epoch (all ranks)",
                "bytes vs exact", "per layer vs exact (L1 / L2)", "exact floats per halo row (L1 / L2)",
                "P=64 pred. MB/epoch", "P=64 pred. exchange ms", "P=64 pred. exposed ms"]
    time_head = ["graph", "model", "option"] + [f"P={P} {c}" for P in args.parts
                                                for c in ("epoch ms", "comm ms", "hidden")]
    acc_all, time_all, all_curves = [], [], {}
    for name in args.graphs:
        data = partitioned(name, 2)
        results = accuracy_runs(name, data, args, cache, args.cache)
        if args.no_timing:
            continue
        data_by_p = {2: data, **{P: partitioned(name, P) for P in args.parts if P != 2}}
        timing = timings(name, data_by_p, args)
        rows, summaries = accuracy_rows(name, data, results, timing, args)
        acc_all += rows
        time_all += timing_rows(name, timing, args)
        all_curves[name] = curves(summaries)
        print_table(acc_head, rows)
    if args.no_timing:
        return
    print()
    print_table(acc_head, acc_all)
    print()
    print_table(time_head, time_all)
    (args.out / "halo_compression_curves.json").write_text(json.dumps(all_curves))
    figures = plot_curves(all_curves, args.out)
    print(f"curves: {args.out / 'halo_compression_curves.json'}, figures: {figures}")
    if not args.quick:
        write_results(args, acc_head, acc_all, time_head, time_all, figures)


def write_results(args, acc_head, acc_all, time_head, time_all, figures) -> None:
    from _common import machine, markdown_table
    epochs = ", ".join(f"{g} {args.epochs or EPOCHS[g]}" for g in args.graphs)
    body = (f"## Quantized and stale halos vs exact (issue #16)\n\n`python benchmarks/halo_compression.py` — "
            f"machine: {machine()}.\nSee the script's docstring for the setup. Epochs: {epochs}; seeds per row "
            f"as stated (`--seeds {args.seeds} --seeds-of {' '.join(args.seeds_of)}`); P = 2 gloo ranks of 1 "
            f"thread, METIS. P = 64 prediction: {P64_MODEL}.\n\n"
            "(a) Accuracy and bytes\n\n" + markdown_table(acc_head, acc_all) + "\n\n"
            f"(b) Epoch time ({args.rounds} interleaved rounds of {args.time_epochs} epochs after 2 warm-up epochs, "
            f"medians, rank 0; the machine is shared: load average before each job {', '.join(LOADS)}; 'hidden' = "
            f"1 - stale comm / exact comm)\n\n" + markdown_table(time_head, time_all) + "\n\nCurves (mean over seeds): "
            "`benchmarks/halo_compression_curves.json`, " + ", ".join(f"![{f}]({f})" for f in figures)
            + "\n\nTargets (reported, not asserted): int8 bytes <= 0.27x exact on layers of width >= 64 and test "
              "accuracy within 0.5 percentage points of exact; staleness=1 hides >= 90 % of the exchange time at "
              "P = 2.\n\n" + "\n".join(f"* {t}" for t in TARGETS))
    write_section("halo_compression", body)


if __name__ == "__main__":
    main()
