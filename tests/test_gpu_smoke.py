"""``benchmarks/gpu_smoke.py`` (the first run on GPUs) stays runnable: its ``--device cpu`` dry run
at P = 2 with torchrun's environment (gloo; :func:`torchrun_job.launch_as_torchrun`) exits 0 and
prints a table with one row per check, each with a numeric max difference within its tolerance
(skipped rows say why).

The reference runs on another device than the shards, PyTorch's lazy-tensor device (it computes
on the CPU; the meta device cannot run PyG's GCNConv, whose self-loop removal has a data-dependent
shape): a GPU run keeps both on one GPU and the host, so a tensor of one mixed into the other (the
first GPU run crashed on ``position[data.edge_index[:, b.e_id]]`` after an in-place
``Data.to(device)`` had moved the checks' graph) fails here too (issue 45, item 6)."""
import re
import sys
from pathlib import Path

import torch
from torchrun_job import launch_as_torchrun

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\s*(?P<name>\S.*?)\s{2,}(?P<diff>\S+)\s{2,}(?P<tol>\S+)\s{2,}(?P<ms>\S+)\s{2,}(?P<result>\S.*)$")


def _check_names() -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_smoke
        return [name for name, *_ in gpu_smoke.checks(torch.device("cpu"))]
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_gpu_smoke_dry_run_on_cpu(tmp_path):
    args = ["--device", "cpu", "--reference-device", "lazy", "--nodes", "200"]
    printed = launch_as_torchrun(2, "benchmarks/gpu_smoke.py", args, ROOT, tmp_path)
    assert "device cpu (gloo), reference on lazy" in printed[0]
    lines = printed[0].splitlines()  # rank 0 reports
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["check", "max", "diff"])
    rows = {m["name"]: m for m in map(ROW.match, lines[header + 1:]) if m}
    names = _check_names()
    assert len(names) >= 14 and set(rows) == set(names), (sorted(rows), names)
    for name in names:
        row = rows[name]
        if row["result"].startswith("skipped: "):
            assert name == "algorithm=rdma", f"{name} was skipped: {row['result']}"  # CPU: needs mpiexec
            continue
        assert row["result"] == "ok", row.string
        assert 0 <= float(row["diff"]) <= float(row["tol"]) and float(row["ms"]) > 0, row.string
