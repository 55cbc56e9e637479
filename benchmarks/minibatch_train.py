"""Distributed mini-batch training (issue #15): exchange volume per batch of random, METIS,
hypergraph (HP) and stochastic hypergraph (SHP) partitions, and measured training at P = 4.

Graph: a sparse stochastic block model (``sparse_sbm_graph``), 262,144 nodes, average degree
10, 512 blocks, 70 % of the edges inside a block; 64 random features, 8 random classes, a
random 50 % train mask (timing only: nothing to learn).  Samplers, as the loaders draw them:
neighbour (``NeighborSampling``: 1024 seeds of the train mask, fanouts [10, 5], shuffled) and
node subsets (``NodeSubsetSampling``: ~20,000 random nodes and the subgraph they induce,
VLDB'23 Fig. 5).  SHP is ``method="stochastic_hypergraph"`` built from the same sampler's
batches (its default sample: epoch 0, grown to eq. (14) with θ = 0.1, δ = 0.5).

(a) Simulated P = 4, 16, 64: rows per batch of each layer = km1 of the batch's column nets
    (``global_batches`` of a held-out epoch, mean over 64 batches) under each partition; bytes
    per batch for ``distribute(GraphSAGE(64, 64, num_layers=2, out_channels=8))`` (fp32), with the
    widths it moves: layer 1 exchanges the 64 input features forward and nothing backward (the
    input needs no gradient), layer 2 applies its 64 -> 8 ``Linear`` first and exchanges 8 wide
    rows forward and 8 wide gradients backward.  A neighbour batch's layer 2 is trimmed to the
    hop-1 edges; a node-subset batch runs both layers on the whole induced subgraph.
(b) Real P = 4 gloo ranks of 1 thread each (4 ranks on this 2-core machine: oversubscribed 2x):
    an epoch of ``DistributedNeighborLoader(local, [10, 5], batch_size=1024, input_nodes=
    local.train_mask, shuffle=True)`` training that GraphSAGE (trimmed, Adam), per partition,
    rounds alternating between partitions (every partition trains the same batches in a
    round), with the loader sampling ahead on its thread (``prefetch=1``, the default) and in
    the training loop (``prefetch=0``); median seconds per epoch (slowest rank), the loader's
    share of the batch step (the time the loop waits in ``__next__``: sampling, its id
    exchanges and the plan, or what prefetching did not hide of them), counted bytes per batch
    (``comm_counter``: halo + halo_grad vs the id exchanges sample / sample_counts / plan,
    summed over ranks) and the halo bytes predicted by (a)'s model for the same batches.
(c) PyG's single-process ``NeighborLoader`` (``num_workers`` 0 and 1) training the same model on
    the same graph with 2 threads (needs torch_sparse or pyg-lib: run in ``--pyg-python``, a separate process, one
    epoch per round between the distributed rounds; the row names the import error otherwise),
    and the package's own loader and model at P = 1 in one process of 2 threads; throughput =
    train seeds / epoch second.

    python benchmarks/minibatch_train.py [--quick] [--skip-train] [--skip-pyg] [--rounds 3]
    python benchmarks/minibatch_train.py --timing-only   # (b, c) alone, partitions at P = 4 only

HP and SHP use Mt-KaHyPar's ``default`` preset (``--preset``).  Partitions are cached under
``--cache`` (default ``benchmarks/.cache/minibatch_train``), keyed by the graph and the
partitioner's settings; their seconds are those of the run that made them.  Timing runs wait
while the file given as ``--quiet-flag`` exists (other jobs on the machine can hold it).
"""
import argparse
import hashlib
import os
import time
from pathlib import Path

import numpy as np
import torch
from _common import HERE, print_table, sparse_sbm_graph, write_section
from _minibatch_timing import LABEL, pyg_baseline, train
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.loader import NeighborSampling, NodeSubsetSampling, global_batches
from pyg_sparsecomm.partition.hypergraph import km1
from pyg_sparsecomm.partition.stochastic import HELD_OUT_EPOCH, batch_nets

METHODS = ("random", "metis", "hypergraph", "shp")
# bytes per row moved, per layer and direction, of distribute(GraphSAGE(F, 64, 2, C)) (see (a))
FP32 = 4


def widths(features: int, classes: int) -> tuple[int, int, int, int]:
    """(layer 1 fwd, layer 1 bwd, layer 2 fwd, layer 2 bwd) row widths of the model's exchanges."""
    return features, 0, classes, classes


# --- the graph --------------------------------------------------------------------------------

def make_graph(args) -> Data:
    data = sparse_sbm_graph(args.nodes, args.blocks, args.degree, args.p_in, seed=0)
    gen = torch.Generator().manual_seed(1)
    data.x = torch.randn(args.nodes, args.features, generator=gen)
    data.y = torch.randint(0, args.classes, (args.nodes,), generator=gen)
    data.train_mask = torch.rand(args.nodes, generator=gen) < args.train_frac
    return data


def samplers(args) -> dict[str, NeighborSampling | NodeSubsetSampling]:
    return {"neighbor": NeighborSampling(batch_size=args.batch_size, num_neighbors=tuple(args.fanouts)),
            "subset": NodeSubsetSampling(batch_size=args.subset_size)}


def graph_key(args) -> str:
    return (f"sbm{args.nodes}-b{args.blocks}-d{args.degree}-p{args.p_in}-f{args.features}-c{args.classes}"
            f"-t{args.train_frac}")


# --- waiting for a quiet machine ---------------------------------------------------------------

def wait_quiet(flag: str | None) -> None:
    waited = 0
    while flag and os.path.exists(flag):
        if waited == 0:
            print(f"  waiting: {flag} exists", flush=True)
        time.sleep(20)
        waited += 20
    if waited:
        print(f"  waited {waited} s", flush=True)


# --- partitions -------------------------------------------------------------------------------

def partition(data: Data, args, method: str, P: int, sampler: str | None = None) -> tuple[torch.Tensor, float]:
    """``(part, seconds)`` of one partition, from the cache when it holds it (``"shp4"``: SHP with
    the package's default ``edge_coverage=4``)."""
    options: dict = {"preset": args.preset} if method in ("hypergraph", "shp", "shp4") else {}
    name = method
    if method in ("shp", "shp4"):
        assert sampler is not None
        name = "stochastic_hypergraph"
        options.update(sampling=samplers(args)[sampler], input_nodes=data.train_mask,
                       edge_coverage=args.shp_edge_coverage if method == "shp" else 4.0)
    partitioner = SparsityAwarePartitioner(P, name, **options)
    key = hashlib.sha256(f"{graph_key(args)};{partitioner._settings()}".encode()).hexdigest()[:20]
    path = Path(args.cache) / f"{method}{'-' + sampler if sampler else ''}-P{P}-{key}.pt" if args.cache else None
    if path is not None and path.exists():
        saved = torch.load(path, weights_only=True)
        return saved["part"], float(saved["seconds"])
    t0 = time.perf_counter()
    part = partitioner(data).part
    seconds = time.perf_counter() - t0
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"part": part, "seconds": seconds}, path)
    print(f"  partitioned {method}{' (' + sampler + ')' if sampler else ''} P={P}: {seconds:.1f} s", flush=True)
    return part, seconds


# --- (a) simulated volumes --------------------------------------------------------------------

def held_out_nets(data: Data, spec, num_batches: int):
    """Per held-out batch: the column nets of layer 1 (every edge) and layer 2 (hop-1 edges of a
    neighbour batch; every edge of a node subset)."""
    src, dst = data.edge_index.numpy()
    nets, epoch = [], HELD_OUT_EPOCH
    while len(nets) < num_batches:
        drawn = global_batches(data.edge_index, data.num_nodes, spec, data.train_mask, epoch)
        for b in drawn[:num_batches - len(nets)]:
            e = b.e_id.numpy()
            outer = batch_nets(src, dst, e, data.num_nodes)
            inner = outer if b.num_sampled_edges is None else batch_nets(src, dst, e[:b.num_sampled_edges[0]],
                                                                          data.num_nodes)
            nets.append((outer, inner))
        epoch += 1
    return nets


def layer_rows(nets, part: torch.Tensor) -> tuple[float, float]:
    owner = part.numpy().astype(np.int64)
    rows = np.array([(km1(*outer, owner), km1(*inner, owner)) for outer, inner in nets], dtype=np.float64)
    return float(rows[:, 0].mean()), float(rows[:, 1].mean())


def batch_bytes(rows1: float, rows2: float, args) -> float:
    w1f, w1b, w2f, w2b = widths(args.features, args.classes)
    return FP32 * (rows1 * (w1f + w1b) + rows2 * (w2f + w2b))


def simulate(data: Data, args):
    headers = ["sampler", "P", "partition", "rows L1", "rows L2", "KB / batch", "vs random", "SHP / HP",
               "partition s"]
    rows, parts = [], {}
    for sname, spec in samplers(args).items():
        t0 = time.perf_counter()
        nets = held_out_nets(data, spec, args.eval_batches)
        print(f"  {sname}: {len(nets)} held-out batches in {time.perf_counter() - t0:.1f} s", flush=True)
        for P in args.parts:
            result = {}
            extra = ["shp4"] if sname == "subset" and P in args.subset_coverage_parts else []
            for method in [*METHODS, *extra]:
                sampler = sname if method.startswith("shp") else None
                part, seconds = partition(data, args, method, P, sampler)
                parts[(method, sampler, P)] = part
                r1, r2 = layer_rows(nets, part)
                result[method] = (r1, r2, batch_bytes(r1, r2, args), seconds)
            for method, (r1, r2, nbytes, seconds) in result.items():
                ratio = f"{nbytes / result['hypergraph'][2]:.3f}" if method.startswith("shp") else ""
                rows.append([sname, P, LABEL[method], f"{r1:.0f}", f"{r2:.0f}", f"{nbytes / 1e3:.1f}",
                             f"{nbytes / result['random'][2]:.3f}", ratio, f"{seconds:.1f}"])
                print(*rows[-1], sep="\t", flush=True)
    return headers, rows, parts


# --- (b) real P = 4 training -------------------------------------------------------------------

def predicted_halo_bytes(data: Data, args, parts: dict, epoch: int, num_batches: int) -> dict:
    """Halo + halo_grad bytes the model's exchanges move in ``num_batches`` batches of ``epoch``
    under each partition, from the batches' column nets ((a)'s model)."""
    spec = NeighborSampling(batch_size=args.batch_size, num_neighbors=tuple(args.fanouts), shuffle=True)
    src, dst = data.edge_index.numpy()
    out = dict.fromkeys(parts, 0.0)
    for b in global_batches(data.edge_index, data.num_nodes, spec, data.train_mask, epoch)[:num_batches]:
        e = b.e_id.numpy()
        assert b.num_sampled_edges is not None
        outer, inner = batch_nets(src, dst, e, data.num_nodes), batch_nets(src, dst, e[:b.num_sampled_edges[0]],
                                                                           data.num_nodes)
        for method, part in parts.items():
            owner = part.numpy().astype(np.int64)
            out[method] += batch_bytes(km1(*outer, owner), km1(*inner, owner), args)
    return out


# --- main -------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="65,536 nodes, P = 4, 16, 16 held-out batches, 1 round "
                   "of 24 batches; writes no RESULTS.md section")
    p.add_argument("--nodes", type=int, default=262144)
    p.add_argument("--degree", type=float, default=10.0)
    p.add_argument("--blocks", type=int, default=512)
    p.add_argument("--p-in", type=float, default=0.7)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--train-frac", type=float, default=0.5)
    p.add_argument("--parts", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    p.add_argument("--subset-size", type=int, default=20000)
    p.add_argument("--eval-batches", type=int, default=64)
    p.add_argument("--subset-coverage-parts", type=int, nargs="*", default=[16],
                   help="P at which node-subset SHP is also built with the package's edge_coverage=4")
    p.add_argument("--shp-edge-coverage", type=float, default=0.0,
                   help="SHP's edge_coverage: 0 (default here) = the paper's rule alone, epoch 0 grown to eq. (14); "
                        "the package's default is 4 (see stochastic_hypergraph_partition)")
    p.add_argument("--preset", default="default", help="Mt-KaHyPar preset of HP and SHP (the package's default, "
                   "'deterministic', took > 17 min for HP at P = 4 on the loaded 2 cores)")
    p.add_argument("--train-parts", type=int, default=4)
    p.add_argument("--train-methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3, help="untimed batches per partition and round")
    p.add_argument("--max-train-batches", type=int, default=1 << 30, help="timed batches per epoch (default all)")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-pyg", action="store_true")
    p.add_argument("--skip-single", action="store_true", help="no P = 1 run of the package's loader")
    p.add_argument("--pyg-python", default="/work/venv-bench/bin/python")
    p.add_argument("--pyg-threads", type=int, default=2)
    p.add_argument("--pyg-workers", type=int, nargs="+", default=[0, 1], help="NeighborLoader num_workers values")
    p.add_argument("--pyg-adj", default="edge_index", choices=["edge_index", "adj_t"], help=argparse.SUPPRESS)
    p.add_argument("--prefetch", type=int, nargs="+", default=[1, 0], help="the loader's prefetch values to time")
    p.add_argument("--timing-only", action="store_true", help="partition only P = --train-parts, time (b, c) and "
                   "write only their RESULTS.md section")
    p.add_argument("--cache", default=str(HERE / ".cache" / "minibatch_train"), help="partition cache ('' = none)")
    p.add_argument("--quiet-flag", default=None, help="wait before timing runs while this file exists")
    p.add_argument("--no-write", action="store_true", help="do not write the RESULTS.md section")
    p.add_argument("--pyg-baseline", help=argparse.SUPPRESS)
    p.add_argument("--pyg-epoch", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.parts, args.eval_batches = 65536, [4, 16], 16
        args.blocks, args.subset_size = 128, 5000
        args.rounds, args.max_train_batches, args.no_write = 1, 24, True
    if args.timing_only:
        args.parts, args.subset_coverage_parts = [args.train_parts], []
    if args.train_parts not in args.parts:
        args.parts = sorted({*args.parts, args.train_parts})
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.pyg_baseline:
        pyg_baseline(args)
        return
    t_start = time.perf_counter()
    data = make_graph(args)
    E = data.edge_index.size(1)
    print(f"graph: {data.num_nodes} nodes, {E} edges (average in-degree {E / data.num_nodes:.1f}), "
          f"{int(data.train_mask.sum())} train nodes", flush=True)
    sim_headers, sim_rows, parts = simulate(data, args)
    print_table(sim_headers, sim_rows)
    train_headers, train_rows = None, None
    if not args.skip_train:
        train_headers, train_rows, _, _ = train(data, args, parts, predicted_halo_bytes, wait_quiet)
        print_table(train_headers, train_rows)
    minutes = (time.perf_counter() - t_start) / 60
    print(f"total {minutes:.1f} min")
    if args.no_write:
        return
    write_results(args, data, sim_headers, sim_rows, train_headers, train_rows, minutes)


def _partition_seconds(sim_rows) -> dict:
    """Seconds of every distinct partition (random, METIS and HP appear under both samplers)."""
    return {(r[1], r[2], r[0] if r[2].startswith("SHP") else ""): float(r[-1]) for r in sim_rows}


def write_results(args, data, sim_headers, sim_rows, train_headers, train_rows, minutes) -> None:
    from _common import machine, markdown_table
    E = data.edge_index.size(1)
    fan = ", ".join(map(str, args.fanouts))
    body = ["## Distributed mini-batch training: volume and time per partition (issue #15)\n",
            f"`python benchmarks/minibatch_train.py` — machine: {machine()}; {minutes:.0f} min in all "
            f"(partitions from `--cache` when there: making them took the 'partition s' column, "
            f"{sum(_partition_seconds(sim_rows).values()) / 60:.0f} min).\n",
            f"Graph: sparse SBM, {data.num_nodes:,} nodes, {E:,} directed edges ({args.blocks} blocks, "
            f"{100 * args.p_in:.0f} % inside), {args.features} features, {args.classes} classes, "
            f"{int(data.train_mask.sum()):,} train nodes. Samplers: neighbour = {args.batch_size} train seeds, "
            f"fanouts [{fan}]; subset = ~{args.subset_size:,} random nodes + induced subgraph. SHP = "
            f"`stochastic_hypergraph` from that sampler's batches (edge_coverage={args.shp_edge_coverage:g}: "
            f"{'epoch 0 grown to eq. (14) alone' if not args.shp_edge_coverage else 'and that many |E| sampled'}, "
            f"θ = 0.1, δ = 0.5); HP = "
            f"full-graph column-net km1; both Mt-KaHyPar preset `{args.preset}`, ε = 0.03. Partition seconds "
            f"were measured while other jobs shared the 2 cores (indicative only).\n",
            f"(a) Simulated: mean over {args.eval_batches} held-out batches (another epoch than SHP's sample) "
            f"of each layer's rows (km1 of the batch's column nets; L2 = the trimmed hop-1 layer of a neighbour "
            f"batch). KB / batch = fp32 bytes of `distribute(GraphSAGE({args.features}, {args.hidden}, 2, "
            f"{args.classes}))`: L1 rows × {args.features} forward (the input needs no gradient) + L2 rows × "
            f"{args.classes} forward and backward (layer 2 applies its Linear before the exchange).\n",
            markdown_table(sim_headers, sim_rows)]
    if not args.timing_only:
        write_section("minibatch_train", "\n".join(body))
    if train_rows:
        write_section("minibatch_train_timing", timing_text(args, train_headers, train_rows))


def timing_text(args, headers, rows) -> str:
    from _common import machine, markdown_table
    cut = (f", {args.max_train_batches} timed batches per epoch (s / epoch extrapolated)"
           if args.max_train_batches < 1 << 30 else "")
    return "\n".join([
        f"## Distributed mini-batch training: measured at P = {args.train_parts} (issue #15)\n",
        f"`python benchmarks/minibatch_train.py{' --timing-only' if args.timing_only else ''}` — machine: "
        f"{machine()}.\n",
        f"(b, c) Measured: P = {args.train_parts} gloo ranks of 1 thread on the 2 cores (oversubscribed), per "
        f"round one epoch per partition and per `prefetch` value ({', '.join(map(str, args.prefetch))}: batches "
        f"sampled ahead on the loader's thread / in the training loop), {args.rounds} rounds rotating the "
        f"partitions (same batches per round), {args.warmup} warm-up batches"
        f"{cut}"
        f"; medians. s / epoch = the slowest rank; loader share = time the training loop waits in the loader's "
        f"`__next__` (sampling, id exchanges, plan; with prefetch = 1 only what the thread could not hide) / "
        f"batch step, mean over ranks; halo KB = counted halo + halo_grad bytes summed over ranks; round 0 "
        f"counted / predicted = those bytes of round 0 over (a)'s model on the same batches; id KB = sample + "
        f"sample_counts + plan. P = 1: `DistributedNeighborLoader` and the model on a 1-part shard in one "
        f"process of {args.pyg_threads} threads, one epoch after each round. PyG: `NeighborLoader` (torch_sparse "
        f"sampler; pyg-lib is not installable here) + the same GraphSAGE (trimmed), one process, "
        f"{args.pyg_threads} threads, `num_workers` {' and '.join(map(str, args.pyg_workers))}, in "
        f"`{args.pyg_python}`, one epoch after each distributed round.\n",
        markdown_table(headers, rows)])


if __name__ == "__main__":
    main()
