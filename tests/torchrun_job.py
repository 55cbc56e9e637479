"""Runs a script under real ``torchrun --standalone`` (tests of restarts and resuming)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def torchrun(script: Path, nproc: int, *args: str, max_restarts: int = 0, timeout: float = 240,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node NPROC --max-restarts N SCRIPT ARGS`` with this
    worktree's package first on the path; the completed process (output captured)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               f"--max-restarts={max_restarts}", "--monitor-interval=0.2", str(script), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
