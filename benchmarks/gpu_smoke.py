"""The first run on a GPU machine: every distributed path against single-process PyG, one table.

    torchrun --standalone --nproc-per-node N benchmarks/gpu_smoke.py               # N GPUs (1..8), NCCL
    torchrun --standalone --nproc-per-node 2 benchmarks/gpu_smoke.py --device cpu  # dry run: CPU, gloo

Every check runs a distributed computation and the same computation in one process with plain PyG
on the whole graph on the same device (rank 0 computes the reference; ``--reference-device lazy``
puts it on PyTorch's lazy-tensor device instead, so that on CPUs too a tensor of the reference
mixed into the shards' or the host's fails), and reports the largest absolute difference over the
outputs, the input gradients (summed over ranks) and the parameter gradients (after
``sync_gradients``), one row per check as soon as it completes:

* ``algorithm=<name>``: ``DistributedGCNConv`` with every SpMM algorithm (``"1.5d"`` on a
  ``P/c x c`` grid, ``c = 2`` when 4 divides ``P``, else 1; ``"rdma"`` on PyG symmetric memory, CUDA only);
* ``distribute(<model>)``: PyG's ``GCN``, ``GraphSAGE``, ``GAT``, ``GIN`` through ``distribute``;
* ``minibatch prefetch``: ``DistributedNeighborLoader(prefetch=1)`` batches through a distributed
  GraphSAGE vs PyG on the same batches (``global_batches``), every seed's output;
* ``stale p2p, isolated part``: ``staleness=1`` with ``"1d_overlap_p2p"`` on a partition whose
  last part has no edge (that rank exchanges nothing): step 0 (exact) and evaluation after a
  stale step;
* ``int8 halos``: ``halo_precision="int8"`` (inexact: the tolerance is 5 % of the output scale).

The graph is directed, with isolated nodes, self-loops and edge weights.  Times are of the
distributed forward + backward (mini-batches: the epoch's forward passes), the slowest rank,
from CUDA events on GPUs (``Stopwatch``), the host clock on CPUs.  Exits with status 1 if any
check exceeds its tolerance.
"""
import argparse
import copy
import importlib
import sys
import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GAT, GCN, GIN, GCNConv, GraphSAGE

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, distribute, shard, sync_gradients
from pyg_sparsecomm.comm.counters import Stopwatch
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.launch.runtime import distributed_job
from pyg_sparsecomm.loader import DistributedNeighborLoader
from pyg_sparsecomm.nn.gradient_sync import LossNormalisationWarning
from pyg_sparsecomm.sampling.rules import NeighborSampling, global_batches

FEATURES, OUT, HIDDEN, TOL = 8, 4, 16, 1e-4
HEADERS = ["check", "max diff", "tolerance", "ms", "result"]


def make_graph(num_nodes: int, seed: int = 0) -> Data:
    """Directed random edges over the first 90 % of the nodes (the rest isolated), a few
    self-loops, positive edge weights, features and a training mask."""
    gen = torch.Generator().manual_seed(seed)
    linked = max(int(num_nodes * 0.9), 2)
    ei = torch.randint(linked, (2, 4 * num_nodes), generator=gen)
    ei = torch.cat([ei[:, ei[0] != ei[1]], torch.arange(0, linked, 7).repeat(2, 1)], dim=1)
    return Data(x=torch.randn(num_nodes, FEATURES, generator=gen), edge_index=ei, num_nodes=num_nodes,
                edge_weight=torch.rand(ei.size(1), generator=gen) + 0.5,
                train_mask=torch.rand(num_nodes, generator=gen) < 0.5)


def isolated_part(data: Data, parts: int) -> Data:
    """``data`` with the isolated nodes as the last part (no row to send or receive there)."""
    out = copy.copy(data)
    has_edge = torch.zeros(data.num_nodes, dtype=torch.bool)
    has_edge[data.edge_index.flatten()] = True
    out.part = torch.where(has_edge, torch.arange(data.num_nodes) % max(parts - 1, 1), parts - 1)
    out.num_parts = parts
    return out


class Devices(NamedTuple):
    """Where the shards and distributed modules run, and where the single-process reference runs
    (the same device in a real run; ``--reference-device`` puts the reference elsewhere)."""
    shards: torch.device
    reference: torch.device


def on(device: torch.device, data: Data) -> Data:
    """A copy of ``data`` on ``device``.  PyG's ``Data.to`` moves in place, and ``data`` is every
    check's input on the host: moving it would leave the next check indexing host tensors with
    device ids."""
    return copy.copy(data).to(device)


def upstream(n: int) -> Tensor:
    return torch.randn(n, OUT, generator=torch.Generator().manual_seed(7))


def run_pass(module: torch.nn.Module, x: Tensor, call: Callable, weight: Tensor, device) -> tuple:
    """Forward and backward of ``sum(call(module, x) * weight)``: (y, x.grad, param grads, seconds)."""
    module.zero_grad()
    x = x.detach().clone().requires_grad_()
    watch = Stopwatch()
    with watch.measure(device):
        y = call(module, x)
        (y * weight).sum().backward()
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return y.detach(), x.grad, grads, watch


def full_pass_check(rank, devices: Devices, data, local, reference, distributed, call_ref, call_dist,
                    train_step: Callable | None = None) -> dict:
    """One forward/backward of ``distributed`` on the shard vs ``reference`` on the whole graph
    (``call_ref(module, x, whole)``, ``whole`` the graph on the reference's device), compared on the host."""
    U = upstream(data.num_nodes)
    mask = getattr(local, "owner_mask", None)
    weight = U.to(devices.shards)[local.n_id] * (1 if mask is None else mask.view(-1, 1))
    y, gx, grads, watch = run_pass(distributed, local.x, call_dist, weight, devices.shards)
    sync_gradients(distributed)
    grads = [p.grad.clone().cpu() for p in distributed.parameters() if p.grad is not None]  # before train_step
    extra = train_step(distributed) if train_step else None
    parts = gather({"n_id": local.n_id.cpu(), "y": y.cpu(), "gx": gx.cpu(), "extra": extra})
    seconds = max_over_ranks(watch.seconds)
    if rank != 0:
        return {}
    whole = on(devices.reference, data)
    ref_y, ref_gx, ref_grads, _ = run_pass(reference, whole.x, lambda m, x: call_ref(m, x, whole),
                                           U.to(devices.reference), devices.reference)
    ref_y, ref_gx = ref_y.cpu(), ref_gx.cpu()
    gx_sum = torch.zeros_like(ref_gx)
    diff = 0.0
    for p in parts:
        diff = max(diff, (p["y"] - ref_y[p["n_id"]]).abs().max().item() if p["n_id"].numel() else 0.0)
        gx_sum.index_add_(0, p["n_id"], p["gx"] * 1.0)
    diff = max(diff, (gx_sum - ref_gx).abs().max().item())  # 1.5D: summed over the replicas
    diff = max([diff] + [(a - b.cpu()).abs().max().item() for a, b in zip(grads, ref_grads, strict=True)])
    if train_step:
        with torch.no_grad():
            reference.eval()
            ref_eval = call_ref(reference, whole.x, whole).cpu()
        diff = max([diff] + [(p["extra"] - ref_eval[p["n_id"]]).abs().max().item() for p in parts
                             if p["n_id"].numel()])
    return {"diff": diff, "ms": seconds * 1e3, "scale": ref_y.abs().max().item()}


def gather(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def max_over_ranks(value: float) -> float:
    return max(gather(value))


def gcn_pair(devices: Devices, algorithm: str, replication: int = 1, **options) -> tuple:
    """PyG's ``GCNConv`` on the reference device and a ``DistributedGCNConv`` with its parameters."""
    torch.manual_seed(1)
    ref = GCNConv(FEATURES, OUT)
    torch.nn.init.normal_(ref.bias)
    dist_conv = DistributedGCNConv(FEATURES, OUT, algorithm=algorithm, replication=replication, **options)
    dist_conv.load_state_dict(ref.state_dict())
    return ref.to(devices.reference), dist_conv.to(devices.shards)


def weighted(m, x, whole):
    return m(x, whole.edge_index, whole.edge_weight)


def algorithm_check(rank, world_size, devices: Devices, data, algorithm: str, **options) -> dict:
    c = 2 if algorithm.startswith("1.5d") and world_size % 4 == 0 else 1  # P / c² block products
    parts = data if c == 1 else SparsityAwarePartitioner(world_size // c, method="random", seed=1)(data)
    local = shard(parts, grid=process_grid(c) if algorithm.startswith("1.5d") else None).to(devices.shards)
    ref, conv = gcn_pair(devices, algorithm, c, **options)
    return full_pass_check(rank, devices, data, local, ref, conv, weighted,
                           lambda m, x: m(x, local.adj, local.edge_weight))


def model_check(rank, world_size, devices: Devices, data, name: str) -> dict:
    torch.manual_seed(2)
    model = {"GCN": GCN, "GraphSAGE": GraphSAGE, "GAT": GAT, "GIN": GIN}[name](FEATURES, HIDDEN, 2, OUT)
    distributed = distribute(copy.deepcopy(model)).to(devices.shards)  # Module.to is in place too
    local = shard(data).to(devices.shards)
    return full_pass_check(rank, devices, data, local, model.to(devices.reference), distributed,
                           lambda m, x, whole: m(x, whole.edge_index),
                           lambda m, x: m(x, local.adj.with_value(None)))  # unweighted, as edge_index


def stale_check(rank, world_size, devices: Devices, data) -> dict:
    """Step 0 of ``staleness=1`` is exact; after a stale step, evaluation is exact again."""
    local = shard(isolated_part(data, world_size)).to(devices.shards)
    ref, conv = gcn_pair(devices, "1d_overlap_p2p", staleness=1)

    def stale_step_then_eval(module):
        module(local.x, local.adj, local.edge_weight).sum().backward()  # step 1: stale halos
        module.eval()
        with torch.no_grad():
            return module(local.x, local.adj, local.edge_weight).cpu()
    return full_pass_check(rank, devices, data, local, ref, conv, weighted,
                           lambda m, x: m(x, local.adj, local.edge_weight), train_step=stale_step_then_eval)


def minibatch_check(rank, world_size, devices: Devices, data) -> dict:
    """Every seed's output of one epoch of prefetched neighbour batches vs PyG on the same batches
    (sampled and indexed on the host, from ``data``, which no check moves)."""
    local = shard(data).to(devices.shards)
    torch.manual_seed(3)
    model = GraphSAGE(FEATURES, HIDDEN, 2, OUT).eval()
    distributed = distribute(copy.deepcopy(model)).to(devices.shards).eval()
    loader = DistributedNeighborLoader(local, [4, 3], batch_size=16, input_nodes=local.train_mask, prefetch=1)
    loader.set_epoch(0)
    seeds, outs, watch = [], [], Stopwatch()
    with torch.no_grad(), watch.measure(devices.shards):
        for batch in loader:
            s = batch.batch_size
            outs.append(distributed(batch.x, batch.adj)[:s].cpu())
            seeds.append(batch.n_id[:s].cpu())
    parts = gather((torch.cat(seeds), torch.cat(outs)))
    seconds = max_over_ranks(watch.seconds)
    if rank != 0:
        return {}
    model.to(devices.reference)
    sampling = NeighborSampling(batch_size=16, shuffle=False, seed=0, num_neighbors=(4, 3))
    ref = torch.full((data.num_nodes, OUT), float("nan"))
    position = torch.full((data.num_nodes,), -1, dtype=torch.long)
    with torch.no_grad():
        for b in global_batches(data.edge_index, data.num_nodes, sampling, data.train_mask, epoch=0):
            position[b.n_id] = torch.arange(b.n_id.numel())
            edge_index = position[data.edge_index[:, b.e_id]]
            out = model(data.x[b.n_id].to(devices.reference), edge_index.to(devices.reference))
            ref[b.n_id[:b.num_seeds]] = out[:b.num_seeds].cpu()
    got_ids = torch.cat([p[0] for p in parts])
    if sorted(got_ids.tolist()) != torch.nonzero(~ref[:, 0].isnan()).flatten().tolist():
        return {"diff": float("inf"), "ms": seconds * 1e3, "scale": 1.0}  # other seeds than PyG's
    diff = max((p[1] - ref[p[0]]).abs().max().item() for p in parts if p[0].numel())
    return {"diff": diff, "ms": seconds * 1e3, "scale": ref.nan_to_num().abs().max().item()}


def rdma_unavailable(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "CPU: the MPI backend needs mpiexec; --device cuda runs it on symmetric memory"
    from pyg_sparsecomm.rdma.symm_backend import check_symmetric_memory_available
    try:
        check_symmetric_memory_available(device)
    except RuntimeError as e:
        return str(e)
    return None


def checks(device: torch.device) -> list[tuple[str, Callable, str | None, float | None]]:
    """``(name, run, reason skipped, relative tolerance)``; ``None`` tolerance: absolute ``TOL``."""
    from pyg_sparsecomm.algorithms import ALGORITHMS
    out: list[tuple[str, Callable, str | None, float | None]] = []
    for name in ALGORITHMS:
        reason = rdma_unavailable(device) if name == "rdma" else None
        out.append((f"algorithm={name}", lambda r, P, d, g, n=name: algorithm_check(r, P, d, g, n), reason, None))
    for model in ("GCN", "GraphSAGE", "GAT", "GIN"):
        out.append((f"distribute({model})", lambda r, P, d, g, m=model: model_check(r, P, d, g, m), None, None))
    out.append(("minibatch prefetch", minibatch_check, None, None))
    out.append(("stale p2p, isolated part", stale_check, None, None))
    out.append(("int8 halos", lambda r, P, d, g: algorithm_check(r, P, d, g, "1d", halo_precision="int8"),
                None, 0.05))
    return out


def reference_device(name: str | None, device: torch.device) -> torch.device:
    """The reference's device: ``device`` by default; ``"lazy"`` is PyTorch's lazy-tensor device
    (TorchScript backend, computing on the CPU), a second device on a machine without GPUs."""
    if name is None:
        return device
    if name == "lazy":
        importlib.import_module("torch._lazy.ts_backend").init()
    return torch.device(name)


def print_row(cells: list, widths: list[int]) -> None:
    """One line of the table, at once: a run that crashes later has printed the rows before."""
    print("  ".join(str(c).rjust(w) for c, w in zip(cells, widths, strict=True)), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reference-device", choices=["cuda", "cpu", "lazy"], default=None,
                        help="where rank 0 runs the single-process PyG reference (default: --device); the test "
                             "suite's CPU run uses 'lazy', so that mixing the two devices fails on CPUs too")
    parser.add_argument("--nodes", type=int, default=400)
    args = parser.parse_args(argv)
    # the checks back-propagate sums (sum(y * weight)), not means: each rank's share is exact as it is
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)
    failed = False
    with distributed_job("gloo" if args.device == "cpu" else None) as (rank, world_size, device):
        devices = Devices(device, reference_device(args.reference_device, device))
        data = SparsityAwarePartitioner(world_size, method="random", seed=1)(make_graph(args.nodes))
        todo = checks(device)
        widths = [max(len(name) for name, *_ in todo), 9, 9, 9, 8]
        if rank == 0:
            print(f"gpu_smoke: P={world_size}, device {device} ({dist.get_backend()}), reference on "
                  f"{devices.reference}, {args.nodes} nodes", flush=True)
            print_row(HEADERS, widths)
        for name, run, reason, rel in todo:
            if reason is not None:
                if rank == 0:
                    print_row([name, "-", "-", "-", f"skipped: {reason}"], widths)
                continue
            res = run(rank, world_size, devices, data)
            if rank == 0:
                tol = TOL * max(1.0, res["scale"]) if rel is None else rel * res["scale"]
                ok = res["diff"] <= tol
                failed |= not ok
                print_row([name, f"{res['diff']:.3g}", f"{tol:.3g}", f"{res['ms']:.2f}", "ok" if ok else "MISMATCH"],
                          widths)
        failed = bool(gather(failed)[0])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
