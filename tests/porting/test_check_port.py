"""``python -m pyg_sparsecomm check-port`` (issue 53): every pair of examples/porting comes out equal at
P = 2 (exit 0), and deliberately broken ports made here from real pairs each exit non-zero naming the
difference: a loss averaged over the rank's rows (no distributed_loss), a permutation of the rank's rows
where the original permutes all nodes, global ids indexing the rank's rows (an index list not sharded),
and a crash, named with its file:line.

The scripts run in fresh processes as a user runs them (``python -m pyg_sparsecomm check-port``);
scikit-learn, where missing, is replaced by tests/sklearn_stand_in.py through a ``sklearn`` package
put on the scripts' path.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
PORTING = REPO / "examples" / "porting"
#: each pair's arguments (small graphs and models), besides --root where the script takes one
PAIRS = {
    "gcn": [], "gat": ["--heads", "2"], "gcn2": ["--num_layers", "4"], "neighbor": [], "link_pred": [],
    "hetero_link_pred": None, "dgi": ["--hidden", "64"], "gae": [], "ogb_index": [],
    "lightgcn": None,
}
NO_ROOT = {"hetero_link_pred": [], "lightgcn": ["--num_users", "120", "--num_books", "160",
                                                "--num_interactions", "1500", "--batch_size", "256"]}
STEPS = "2"


@pytest.fixture(scope="module")
def environment(tmp_path_factory):
    """The scripts' environment: this checkout first on the path, scikit-learn's stand-in where missing."""
    stub = tmp_path_factory.mktemp("stub")
    try:
        import sklearn  # noqa: F401
    except ImportError:
        (stub / "sklearn").mkdir()
        (stub / "sklearn" / "__init__.py").write_text("")
        (stub / "sklearn" / "metrics.py").write_text(
            "from sklearn_stand_in import pairwise_auc as roc_auc_score  # noqa: F401\n"
            "from sklearn_stand_in import precision_at_thresholds as average_precision_score  # noqa: F401\n")
        (stub / "sklearn" / "linear_model.py").write_text(
            "from sklearn_stand_in import NearestCentroid as LogisticRegression  # noqa: F401\n")
    path = os.pathsep.join([str(REPO), str(stub), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def cora_root(planetoid_root, tmp_path_factory):
    """A Planetoid root with Cora processed once (the original and the port then only read it)."""
    root = tmp_path_factory.mktemp("cora")
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", root / "Cora" / "raw")
    return str(root)


def check_port(environment: dict, original: Path, port: Path, script_args: list[str],
               steps: str = STEPS) -> tuple[int, str]:
    """``python -m pyg_sparsecomm check-port original port --steps steps -- script_args``: status and output."""
    done = subprocess.run([sys.executable, "-m", "pyg_sparsecomm", "check-port", str(original), str(port),
                           "--nproc", "2", "--steps", steps, "--", *script_args],
                          env=environment, capture_output=True, text=True, timeout=600, cwd=REPO)
    return done.returncode, done.stdout + done.stderr


def _arguments(name: str, root: str) -> list[str]:
    return NO_ROOT[name] if name in NO_ROOT else ["--root", root, *PAIRS[name]]


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_every_porting_pair_is_equal(environment, cora_root, name):
    status, output = check_port(environment, PORTING / f"{name}.py", PORTING / f"{name}_distributed.py",
                                _arguments(name, cora_root))
    assert status == 0, output[-4000:]
    assert f"equal to rtol 1e-05 (atol 1e-06) for {STEPS} steps on 2 ranks" in output, output[-4000:]
    assert "seed 0 in every process; dropout switched off:" in output
    if name == "neighbor":
        assert "PyG's NeighborLoader: given the package's batches" in output


def _broken(tmp_path: Path, name: str, old: str, new: str, single: bool = False) -> tuple[Path, Path]:
    """The pair ``name`` with ``old`` replaced by ``new`` in the port (and in the original, ``single``)."""
    paths = []
    for source in (PORTING / f"{name}.py", PORTING / f"{name}_distributed.py"):
        text = source.read_text()
        if source.stem.endswith("_distributed") or single:
            assert old in text, (source, old)
            text = text.replace(old, new)
        paths.append(tmp_path / source.name)
        paths[-1].write_text(text)
    return paths[0], paths[1]


BROKEN = {
    # the loss of the rank's own training rows: the mean over local rows, no distributed_loss
    "local_mean": ("gcn", "distributed_loss(F.cross_entropy, out[data.train_mask], data.y[data.train_mask])",
                   "F.cross_entropy(out[data.train_mask], data.y[data.train_mask])", False),
    # distributed_loss left out of an OGB-style script's nll_loss
    "missing_distributed_loss": ("ogb_index", "distributed_loss(F.nll_loss, out, data.y.squeeze(1)[train_idx])",
                                 "F.nll_loss(out, data.y.squeeze(1)[train_idx])", False),
    # both permute the nodes' features: the port permutes the rank's rows only
    "local_permutation": ("gcn", "out = model(data.x, data.edge_index)\n    loss",
                          "out = model(data.x[torch.randperm(data.x.size(0))], data.edge_index)\n    loss", True),
    # OGB's index lists used on the rank's rows without shard_index: global ids read local rows
    "global_ids_on_local_rows": ("ogb_index", "split_idx = shard_index(get_idx_split(dataset[0]), data)",
                                 "split_idx = get_idx_split(dataset[0])", False),
}


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_broken_ports_are_caught(environment, cora_root, tmp_path, variant):
    name, old, new, single = BROKEN[variant]
    original, port = _broken(tmp_path, name, old, new, single)
    status, output = check_port(environment, original, port, _arguments(name, cora_root), steps="1")
    assert status != 0, output[-4000:]
    assert "not equal (exit status" in output, output[-4000:]
    named = re.search(r"step 1, loss #1 \(backward\(\) at \w+_distributed\.py:\d+\)|crashed at \S+_distributed\.py:\d+",
                      output)
    assert named, output[-4000:]


def test_a_crashing_port_names_its_line(environment, cora_root, tmp_path):
    original, port = _broken(tmp_path, "gcn", "    loss.backward()\n", "    loss.backward()\n"
                             "    raise RuntimeError('the port fails here')\n")
    line = next(i for i, text in enumerate(port.read_text().splitlines(), 1) if "the port fails here" in text)
    status, output = check_port(environment, original, port, ["--root", cora_root], steps="1")
    assert status == 3, output[-4000:]
    assert f"crashed at {port}:{line}: RuntimeError: the port fails here" in output, output[-4000:]
    assert "raise RuntimeError('the port fails here')" in output
