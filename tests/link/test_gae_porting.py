"""PyG's examples/autoencoder.py ported (issue 54): examples/porting/gae.py is PyG's script (RandomLinkSplit with
split_labels=True), gae_distributed.py its port, which changes at most 6 lines and trains Cora with the same loss,
AUC and AP curves at P = 1, 2 and 4, the ranks starting from different random states (torch and Python's random)
and rank 0 from the single process's: GAE as it is, VGAE (--variational) with the single process drawing the
distributed model's noise keyed by node ids."""
import contextlib
import difflib
import io
import random
import re
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch
from keyed_noise import keyed_noise
from sklearn_stand_in import installed

from pyg_sparsecomm.testing import launch

PORTING = Path(__file__).resolve().parents[2] / "examples" / "porting"
SINGLE, DISTRIBUTED = PORTING / "gae.py", PORTING / "gae_distributed.py"
#: the import, the split's shards, distribute, the KL term's global node count (the dataset line stays:
#: under torchrun the package locks a PyG dataset's download and processing)
CHANGED_LINES = 4
EPOCHS = 6


def _run(path: Path, root: str, seed: int, variational: bool, noise=contextlib.nullcontext) -> str:
    """``python path --root root --epochs EPOCHS [--variational]`` after seeding torch and Python's random."""
    torch.manual_seed(seed)
    random.seed(seed)
    old_argv = sys.argv
    sys.argv = [str(path), "--root", root, "--epochs", str(EPOCHS), *(["--variational"] if variational else [])]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), installed(), noise():
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = old_argv
    return buffer.getvalue()


def _worker(rank, world_size, root, variational):
    return _run(DISTRIBUTED, root, 0 if rank == 0 else 1000 + rank, variational)  # only rank 0 as the single one


def _curves(output: str) -> torch.Tensor:
    rows = [[float(v) for v in re.findall(r"(?:Loss|AUC|AP): ([0-9.]+)", line)]
            for line in output.splitlines() if line.startswith("Epoch")]
    assert len(rows) == EPOCHS, output[-2000:]
    return torch.tensor(rows, dtype=torch.float64)


def _fresh_root(planetoid_root: str, tmp_path: Path) -> str:
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", tmp_path / "Cora" / "raw")
    return str(tmp_path)


def test_port_changes_few_lines():
    diff = list(difflib.unified_diff(SINGLE.read_text().splitlines(), DISTRIBUTED.read_text().splitlines(),
                                     lineterm="", n=0))
    added = [line for line in diff if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in diff if line.startswith("-") and not line.startswith("---")]
    assert len(added) <= CHANGED_LINES and len(removed) <= CHANGED_LINES, "\n".join(diff)


@pytest.fixture(scope="module")
def single_process(planetoid_root, tmp_path_factory):
    """PyG's script in this process, GAE and VGAE (the latter drawing the distributed model's noise)."""
    return {variational: _run(SINGLE, _fresh_root(planetoid_root, tmp_path_factory.mktemp("single")), 0,
                              variational, keyed_noise if variational else contextlib.nullcontext)
            for variational in (False, True)}


@pytest.mark.parametrize("world_size,variational", [(1, False), (2, False), (4, False), (2, True)])
def test_port_trains_as_single_process(planetoid_root, single_process, tmp_path, world_size, variational):
    reference = _curves(single_process[variational])
    root = _fresh_root(planetoid_root, tmp_path)
    if world_size == 1:
        per_rank = [_run(DISTRIBUTED, root, 0, variational)]
    else:
        per_rank = launch(_worker, world_size, root, variational, timeout=600)
    assert reference[-1, 0] < reference[0, 0], "the single-process script does not learn"
    for rank, out in enumerate(per_rank):
        torch.testing.assert_close(_curves(out), reference, rtol=0, atol=1e-5, msg=f"rank {rank}: curves")
