"""Parts (b) and (c) of ``minibatch_train.py``: measured mini-batch training.

(b) real gloo ranks training ``distribute(GraphSAGE)`` on ``DistributedNeighborLoader`` batches
per partition, with the loader sampling ahead on its thread (``prefetch=1``, the default) and
in the training loop's thread (``prefetch=0``); (c) the same loader and model in one process
(P = 1) and PyG's single-process ``NeighborLoader`` (``num_workers`` 0 and 1) in
``--pyg-python``.  Loader share = the time the training loop waits in the loader's
``__next__`` over the batch step (with prefetching: the sampling it could not hide).
"""
import copy
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import HERE, median
from torch_geometric.data import Data

LABEL = {"random": "random", "metis": "METIS", "hypergraph": "HP", "shp": "SHP", "shp4": "SHP, edge_coverage=4"}
HEADERS = ["run", "partition", "prefetch", "s / epoch", "batches", "loader share", "seeds / s", "halo KB / batch",
           "round 0 counted / predicted", "id KB / batch", "vs HP s"]
ID_KINDS = ("sample", "sample_counts", "plan")


def model_of(args):
    from torch_geometric.nn.models import GraphSAGE
    torch.manual_seed(0)
    return GraphSAGE(args.features, args.hidden, 2, args.classes)


def timed_batches(loader, step, max_batches: int, seeds_of) -> dict:
    """Runs ``step`` on up to ``max_batches`` batches of one epoch of ``loader``; the seconds the
    loop waited in the loader (``__next__``) and spent in the steps, apart."""
    load = compute = 0.0
    batches = seeds = 0
    start = time.perf_counter()
    it = iter(loader)
    while batches < max_batches:
        t0 = time.perf_counter()
        batch = next(it, None)
        t1 = time.perf_counter()
        if batch is None:
            break
        step(batch)
        load, compute, batches = load + t1 - t0, compute + time.perf_counter() - t1, batches + 1
        seeds += seeds_of(batch)
    return {"wall": time.perf_counter() - start, "load": load, "compute": compute, "batches": batches,
            "seeds": seeds}


def _train_worker(rank, world_size, roots, order, epoch, args):
    import torch.distributed as dist

    from pyg_sparsecomm import comm_counter, distribute, load_shard, sync_gradients
    from pyg_sparsecomm.loader import DistributedNeighborLoader
    out = {}
    counter = comm_counter()
    for method in order:
        local = load_shard(roots[method])
        for prefetch in args.prefetch:
            model = distribute(model_of(args))
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
            loader = DistributedNeighborLoader(local, list(args.fanouts), batch_size=args.batch_size,
                                               input_nodes=local.train_mask, shuffle=True, prefetch=prefetch)

            def step(batch):
                optimizer.zero_grad()
                y = model(batch.x, batch.adj, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                          num_sampled_edges_per_hop=batch.num_sampled_edges)
                loss = F.cross_entropy(y[:batch.batch_size], batch.y[:batch.batch_size], reduction="sum")
                (loss / batch.global_batch_size).backward()
                sync_gradients(model)
                optimizer.step()

            loader.set_epoch(epoch + 10_000)  # warm-up batches, from an epoch not timed
            for i, batch in enumerate(loader):
                if i >= args.warmup:
                    break
                step(batch)
            loader.set_epoch(epoch)
            if world_size > 1:
                dist.barrier()
            counter.reset()
            timed = timed_batches(loader, step, args.max_train_batches, lambda b: b.global_batch_size)
            nbytes = {k: counter.bytes_sent(k) for k in ("halo", "halo_grad", *ID_KINDS)}
            out[(method, prefetch)] = {**timed, "epoch_batches": len(loader), "bytes": nbytes}
            del loader
    return out


def _pyg_epoch(args, graph_path: str, epoch: int, workers: int, adj: str) -> dict:
    """One timed epoch of PyG's NeighborLoader (after warm-up) in ``--pyg-python``."""
    cmd = [args.pyg_python, str(HERE / "minibatch_train.py"), "--pyg-baseline", graph_path, "--pyg-epoch", str(epoch),
           "--pyg-workers", str(workers), "--pyg-adj", adj, "--warmup", str(args.warmup), "--max-train-batches",
           str(args.max_train_batches), "--batch-size", str(args.batch_size), "--fanouts", *map(str, args.fanouts),
           "--hidden", str(args.hidden), "--features", str(args.features), "--classes", str(args.classes),
           "--pyg-threads", str(args.pyg_threads)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pyg_baseline(args) -> None:
    """``--pyg-baseline GRAPH``: one epoch of PyG's NeighborLoader + GraphSAGE; prints JSON."""
    torch.set_num_threads(args.pyg_threads)
    try:
        from torch_geometric.loader import NeighborLoader
        data = Data(**torch.load(args.pyg_baseline, weights_only=True))
        workers = args.pyg_workers[0]
        loader = NeighborLoader(data, num_neighbors=list(args.fanouts), batch_size=args.batch_size,
                                input_nodes=data.train_mask, shuffle=True, num_workers=workers,
                                persistent_workers=workers > 0,
                                transform=with_adj_t if args.pyg_adj == "adj_t" else with_hops)
        torch.manual_seed(args.pyg_epoch)
        it = iter(loader)
        next(it)  # raises here if neither torch_sparse nor pyg-lib is importable
    except Exception as e:  # noqa: BLE001 - reported in the table
        reason = f"{type(e).__name__}: {e}"
        try:
            import torch_sparse  # noqa: F401
        except Exception as why:  # noqa: BLE001 - why torch_sparse is unusable, if it is
            reason += f" (import torch_sparse: {type(why).__name__}: {why})"
        print(json.dumps({"error": reason}))
        return
    model = model_of(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step(batch):
        optimizer.zero_grad()
        nodes, edges = batch.hops
        graph = batch.adj_t if args.pyg_adj == "adj_t" else batch.edge_index
        y = model(batch.x, graph, num_sampled_nodes_per_hop=nodes, num_sampled_edges_per_hop=edges)
        F.cross_entropy(y[:batch.batch_size], batch.y[:batch.batch_size]).backward()
        optimizer.step()

    for i, batch in enumerate(it):
        if i >= args.warmup:
            break
        step(batch)
    timed = timed_batches(loader, step, args.max_train_batches, lambda b: b.batch_size)
    print(json.dumps({**timed, "epoch_batches": len(loader)}))


def sampled_per_hop(batch) -> tuple[list[int], list[int]]:
    """A 2-hop NeighborLoader batch's nodes and edges per hop, for PyG's ``trim_to_layer``.

    pyg-lib's sampler returns them; torch_sparse's (the one installable here) does not, but its
    output is in hop order (seeds, then each hop's new nodes; hop-1 edges, then hop-2 edges),
    so they follow from where the edges into the seeds end; checked, not assumed."""
    if getattr(batch, "num_sampled_nodes", None) is not None:
        return batch.num_sampled_nodes, batch.num_sampled_edges
    src, dst = batch.edge_index
    into_seeds = dst < batch.batch_size
    e1 = int(into_seeds.sum())
    if not bool(into_seeds[:e1].all()):
        raise RuntimeError("NeighborLoader's edges are not in hop order: cannot trim")
    n1 = max(int(src[:e1].max()) + 1 if e1 else 0, batch.batch_size)
    if e1 < src.numel() and int(dst[e1:].min()) < batch.batch_size:
        raise RuntimeError("NeighborLoader's hop-2 edges point into seeds: cannot trim")
    return [batch.batch_size, n1 - batch.batch_size, batch.num_nodes - n1], [e1, src.numel() - e1]


def with_hops(batch):
    """NeighborLoader transform: the hop counts PyG's ``trim_to_layer`` needs."""
    batch.hops = sampled_per_hop(batch)
    return batch


def with_adj_t(batch):
    """NeighborLoader transform: hop counts and the transposed ``SparseTensor`` PyG's fastest
    CPU path multiplies (its ``trim_to_layer`` trims those too)."""
    from torch_sparse import SparseTensor
    batch = with_hops(batch)
    (src, dst), n = batch.edge_index, batch.num_nodes
    batch.adj_t = SparseTensor(row=dst, col=src, sparse_sizes=(n, n))
    del batch.edge_index
    return batch


def _save_roots(data: Data, chosen: dict, P: int, tmp: str) -> tuple[dict, str, str]:
    from pyg_sparsecomm import save_partition
    roots = {}
    for method, part in chosen.items():
        roots[method] = str(Path(tmp) / method)
        partitioned = copy.copy(data)
        partitioned.part, partitioned.num_parts = part, P
        save_partition(partitioned, roots[method])
    single = str(Path(tmp) / "single")  # the same loader and model in one process (P = 1)
    whole = copy.copy(data)
    whole.part, whole.num_parts = torch.zeros(data.num_nodes, dtype=torch.long), 1
    save_partition(whole, single)
    graph_path = str(Path(tmp) / "graph.pt")
    torch.save({"edge_index": data.edge_index, "x": data.x, "y": data.y, "train_mask": data.train_mask,
                "num_nodes": data.num_nodes}, graph_path)
    return roots, single, graph_path


def _rounds(args, roots: dict, single: str, graph_path: str, wait_quiet) -> tuple[dict, dict, dict]:
    from pyg_sparsecomm.testing import launch
    P, methods = args.train_parts, list(roots)
    runs: dict = {}
    variants = [(w, "edge_index") for w in args.pyg_workers] + [(0, "adj_t")]
    pyg: dict = {v: [] for v in variants}
    ones: dict = {}
    for r in range(args.rounds):
        order = methods[r % len(methods):] + methods[:r % len(methods)]  # rotate: no partition always first
        wait_quiet(args.quiet_flag)
        per_rank = launch(_train_worker, P, roots, order, r, args, timeout=7200, threads=1)
        for key in per_rank[0]:
            runs.setdefault(key, []).append(
                {"wall": max(pr[key]["wall"] for pr in per_rank), "load": sum(pr[key]["load"] for pr in per_rank) / P,
                 "compute": sum(pr[key]["compute"] for pr in per_rank) / P, "batches": per_rank[0][key]["batches"],
                 "seeds": per_rank[0][key]["seeds"], "epoch_batches": per_rank[0][key]["epoch_batches"],
                 "bytes": {k: sum(pr[key]["bytes"][k] for pr in per_rank) for k in per_rank[0][key]["bytes"]}})
        print(f"  round {r}: " + ", ".join(f"{m}/{pf} {runs[(m, pf)][-1]['wall']:.1f} s"
                                          for m in methods for pf in args.prefetch), flush=True)
        for workers, adj in ([] if args.skip_pyg else variants):
            wait_quiet(args.quiet_flag)
            pyg[(workers, adj)].append(_pyg_epoch(args, graph_path, r, workers, adj))
            print(f"  round {r}: PyG {adj} num_workers={workers} {pyg[(workers, adj)][-1]}", flush=True)
        if not args.skip_single:
            wait_quiet(args.quiet_flag)
            result = launch(_train_worker, 1, {"single": single}, ["single"], r, args, timeout=7200,
                            threads=args.pyg_threads)[0]
            for key, value in result.items():
                ones.setdefault(key, []).append(value)
            print(f"  round {r}: P=1 " + ", ".join(f"prefetch {k[1]}: {v[-1]['wall']:.1f} s" for k, v in ones.items()),
                  flush=True)
    return runs, ones, pyg


def _epoch_seconds(runs: list[dict]) -> float:
    """A full epoch's wall time (extrapolated when --max-train-batches cut it short), median."""
    return median([x["wall"] * x["epoch_batches"] / x["batches"] for x in runs])


def _share_and_rate(runs: list[dict]) -> tuple[str, str]:
    share = median([x["load"] / (x["load"] + x["compute"]) for x in runs])
    return f"{100 * share:.0f} %", f"{median([x['seeds'] / x['wall'] for x in runs]):.0f}"


def train(data: Data, args, parts: dict, predicted_halo_bytes, wait_quiet):
    """(b) and (c): the table rows (``HEADERS``) and the raw runs."""
    P = args.train_parts
    chosen = {m: parts[(m, "neighbor" if m == "shp" else None, P)] for m in args.train_methods}
    with tempfile.TemporaryDirectory(prefix="minibatch_train") as tmp:
        roots, single, graph_path = _save_roots(data, chosen, P, tmp)
        runs, ones, pyg = _rounds(args, roots, single, graph_path, wait_quiet)
    first = (args.train_methods[0], args.prefetch[0])
    predicted = predicted_halo_bytes(data, args, chosen, 0, runs[first][0]["batches"])
    hp = {pf: _epoch_seconds(runs[("hypergraph", pf)]) for pf in args.prefetch if ("hypergraph", pf) in runs}
    rows = []
    for (m, pf), rs in runs.items():
        wall, nb = _epoch_seconds(rs), rs[0]["batches"]
        halo = median([(x["bytes"]["halo"] + x["bytes"]["halo_grad"]) / x["batches"] for x in rs])
        ids = median([sum(x["bytes"][k] for k in ID_KINDS) / x["batches"] for x in rs])
        counted = (rs[0]["bytes"]["halo"] + rs[0]["bytes"]["halo_grad"]) / predicted[m]
        rows.append([f"P={P} gloo, 1 thread/rank", LABEL[m], pf, f"{wall:.1f}", nb, *_share_and_rate(rs),
                     f"{halo / 1e3:.1f}", f"{counted:.4f}", f"{ids / 1e3:.1f}",
                     f"{wall / hp[pf]:.3f}" if pf in hp else ""])
    for (_, pf), rs in ones.items():
        rows.append([f"P=1, 1 process, {args.pyg_threads} threads (same loader and model)", "-", pf,
                     f"{_epoch_seconds(rs):.1f}", rs[0]["batches"], *_share_and_rate(rs), "0", "-",
                     f"{sum(rs[0]['bytes'].values()) / 1e3:.1f}", ""])
    for (workers, adj), results in pyg.items():
        ok = [x for x in results if "error" not in x]
        if ok:
            rows.append([f"PyG NeighborLoader + {adj}, 1 process, {args.pyg_threads} threads, num_workers={workers}",
                         "-",
                         "-", f"{_epoch_seconds(ok):.1f}", ok[0]["batches"], *_share_and_rate(ok), "-", "-", "-", ""])
        elif results:
            rows.append([f"PyG NeighborLoader: {results[0]['error']}"] + [""] * (len(HEADERS) - 1))
    return HEADERS, rows, runs, pyg
