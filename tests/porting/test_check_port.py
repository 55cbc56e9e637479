"""``python -m pyg_sparsecomm check-port`` (issue 53): every pair of examples/porting comes out equal
(exit 0), and deliberately broken ports made here from real pairs each exit non-zero naming the
difference: a loss averaged over the rank's rows (no distributed_loss), a permutation of the rank's rows
where the original permutes all nodes, global ids indexing the rank's rows (an index list not sharded),
and a crash, named with its file:line.  An original whose ``NeighborLoader`` draws what no port draws
(``replace=True``) is compared on its first step only, on one fixed batch: equal for the real port, a
difference for a broken one.

One check runs as a user runs it, ``python -m pyg_sparsecomm check-port`` starting the original and
``torchrun`` (the gcn pair at P = 2).  The others (at P = 2, and two pairs at P = 3) give
:func:`~pyg_sparsecomm.cli.check_port.check` a runner that starts the same recorder
(``pyg_sparsecomm.porting.record.main``, the scripts unmodified, run as ``__main__``) in processes of
the warm fork server (``pyg_sparsecomm.testing.launch``): the recordings and the verdict are the
command's, without four interpreters importing torch and PyG per check (a check took 15 s of CPU that
way, 3 s this way), and one original's recording serves every port of it.
scikit-learn, where missing, is replaced by tests/sklearn_stand_in.py.
"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sklearn_stand_in import installed

from pyg_sparsecomm.cli import check_port as cli
from pyg_sparsecomm.testing import launch

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
PORTING = REPO / "examples" / "porting"
#: each pair's arguments (small models), besides --root where the script reads Cora (every pair of
#: examples/porting: test_every_pair_of_the_examples_is_listed)
PAIRS = {
    "gcn": [], "gat": ["--heads", "2"], "gcn2": ["--num_layers", "4"], "neighbor": [], "link_pred": [],
    "hetero_link_pred": None, "dgi": ["--hidden", "64"], "gae": [], "ogb_index": [],
    "lightgcn": None, "layerwise": [],
}
#: pairs on a graph of their own (no --root): their arguments
NO_ROOT = {"hetero_link_pred": [], "lightgcn": ["--num_users", "120", "--num_books", "160",
                                                "--num_interactions", "1500", "--batch_size", "256"]}
#: pairs of examples/porting check-port cannot compare, with the reason it says (none today)
NOT_COMPARABLE: dict[str, str] = {}
STEPS = "2"


@pytest.fixture(scope="module")
def cora_root(planetoid_root, tmp_path_factory):
    """A Planetoid root with Cora processed once (the original and the port then only read it)."""
    root = tmp_path_factory.mktemp("cora")
    shutil.copytree(Path(planetoid_root) / "Cora" / "raw", root / "Cora" / "raw")
    return str(root)


def _record(rank: int, world_size: int, argv: list[str], env: dict[str, str], log: str) -> int:
    """One process of a recording: ``python -m pyg_sparsecomm.porting.record *argv`` as torchrun's
    rank ``rank`` (its environment), output to ``log``."""
    from pyg_sparsecomm.porting import record
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size))
    with open(log, "a") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), installed():
        return record.main(argv)


class Launched:
    """A :data:`~pyg_sparsecomm.cli.check_port.Runner` starting the recorder in the warm fork server's
    processes; an original recorded once (the same text, arguments and steps) is copied, not run again."""

    def __init__(self) -> None:
        self.originals: dict[tuple, Path] = {}
        self.runs = 0

    def __call__(self, role: str, args, script_args: list[str], env: dict[str, str]) -> None:
        directory = Path(env["PYG_SPARSECOMM_CHECK_DIR"])
        script = args.original if role == "original" else args.port
        key = (Path(script).read_text(), tuple(script_args), env.get("PYG_SPARSECOMM_CHECK_STEPS"), args.seed)
        if role == "original" and key in self.originals:
            for path in self.originals[key].glob("original*"):
                shutil.copy(path, directory / path.name)
            return None
        ours = {k: v for k, v in env.items() if k.startswith("PYG_SPARSECOMM_CHECK_")}
        launch(_record, 1 if role == "original" else args.nproc, [script, *script_args], ours,
               str(directory / f"{role}.log"), timeout=args.timeout, pg_timeout=30)
        self.runs += 1
        if role == "original":
            self.originals[key] = directory
        return None


@pytest.fixture(scope="module")
def runner():
    return Launched()


def check(runner, capsys, tmp_path: Path, original: Path, port: Path, script_args: list[str],
          steps: str = STEPS, nproc: int = 2) -> tuple[int, str]:
    """``check-port original port --nproc nproc --steps steps -- script_args`` with ``runner``:
    status and output."""
    keep = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    args = cli.build_parser().parse_args([str(original), str(port), "--nproc", str(nproc), "--steps", steps,
                                          "--keep", str(keep), "--timeout", "300"])
    capsys.readouterr()
    status = cli.check(args, script_args, runner)
    return status, capsys.readouterr().out


def command(original: Path, port: Path, script_args: list[str], nproc: int) -> tuple[int, str]:
    """``python -m pyg_sparsecomm check-port original port --nproc nproc --steps STEPS -- script_args``
    in a fresh process, as a user runs it: status and output."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "pyg_sparsecomm", "check-port", str(original), str(port),
                           "--nproc", str(nproc), "--steps", STEPS, "--", *script_args],
                          env=dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=600, cwd=REPO)
    return done.returncode, done.stdout + done.stderr


def _arguments(name: str, root: str) -> list[str]:
    return NO_ROOT[name] if name in NO_ROOT else ["--root", root, *PAIRS[name]]


def _equal(status: int, output: str, nproc: int = 2) -> None:
    assert status == 0, output[-4000:]
    assert f"equal: every loss and parameter equal to rtol 1e-05 (atol 1e-06) for {STEPS} steps on {nproc} ranks" \
        in output, output[-4000:]
    assert "seed 0 in every process; dropout switched off:" in output


def test_every_pair_of_the_examples_is_listed():
    """A pair added to examples/porting without a line here fails (each port has its original)."""
    ports = {path.name.removesuffix("_distributed.py") for path in PORTING.glob("*_distributed.py")}
    assert ports == set(PAIRS) | set(NOT_COMPARABLE), "list every pair of examples/porting in PAIRS"
    assert not set(PAIRS) & set(NOT_COMPARABLE)
    assert all((PORTING / f"{name}.py").is_file() for name in ports)
    assert {path.stem for path in PORTING.glob("*.py")} == ports | {f"{name}_distributed" for name in ports}


@pytest.mark.parametrize("name", sorted(set(PAIRS) - {"gcn"}))
def test_every_porting_pair_is_equal(runner, capsys, tmp_path, cora_root, name):
    status, output = check(runner, capsys, tmp_path, PORTING / f"{name}.py", PORTING / f"{name}_distributed.py",
                           _arguments(name, cora_root))
    _equal(status, output)
    if name in ("neighbor", "layerwise"):
        assert "PyG's NeighborLoader: given the package's batches" in output
        assert "not reproducible" not in output


def test_the_command_checks_a_pair_under_torchrun(cora_root):
    """The gcn pair as a user checks it: the original in ``python``, the port under ``torchrun``, P = 2."""
    status, output = command(PORTING / "gcn.py", PORTING / "gcn_distributed.py", _arguments("gcn", cora_root), 2)
    _equal(status, output)
    assert "gcn_distributed.py (torchrun, 2 processes, gloo)" in output


@pytest.mark.parametrize("name", ["neighbor", "ogb_index"])
def test_three_processes(runner, capsys, tmp_path, cora_root, name):
    """``--nproc 3``: a mini-batch pair draws the same global batches on three ranks, an OGB-style pair's
    index lists shard over three (the original's recording is the one P = 2 compared with)."""
    status, output = check(runner, capsys, tmp_path, PORTING / f"{name}.py", PORTING / f"{name}_distributed.py",
                           _arguments(name, cora_root), nproc=3)
    _equal(status, output, nproc=3)
    assert "(torchrun, 3 processes, gloo)" in output


def _broken(tmp_path: Path, name: str, old: str, new: str, single: bool = False,
            original: tuple[str, str] | None = None) -> tuple[Path, Path]:
    """The pair ``name`` with ``old`` replaced by ``new`` in the port (and in the original, ``single``;
    ``original``: a replacement in the original only)."""
    paths = []
    for source in (PORTING / f"{name}.py", PORTING / f"{name}_distributed.py"):
        text = source.read_text()
        if source.stem.endswith("_distributed") or single:
            assert old in text, (source, old)
            text = text.replace(old, new)
        if original and not source.stem.endswith("_distributed"):
            assert original[0] in text, (source, original[0])
            text = text.replace(*original)
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
def test_broken_ports_are_caught(runner, capsys, tmp_path, cora_root, variant):
    name, old, new, single = BROKEN[variant]
    original, port = _broken(tmp_path, name, old, new, single)
    status, output = check(runner, capsys, tmp_path, original, port, _arguments(name, cora_root), steps="1")
    assert status != 0, output[-4000:]
    assert "not equal (exit status" in output, output[-4000:]
    named = re.search(r"step 1, loss #1 \(backward\(\) at \w+_distributed\.py:\d+\)|crashed at \S+_distributed\.py:\d+",
                      output)
    assert named, output[-4000:]


def test_a_plain_evaluator_is_refused_naming_the_wrap(runner, capsys, tmp_path, cora_root):
    """The OGB pair with its ``Evaluator`` left unwrapped: the Evaluator reads this rank's rows as NumPy
    (a per-rank accuracy, silently, before ShardSelection); the port now crashes at that line, naming
    ``GlobalEvaluator``."""
    original, port = _broken(tmp_path, "ogb_index", "evaluator = GlobalEvaluator(Evaluator())",
                             "evaluator = Evaluator()")
    status, output = check(runner, capsys, tmp_path, original, port, _arguments("ogb_index", cora_root), steps=STEPS)
    assert status == 3, output[-4000:]
    assert re.search(r"crashed at \S+ogb_index_distributed\.py:\d+: PerRankSelectionError: this tensor holds this "
                     r"rank's \d+ rows of a selection", output), output[-4000:]
    assert "GlobalEvaluator(Evaluator(name))" in output, output[-4000:]


def test_a_crashing_port_names_its_line(runner, capsys, tmp_path, cora_root):
    original, port = _broken(tmp_path, "gcn", "    loss.backward()\n", "    loss.backward()\n"
                             "    raise RuntimeError('the port fails here')\n")
    line = next(i for i, text in enumerate(port.read_text().splitlines(), 1) if "the port fails here" in text)
    status, output = check(runner, capsys, tmp_path, original, port, ["--root", cora_root], steps="1")
    assert status == 3, output[-4000:]
    assert f"crashed at {port}:{line}: RuntimeError: the port fails here" in output, output[-4000:]
    assert "raise RuntimeError('the port fails here')" in output


#: the neighbour pair's original drawing with replacement, which no port reproduces
WITH_REPLACEMENT = ("input_nodes=train_idx,", "input_nodes=train_idx, replace=True,")


@pytest.mark.parametrize("broken", [False, True], ids=["port", "local_mean"])
def test_unreproducible_draws_compare_the_first_step_on_a_fixed_batch(runner, capsys, tmp_path, cora_root, broken):
    """PyG's ``NeighborLoader(replace=True)`` in the original: check-port names it, gives both scripts the
    package's first batch and compares that step (loss, gradients, parameters): exit 0 for the real port,
    the first loss named for one averaging its rank's rows."""
    old = "psc.distributed_loss(F.cross_entropy, out, batch.y[:batch.batch_size])"
    new = "F.cross_entropy(out, batch.y[:batch.batch_size])" if broken else old
    original, port = _broken(tmp_path, "neighbor", old, new, original=WITH_REPLACEMENT)
    status, output = check(runner, capsys, tmp_path, original, port, _arguments("neighbor", cora_root))
    assert "not reproducible: PyG's NeighborLoader(replace=True) draws batches of its own" in output, output
    assert "compared its step only (loss, gradients, parameters after it)" in output, output
    if broken:
        assert status == 1, output[-4000:]
        assert re.search(r"step 1, loss #1 \(backward\(\) at neighbor_distributed\.py:\d+\)", output), output
    else:
        assert status == 0, output[-4000:]
        assert "equal: the first step only (one fixed batch): its loss, the gradients it takes and the " \
               "parameters after it equal to rtol 1e-05 (atol 1e-06) on 2 ranks" in output, output


def test_a_first_step_gradient_that_differs_is_named(runner, capsys, tmp_path, cora_root):
    """A port that doubles its gradients (``(2 * loss - loss.detach()).backward()``: the loss's value,
    twice its gradient) is named at the first step's gradients, which Adam's first step barely shows."""
    original, port = _broken(tmp_path, "gcn", "    loss.backward()\n", "    (2 * loss - loss.detach()).backward()\n")
    status, output = check(runner, capsys, tmp_path, original, port, ["--root", cora_root], steps="1")
    assert status == 1, output[-4000:]
    assert re.search(r"step 1, the gradients optimizer\.step\(\) takes: parameter \S+ \(", output), output
