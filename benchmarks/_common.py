"""Shared helpers of the benchmark scripts: graph loading, medians, RESULTS.md sections."""
import os
import platform
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
GRAPHS = HERE / "graphs"
PLANETOID = HERE.parent.parent / "shared" / "data" / "planetoid"
MESHES = ("mdual", "copter2", "4elt")


def load_graph(name: str):
    """Cora/CiteSeer (raw files copied to a temp root, no download) or a libmetis mesh."""
    if name in ("Cora", "CiteSeer"):
        import torch_geometric.transforms as T
        from torch_geometric.datasets import Planetoid
        root = Path(tempfile.mkdtemp(prefix="planetoid"))
        shutil.copytree(Path(os.environ.get("PLANETOID_RAW", PLANETOID)) / name / "raw", root / name / "raw")
        return Planetoid(str(root), name, transform=T.NormalizeFeatures())[0]
    path = GRAPHS / f"{name}.graph"
    if not path.exists():
        raise SystemExit(f"{path} missing: run benchmarks/fetch_meshes.sh first")
    from pyg_sparsecomm.graph.io import read_metis_graph
    return read_metis_graph(path)


def sparse_sbm_graph(num_nodes: int, num_blocks: int, degree: float, p_in: float, seed: int) -> Data:
    """Sparse stochastic block model: ``num_nodes * degree / 2`` undirected pairs, a fraction
    ``p_in`` inside the source's (random) block, the rest uniform; self-loops and duplicates
    dropped, both directions kept (O(E) memory, unlike PyG's dense ``stochastic_blockmodel_graph``)."""
    edge_index, _ = sparse_sbm_edges(num_nodes, num_blocks, degree, p_in, seed)
    return Data(edge_index=edge_index, num_nodes=num_nodes)


def sparse_sbm_edges(num_nodes: int, num_blocks: int, degree: float, p_in: float,
                     seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The edges of :func:`sparse_sbm_graph` and the block of every node."""
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
    return to_undirected(edge_index, num_nodes=num_nodes), block


def with_features(data, num_features: int = 64, num_classes: int = 8, seed: int = 0):
    """Random features/labels for graphs that have none (timing only)."""
    if data.x is None:
        gen = torch.Generator().manual_seed(seed)
        data.x = torch.randn(data.num_nodes, num_features, generator=gen)
        data.y = torch.randint(0, num_classes, (data.num_nodes,), generator=gen)
        data.train_mask = torch.rand(data.num_nodes, generator=gen) < 0.1
    return data


def median(values):
    return statistics.median(values)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, no GPU")


def markdown_table(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def print_table(headers, rows) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths, strict=False)))
    for r in rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=False)))


def write_table_section(name: str, title: str, script: str, notes: str, headers, rows) -> None:
    """A RESULTS.md section: title, the command and machine, notes, then the table."""
    write_section(name, f"## {title}\n\n`python benchmarks/{script}` — machine: {machine()}.\n"
                        f"{notes}\n\n" + markdown_table(headers, rows))


def write_section(name: str, body: str) -> None:
    """Replaces (or appends) the section ``name`` of RESULTS.md."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    block = f"<!-- BEGIN {name} -->\n{body.strip()}\n<!-- END {name} -->"
    pattern = re.compile(rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(text)


def train_epochs(model, optimizer, x, adj, y, mask, epochs: int, distributed: bool = True):
    """Full-batch training epochs (cross-entropy on ``mask``); per epoch returns the wall time,
    the time inside communication calls and the bytes this rank sent (``comm_counter``)."""
    from pyg_sparsecomm import comm_counter, distributed_loss, sync_gradients

    counter = comm_counter()
    times, comm, sent = [], [], []
    for _ in range(epochs):
        counter.reset()
        t0 = time.perf_counter()
        optimizer.zero_grad()
        out = model(x, adj)
        if distributed:
            loss = distributed_loss(F.cross_entropy, out[mask], y[mask])
        else:
            loss = F.cross_entropy(out[mask], y[mask])
        loss.backward()
        if distributed:
            sync_gradients(model)
        optimizer.step()
        times.append(time.perf_counter() - t0)
        comm.append(counter.seconds)
        sent.append(counter.bytes_sent())
    return times, comm, sent
