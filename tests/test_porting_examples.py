"""The porting examples (issue 23, item 5): each single-process PyG script in examples/porting and its
distributed version train Cora with the same loss curve (dropout off) at P = 2 and 4, every rank
starting from its own random parameters, and the port changes at most ADDED/REMOVED lines."""
import contextlib
import difflib
import io
import re
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch
from sklearn_stand_in import installed

from pyg_sparsecomm.testing import launch

PORTING = Path(__file__).resolve().parents[1] / "examples" / "porting"
#: lines added / removed by a port (``diff single.py distributed.py``): the import, partition_and_shard,
#: distribute, distributed_loss and global_accuracy (the dataset line stays: under torchrun the package
#: locks a PyG dataset's download and processing); the import is the only line without a counterpart.
#: Issue 54's bar is 6 changed lines; an OGB-style script also converts its split_idx (shard_index) and
#: scores with GlobalEvaluator(Evaluator()) in place of global_accuracy: the most any pair needs.
ADDED, REMOVED = 6, 5
PAIRS = {
    "gcn": ["--epochs", "12", "--dropout", "0"],
    "gat": ["--epochs", "8", "--dropout", "0", "--heads", "2"],
    "gcn2": ["--epochs", "8", "--dropout", "0", "--num_layers", "4"],
    "dgi": ["--epochs", "6", "--hidden", "64"],  # DeepGraphInfomax (issue 54): its own loss and test()
    "ogb_index": ["--epochs", "8", "--dropout", "0"],
}


def run_script(path: str, argv: list[str], seed: int) -> tuple[str, dict]:
    """Runs a script as ``python path argv`` would, after ``torch.manual_seed(seed)``; returns its
    output and its model's final parameters."""
    torch.manual_seed(seed)
    old_argv, sys.argv = sys.argv, [path, *argv]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), installed():  # DeepGraphInfomax.test imports scikit-learn
            scope = runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = old_argv
    return buffer.getvalue(), {k: v.clone() for k, v in scope["model"].state_dict().items()}


def _worker(rank, world_size, path, argv):
    return run_script(path, argv, 0 if rank == 0 else 1000 + rank)   # ranks start apart


def fresh_root(planetoid_root: str, tmp_path: Path, name: str) -> str:
    root = tmp_path / name
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", root / "Cora" / "raw")  # processed by the run
    return str(root)


def losses(output: str) -> torch.Tensor:
    values = [float(v) for v in re.findall(r"Loss: ([0-9.]+)", output)]
    assert values, output[-2000:]
    return torch.tensor(values, dtype=torch.float64)


def accuracies(output: str) -> torch.Tensor:
    rows = [[float(v) for v in re.findall(r"(?:Train|Val): ([0-9.]+)", line)]
            for line in output.splitlines() if "Loss:" in line and ("Train" in line or "Val" in line)]
    final = [float(v) for v in re.findall(r"^Accuracy: ([0-9.]+)", output, re.MULTILINE)]  # DGI's test()
    return torch.tensor([*rows, *([final] if final else [])])


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_port_changes_few_lines(name):
    single = (PORTING / f"{name}.py").read_text().splitlines()
    distributed = (PORTING / f"{name}_distributed.py").read_text().splitlines()
    diff = list(difflib.unified_diff(single, distributed, lineterm="", n=0))
    added = [line for line in diff if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in diff if line.startswith("-") and not line.startswith("---")]
    assert len(added) <= ADDED and len(removed) <= REMOVED, "\n".join(diff)


def _pair_params():
    return [pytest.param(name, world_size, id=f"{name}-P{world_size}")
            for name in sorted(PAIRS) for world_size in (2, 4)]


@pytest.fixture(scope="module")
def single_process_run(planetoid_root, tmp_path_factory):
    """``single_process_run(name)``: the PyG script's output and final parameters, run once per script
    (the runs at P = 2 and 4 compare with the same one)."""
    runs = {}

    def run(name):
        if name not in runs:
            root = fresh_root(planetoid_root, tmp_path_factory.mktemp(name), "single")
            runs[name] = run_script(str(PORTING / f"{name}.py"), ["--root", root, *PAIRS[name]], 0)
        return runs[name]
    return run


@pytest.mark.parametrize("name,world_size", _pair_params())
def test_port_trains_as_single_process(planetoid_root, single_process_run, tmp_path, name, world_size):
    argv = PAIRS[name]
    ref_out, ref_state = single_process_run(name)
    per_rank = launch(_worker, world_size, str(PORTING / f"{name}_distributed.py"),
                      ["--root", fresh_root(planetoid_root, tmp_path, "distributed"), *argv], timeout=900)
    ref_loss = losses(ref_out)
    assert ref_loss[-1] < ref_loss[0], "the single-process script does not learn"
    for rank, (out, state) in enumerate(per_rank):
        torch.testing.assert_close(losses(out), ref_loss, rtol=0, atol=1e-5, msg=f"rank {rank}: loss curve")
        torch.testing.assert_close(accuracies(out), accuracies(ref_out), rtol=0, atol=2e-3, msg=f"rank {rank}")
        # Adam divides by sqrt(v): where a gradient is near zero, the ranks' summation order
        # (rounding at 1e-7) moves a parameter by up to ~1e-5 after 8 steps (GCNII at P = 4)
        for k, v in ref_state.items():
            torch.testing.assert_close(state[k], v, rtol=1e-4, atol=5e-5, msg=lambda m: f"rank {rank}: {k}: {m}")
