"""Wall-clock time of ``python -m pyg_sparsecomm check-port`` on the Cora GCN pair at P = 2 (issue 53's
floor: under a minute for a Cora-sized script at P = 2).

    python benchmarks/check_port_time.py                 # default --steps (all 200 epochs) and --steps 5

Each run is a fresh ``python -m pyg_sparsecomm check-port examples/porting/gcn.py
examples/porting/gcn_distributed.py --nproc 2`` as a user types it (the original in one process, the
port under ``torchrun``, ``OMP_NUM_THREADS=1``), on a Planetoid root whose Cora was processed by a
first run (not timed).  Prints each run's seconds, its verdict line and the load average
(``/proc/loadavg``) before and after: the machine is shared.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PLANETOID = Path(os.environ.get("PLANETOID_RAW", REPO.parent / "shared" / "data" / "planetoid"))


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0] if Path("/proc/loadavg").exists() else "?"


def check_port(root: str, steps: list[str]) -> tuple[float, str]:
    """One check of the gcn pair: seconds and the verdict line."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [
        str(REPO), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pyg_sparsecomm", "check-port", str(REPO / "examples/porting/gcn.py"),
                           str(REPO / "examples/porting/gcn_distributed.py"), "--nproc", "2", *steps, "--",
                           "--root", root], env=env, capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - start
    lines = (done.stdout + done.stderr).strip().splitlines()
    return seconds, (lines[-1] if lines else f"exit status {done.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each setting")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="check-port-time"))
    shutil.copytree(PLANETOID / "Cora" / "raw", root / "Cora" / "raw")
    check_port(str(root), ["--steps", "1"])  # processes Cora once
    for steps in ([], ["--steps", "5"]):
        for _ in range(args.repeats):
            before = load()
            seconds, verdict = check_port(str(root), steps)
            print(f"{' '.join(steps) or 'default --steps (all)'}: {seconds:.1f} s (load {before} -> {load()}): "
                  f"{verdict}")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
