"""The README's scripts run as written under torchrun: "Using it" trains Cora's GCN full-graph,
"Mini-batch training" Cora's GraphSAGE on sampled batches."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_script(heading: str = "## Using it") -> str:
    """The first ```python block after ``heading``."""
    text = README.read_text()
    match = re.search(re.escape(heading) + r"\n.*?```python\n(.*?)```", text, re.S)
    assert match, f"README.md has no python block under '{heading}'"
    return match.group(1)


def run_under_torchrun(script_text: str, planetoid_root: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Saves the script as train.py beside a data/Cora/raw copy and runs it on 2 torchrun processes."""
    script = tmp_path / "train.py"
    script.write_text(script_text)
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", tmp_path / "data" / "Cora" / "raw")  # no download
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_readme_script_trains_cora_under_torchrun(planetoid_root, tmp_path):
    proc = run_under_torchrun(readme_script(), planetoid_root, tmp_path)
    accuracy = [float(a) for a in re.findall(r"^test accuracy ([0-9.]+)$", proc.stdout, re.M)]
    assert len(accuracy) == 1, proc.stdout[-3000:]   # printed by rank 0 only
    assert accuracy[0] > 0.75, proc.stdout[-3000:]   # GCN on Cora: ~0.80 (single-process PyG too)
    losses = [float(v) for v in re.findall(r"^epoch \d+ loss ([0-9.]+)$", proc.stdout, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2, losses


def test_readme_minibatch_script_trains_cora_under_torchrun(planetoid_root, tmp_path):
    proc = run_under_torchrun(readme_script("## Mini-batch training"), planetoid_root, tmp_path)
    accuracy = [float(a) for a in re.findall(r"^test accuracy ([0-9.]+)$", proc.stdout, re.M)]
    assert len(accuracy) == 1, proc.stdout[-3000:]   # printed by rank 0 only
    assert accuracy[0] > 0.7, proc.stdout[-3000:]    # GraphSAGE on Cora after 25 batches: ~0.76
    losses = [float(v) for v in re.findall(r"^epoch \d+ loss ([0-9.]+)$", proc.stdout, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2, losses
