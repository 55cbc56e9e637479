"""Graph breaks and step time of ``torch.compile(distribute(model))`` (issue 57, item 6).

At P = 2 (gloo, 1 thread per rank) on a small SBM graph (:func:`pyg_sparsecomm.graph.datasets.sbm_graph`,
METIS), for 2-layer ``GCN``, ``GraphSAGE`` and ``GAT`` of ``torch_geometric.nn.models`` (hidden 64,
no dropout), each ``distribute()``\\ d:

* after the timed steps, ``torch._dynamo.explain(model)(x, adj)`` of the compiled model's module (its
  layers hold the steady-state records of ``nn/runtime/steady_call.py``, left by its first, eager,
  compiled step): the graph count, the graph-break count and the break reasons of the steady-state
  forward (rank 0);
* the training step (forward + loss + backward + gradient sync + SGD step) eager against
  ``torch.compile(model)`` (Inductor), each timed back to back in every round, median of rank 0
  over ``--rounds`` rounds after ``--warmup`` steps (the compiled ones compile there), and the
  median of the per-round ratios compiled / eager (a load swing of the shared machine cancels).
  Then the same after ``torch._dynamo.reset()`` (the whole forward one graph: ``whole``).

    python benchmarks/compile_layers.py [--nodes 4000] [--rounds 20] [--warmup 3] [--write]

``--write`` replaces the ``compile_layers_<label>`` section of ``RESULTS.md`` (``--label before``/``steady``).
"""
import argparse
import os
import time
import warnings

import torch
import torch._dynamo
import torch._inductor.config
import torch.distributed as dist
from _common import median, print_table, write_table_section
from torch._dynamo.utils import counters
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from pyg_sparsecomm import LossNormalisationWarning, SparsityAwarePartitioner, distribute, shard, sync_gradients
from pyg_sparsecomm.graph.datasets import sbm_graph
from pyg_sparsecomm.testing import launch

HIDDEN, CLASSES = 64, 8
MODELS = {"GCN": lambda f: GCN(f, HIDDEN, 2, CLASSES), "GraphSAGE": lambda f: GraphSAGE(f, HIDDEN, 2, CLASSES),
          "GAT": lambda f: GAT(f, HIDDEN // 2, 2, CLASSES, heads=2)}


def _graph(nodes: int):
    return SparsityAwarePartitioner(num_parts=2, method="metis")(sbm_graph(nodes, num_features=32))


def _build(name: str, features: int):
    torch.manual_seed(0)
    return distribute(MODELS[name](features))


def _step(model, opt, x, adj, y) -> float:
    t0 = time.perf_counter()
    opt.zero_grad()
    out = model(x, adj)
    torch.nn.functional.cross_entropy(out, y, reduction="sum").backward()
    sync_gradients(model)
    opt.step()
    return time.perf_counter() - t0


def _explain(model, x, adj) -> tuple[int, int, list[str]]:
    """``explain``'s graph and break counts and the breaks' reasons (dynamo's counters: a frame with a
    break inside a loop, as ``BasicGNN``'s, is skipped whole and ``explain`` then lists none and -1)."""
    torch._dynamo.reset()
    counters.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = torch._dynamo.explain(model)(x, adj)
    reasons = {str(getattr(b, "reason", b)).strip().splitlines()[0][:120] for b in report.break_reasons}
    reasons |= {str(k).strip().splitlines()[0][:120] for k in counters["graph_break"]}
    return report.graph_count, report.graph_break_count, sorted(reasons)


def _worker(rank: int, world_size: int, nodes: int, rounds: int, warmup: int):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)
    torch._inductor.config.compile_threads = 1  # the ranks share the machine's cores
    local = shard(_graph(nodes))  # built in every rank: tensors handed to the fork server failed here
    x, adj, y = local.x, local.adj, local.y
    results = {}
    for name in MODELS:
        eager, compiled_model = _build(name, x.size(1)), _build(name, x.size(1))
        for _ in range(warmup):  # steady state: first-call checks done
            _step(eager, torch.optim.SGD(eager.parameters(), lr=0.0), x, adj, y)
        torch._dynamo.reset()
        compiled = torch.compile(compiled_model)
        opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in (("eager", eager), ("compiled", compiled))}
        times: dict[str, list[float]] = {"eager": [], "compiled": [], "eager 2": [], "whole": []}
        for phase, timed in (("eager", "compiled"), ("eager 2", "whole")):
            for _ in range(warmup):  # "whole": dynamo traces the forward again, with the records in place
                _step(compiled, opts["compiled"], x, adj, y)
            for _ in range(rounds):
                dist.barrier()
                times[phase].append(_step(eager, opts["eager"], x, adj, y))
                dist.barrier()
                times[timed].append(_step(compiled, opts["compiled"], x, adj, y))
            torch._dynamo.reset()
        results[name] = _explain(compiled_model, x, adj), times
        torch._dynamo.reset()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--label", default="before")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    out = launch(_worker, 2, args.nodes, args.rounds, args.warmup, timeout=3000)[0]
    load_after = os.getloadavg()[0]
    headers = ["model", "graphs", "graph breaks", "break reasons", "eager ms", "compiled ms",
               "compiled / eager (median of per-round ratios)", "whole-forward graph ms", "whole / eager"]
    rows = []
    for name, ((graphs, breaks, reasons), times) in out.items():
        ratios = [c / e for e, c in zip(times["eager"], times["compiled"], strict=True)]
        whole = [c / e for e, c in zip(times["eager 2"], times["whole"], strict=True)]
        rows.append([name, graphs, breaks, "; ".join(reasons) or "-", f"{1e3 * median(times['eager']):.1f}",
                     f"{1e3 * median(times['compiled']):.1f}", f"{median(ratios):.3f}",
                     f"{1e3 * median(times['whole']):.1f}", f"{median(whole):.3f}"])
    print_table(headers, rows)
    print(f"load average (1 min) before / after: {load_before:.2f} / {load_after:.2f}")
    if args.write:
        notes = (f"SBM graph ({args.nodes} nodes, 32 features), METIS, P = 2 (gloo, 1 thread per rank), 2-layer "
                 f"models (hidden 64, GAT 2 heads of 32), SGD; graphs / breaks / reasons: "
                 f"`torch._dynamo.explain(model)(x, adj)` of rank 0, the compiled model's module after its steps "
                 f"(its layers' steady-state records left); times: "
                 f"rank 0's step (forward, loss, backward, gradient sync, SGD) over {args.rounds} rounds of one "
                 f"eager and one compiled step back to back, after {args.warmup} warm-up steps (the first runs each "
                 f"layer eagerly and leaves its record, after which the model's forward is traced again as one "
                 f"graph: nn/runtime/outer_frames.py); whole: "
                 f"the same after torch._dynamo.reset() and {args.warmup} more warm-up steps (the forward one "
                 f"graph), against eager steps of the same rounds.  Load average "
                 f"(1 min) before / after: {load_before:.2f} / {load_after:.2f} (a shared 2-core machine).")
        write_table_section(f"compile_layers_{args.label}", f"torch.compile of distributed layers ({args.label})",
                            "compile_layers.py", notes, headers, rows)


if __name__ == "__main__":
    main()
