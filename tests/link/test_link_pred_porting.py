"""PyG's examples/link_pred.py ported (issue 48, item 0): examples/porting/link_pred.py is PyG's script,
link_pred_distributed.py its port, which changes at most 8 lines and trains Cora with the same loss and
AUC curves and the same final decode_all at P = 1 and 2, the ranks starting from different random
states (torch and Python's random) and rank 0 from the single process's."""
import contextlib
import difflib
import io
import random
import re
import runpy
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

from pyg_sparsecomm.testing import launch

PORTING = Path(__file__).resolve().parents[2] / "examples" / "porting"
SINGLE, DISTRIBUTED = PORTING / "link_pred.py", PORTING / "link_pred_distributed.py"
#: the imports (one line more, sklearn's and PyG's negative_sampling replaced), the split's shards,
#: distribute, distributed_loss, decode_all's gather_nodes (the dataset line stays: under torchrun the
#: package locks a PyG dataset's download and processing)
CHANGED_LINES = 6
EPOCHS = 6


def _run(path: Path, root: str, seed: int) -> tuple[str, torch.Tensor]:
    """``python path --root root --epochs EPOCHS`` after seeding torch and Python's random; its output
    and its final ``decode_all``."""
    torch.manual_seed(seed)
    random.seed(seed)
    old_argv, sys.argv = sys.argv, [str(path), "--root", root, "--epochs", str(EPOCHS)]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            scope = runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = old_argv
    return buffer.getvalue(), scope["final_edge_index"]


def _worker(rank, world_size, root):
    return _run(DISTRIBUTED, root, 0 if rank == 0 else 1000 + rank)  # only rank 0 starts as the single process


def _curves(output: str) -> torch.Tensor:
    rows = [[float(v) for v in re.findall(r"(?:Loss|Val|Test): ([0-9.]+)", line)]
            for line in output.splitlines() if line.startswith("Epoch")]
    assert len(rows) == EPOCHS, output[-2000:]
    return torch.tensor(rows, dtype=torch.float64)


def _pairwise_auc(y_true, y_score) -> float:
    """scikit-learn's ``roc_auc_score`` by its definition (all positive-negative pairs, ties one half):
    the single-process script's metric where scikit-learn is not installed."""
    y, s = torch.as_tensor(y_true).bool(), torch.as_tensor(y_score).double()
    difference = s[y][:, None] - s[~y][None, :]
    return float(((difference > 0).double() + 0.5 * (difference == 0).double()).mean())


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
    """PyG's script in this process (scikit-learn's AUC by its definition if scikit-learn is missing)."""
    with pytest.MonkeyPatch.context() as patch:
        try:
            import sklearn.metrics  # noqa: F401
        except ImportError:
            module = types.ModuleType("sklearn.metrics")
            module.roc_auc_score = _pairwise_auc
            patch.setitem(sys.modules, "sklearn", types.ModuleType("sklearn"))
            patch.setitem(sys.modules, "sklearn.metrics", module)
        return _run(SINGLE, _fresh_root(planetoid_root, tmp_path_factory.mktemp("single")), 0)


@pytest.mark.parametrize("world_size", [1, 2])
def test_port_trains_as_single_process(planetoid_root, single_process, tmp_path, world_size):
    ref_out, ref_edges = single_process
    root = _fresh_root(planetoid_root, tmp_path)
    if world_size == 1:
        per_rank = [_run(DISTRIBUTED, root, 0)]
    else:
        per_rank = launch(_worker, world_size, root, timeout=600)
    reference = _curves(ref_out)
    assert reference[-1, 1] > reference[0, 1], "the single-process script does not learn"
    for rank, (out, edges) in enumerate(per_rank):
        # the AUCs print 6 decimals; a score's last bits (another summation order) may swap two pairs
        torch.testing.assert_close(_curves(out), reference, rtol=0, atol=2e-5, msg=f"rank {rank}: curves")
        assert edges.shape == ref_edges.shape and torch.equal(edges, ref_edges), f"rank {rank}: decode_all"
