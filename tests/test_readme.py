"""The README's "Using it" script runs as written under torchrun and trains Cora's GCN."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_script() -> str:
    """The first ```python block after the "## Using it" heading."""
    text = README.read_text()
    match = re.search(r"## Using it\n.*?```python\n(.*?)```", text, re.S)
    assert match, "README.md has no python block under '## Using it'"
    return match.group(1)


def test_readme_script_trains_cora_under_torchrun(planetoid_root, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(readme_script())
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", tmp_path / "data" / "Cora" / "raw")  # no download
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    accuracy = [float(a) for a in re.findall(r"^test accuracy ([0-9.]+)$", proc.stdout, re.M)]
    assert len(accuracy) == 1, proc.stdout[-3000:]   # printed by rank 0 only
    assert accuracy[0] > 0.75, proc.stdout[-3000:]   # GCN on Cora: ~0.80 (single-process PyG too)
    losses = [float(v) for v in re.findall(r"^epoch \d+ loss ([0-9.]+)$", proc.stdout, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2, losses
