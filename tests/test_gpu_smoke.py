"""``benchmarks/gpu_smoke.py`` (the first run on GPUs) stays runnable: its ``--device cpu`` dry run
at P = 2 under ``torchrun`` (gloo) exits 0 and prints a table with one row per check, each with
a numeric max difference within its tolerance (skipped rows say why)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\s*(?P<name>\S.*?)\s{2,}(?P<diff>\S+)\s{2,}(?P<tol>\S+)\s{2,}(?P<ms>\S+)\s{2,}(?P<result>\S.*)$")


def _check_names() -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_smoke
        return [name for name, *_ in gpu_smoke.checks(torch.device("cpu"))]
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_gpu_smoke_dry_run_on_cpu():
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "benchmarks" / "gpu_smoke.py"), "--device", "cpu", "--nodes", "200"],
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
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
