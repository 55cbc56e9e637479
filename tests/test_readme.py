"""Every command and script of the README runs on a fresh clone, offline.

* Python blocks: every block compiles and every name it imports from ``pyg_sparsecomm`` or
  ``torch_geometric`` exists (fragments too, so a renamed API is caught). A block whose
  introducing paragraph calls it a "whole script" is saved as ``train.py`` and run at P = 2 as
  ``torchrun --standalone --nproc-per-node 2 train.py`` runs it, exactly as written, with the
  Planetoid raw files in ``data/``.
* Bash blocks: every command (lines joined at ``\\``, comments dropped, ``&&`` chains split)
  runs in a copy of the repository's files (what a clone holds: no ``benchmarks/graphs/``, no
  data but the Planetoid raw files copied into ``data/``), with ``PYG_SPARSECOMM_OFFLINE=1`` so
  that nothing is downloaded, unless ``SKIPPED`` lists it with its reason (``SLOW`` ones carry
  the ``slow`` marker). A command added to the README is run by default.

``torchrun ... SCRIPT ARGS`` runs SCRIPT with ARGS on as many processes with torchrun's
environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...), forked from the tests' warm fork
server instead of spawned by torchrun (a spawned rank spends seconds importing torch and PyG;
the real launcher runs the README's main job in tests/training/test_training.py and restarts jobs in
tests/launch/test_attempts.py, tests/checkpoint/test_checkpoint.py and tests/launch/test_elastic.py). Scripts that take
``--epochs`` run ``EPOCHS`` epochs: the one change to the commands as written, so that each
training command costs its set-up and a few steps.
"""
import ast
import importlib
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
from conftest import SHARED
from torchrun_job import OFFLINE, launch_as_torchrun, torchrun_words

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
EPOCHS = ["--epochs", "2"]

#: README commands not run here, with the reason (the key is the command as the shell splits it)
SKIPPED = {
    "pip install torch==2.13.0": "set-up: installs torch (the tests run in the installed environment)",
    "pip install -e .": "set-up: installs the package",
    "pip install -e .[test]": "set-up: installs the package and the test extras",
    "python -m pytest -q -n 2 --dist loadgroup --durations=25 tests":
        "the test suite itself (two workers, tests/core_sharing.py; with its 25 slowest tests)",
    "bash benchmarks/fetch_meshes.sh": "downloads the libmetis meshes (apt-get download)",
    "python -m pyg_sparsecomm partition-stats --graph benchmarks/graphs/4elt.graph --parts 4,16,64,256 "
    "--methods random,contiguous,metis,hypergraph": "needs the meshes of benchmarks/fetch_meshes.sh",
    "torchrun --standalone --nproc-per-node N benchmarks/gpu_smoke.py":
        "needs N GPUs (its --device cpu run is tests/test_gpu_smoke.py)",
}

#: README commands run with the ``slow`` marker (``-m "not slow"`` leaves them out), with the reason
SLOW = {
    "torchrun --standalone --nproc-per-node 4 examples/train_minibatch.py --method stochastic_hypergraph":
        "samples the partition's batches and runs Mt-KaHyPar (on rank 0): its longest README command",
}


@dataclass
class Block:
    lang: str
    code: str
    heading: str    # the last '#' heading above the block
    intro: str      # the paragraph right above the block (blank lines between)
    line: int


def readme_blocks(lang: str) -> list[Block]:
    """The README's fenced blocks of language ``lang``, in order."""
    blocks, heading, paragraph, intro = [], "", [], []
    lines = README.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if line[3:].strip() == lang:
                blocks.append(Block(lang, "\n".join(lines[i + 1:end]) + "\n", heading,
                                    " ".join(paragraph or intro), i + 1))
            i, paragraph, intro = end + 1, [], []
            continue
        if line.startswith("#"):
            heading, paragraph, intro = line, [], []
        elif not line.strip():
            intro, paragraph = paragraph or intro, []
        else:
            paragraph.append(line)
        i += 1
    return blocks


def whole_scripts() -> list[Block]:
    return [b for b in readme_blocks("python") if "whole script" in b.intro.lower()]


def readme_script(heading: str = "## Using it") -> str:
    """The whole script under ``heading``."""
    scripts = [b.code for b in whole_scripts() if b.heading == heading]
    assert scripts, f"README.md has no whole script under '{heading}'"
    return scripts[0]


def readme_commands() -> list[str]:
    """Every command of the bash blocks, as the shell splits it (``&&`` chains apart)."""
    commands = []
    for block in readme_blocks("bash"):
        for line in block.code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                end = words.index("&&") if "&&" in words else len(words)
                commands.append(" ".join(words[:end]))
                words = words[end + 1:]
    return list(dict.fromkeys(c for c in commands if c))  # each once


# python blocks ----------------------------------------------------------------
def _imported_names(tree: ast.AST) -> list[tuple[str, str | None]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, None) for alias in node.names]
    return [(m, n) for m, n in out if m.split(".")[0] in ("pyg_sparsecomm", "torch_geometric")]


@pytest.mark.parametrize("block", readme_blocks("python"), ids=lambda b: f"line{b.line}")
def test_readme_python_block_compiles_and_its_imports_exist(block):
    tree = ast.parse(compile(block.code, f"README.md:{block.line}", "exec", ast.PyCF_ONLY_AST))
    for module, name in _imported_names(tree):
        imported = importlib.import_module(module)
        if name is not None and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or ImportError naming it


def warnings_in_logs(log_dir: Path) -> list[str]:
    """The warning lines the ranks printed into ``log_dir`` (what a user running the command would see)."""
    return [line for log in sorted(log_dir.glob("rank*.log")) for line in log.read_text().splitlines()
            if re.search(r"\w+Warning: ", line)]


def run_as_script(script_text: str, planetoid_root: str, tmp_path: Path) -> str:
    """Saves the script as train.py beside data/{Cora,CiteSeer}/raw copies, runs it on 2 processes with
    torchrun's environment (:func:`torchrun_job.launch_as_torchrun`); what every rank printed, joined."""
    (tmp_path / "train.py").write_text(script_text)
    for dataset in ("Cora", "CiteSeer"):  # no download
        shutil.copytree(Path(planetoid_root) / dataset / "raw", tmp_path / "data" / dataset / "raw")
    return "\n".join(launch_as_torchrun(2, "train.py", [], tmp_path, tmp_path / "logs"))


def _check_cora_gcn(stdout: str) -> None:
    accuracy = [float(a) for a in re.findall(r"^test accuracy ([0-9.]+)$", stdout, re.M)]
    assert len(accuracy) == 1, stdout[-3000:]   # printed by rank 0 only
    assert accuracy[0] > 0.75, stdout[-3000:]   # GCN on Cora: ~0.80 (single-process PyG too)
    losses = [float(v) for v in re.findall(r"^epoch \d+ loss ([0-9.]+)$", stdout, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2, losses


def _check_cora_minibatch(stdout: str) -> None:
    accuracy = [float(a) for a in re.findall(r"^test accuracy ([0-9.]+)$", stdout, re.M)]
    assert len(accuracy) == 1, stdout[-3000:]   # printed by rank 0 only
    assert accuracy[0] > 0.7, stdout[-3000:]    # GraphSAGE on Cora after 25 batches: ~0.76
    losses = [float(v) for v in re.findall(r"^epoch \d+ loss ([0-9.]+)$", stdout, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2, losses


#: what a whole script's output must show beyond running (by its heading)
SCRIPT_CHECKS = {"## Using it": _check_cora_gcn, "## Mini-batch training": _check_cora_minibatch}


@pytest.mark.parametrize("block", whole_scripts(), ids=lambda b: b.heading.lstrip("# ") or f"line{b.line}")
def test_readme_whole_script_runs_under_torchrun(block, planetoid_root, tmp_path):
    stdout = run_as_script(block.code, planetoid_root, tmp_path)
    SCRIPT_CHECKS.get(block.heading, lambda stdout: None)(stdout)
    assert not warnings_in_logs(tmp_path / "logs"), warnings_in_logs(tmp_path / "logs")[:10]


def test_readme_has_the_scripts_the_checks_name():
    assert set(SCRIPT_CHECKS) <= {b.heading for b in whole_scripts()}


# bash blocks ------------------------------------------------------------------
def test_skipped_and_slow_commands_are_still_in_the_readme():
    listed = set(SKIPPED) | set(SLOW)
    assert listed <= set(readme_commands()), listed - set(readme_commands())


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """The repository's files (tracked or not ignored: what a clone of a commit holds) plus the
    Planetoid raw files in ``data/`` where the shared folder has them."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    clone = tmp_path_factory.mktemp("clone")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    assert not (clone / "benchmarks" / "graphs").exists()
    for dataset in ("Cora", "CiteSeer"):
        if (SHARED / dataset / "raw").is_dir():
            shutil.copytree(SHARED / dataset / "raw", clone / "data" / dataset / "raw")
    return clone


def _out_folder(command: str) -> str | None:
    """The folder ``command`` writes into (its ``--out``), if it names one."""
    words = shlex.split(command)
    return words[words.index("--out") + 1] if "--out" in words[:-1] else None


def producers(command: str) -> list[str]:
    """The README commands before ``command`` that write what it reads (an argument, or the PATH of a
    NAME=PATH one, inside their ``--out`` folder), and theirs, in README order."""
    commands = readme_commands()
    earlier = commands[:commands.index(command)]
    paths = [PurePosixPath(w.partition("=")[2] if "=" in w and not w.startswith("-") else w)
             for w in shlex.split(command)]
    found = {c for c in earlier if (out := _out_folder(c))
             and any(p == PurePosixPath(out) or PurePosixPath(out) in p.parents for p in paths)}
    found |= {before for c in found for before in producers(c)}
    return sorted(found, key=commands.index)


def run_command(command: str, clone: Path, log_dir: Path) -> str:
    """Runs a README command in ``clone``; returns what rank 0 printed."""
    words = shlex.split(command)
    if words[0] not in ("torchrun", "python"):  # anything else as the shell runs it
        proc = subprocess.run(command, shell=True, cwd=clone, capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, **OFFLINE, PYTHONPATH=str(clone)))
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout
    if words[0] == "torchrun":
        nproc, (script, *args) = torchrun_words(words)
    else:
        nproc, (script, *args) = 1, (words[2:] if words[1] == "-m" else words[1:])
    if script.endswith(".py") and "--epochs" in (clone / script).read_text():
        args = [*args, *EPOCHS]
    return launch_as_torchrun(nproc, script, args, clone, log_dir, torchrun=words[0] == "torchrun")[0]


@pytest.mark.parametrize("command", [pytest.param(c, marks=[pytest.mark.slow] if c in SLOW else [])
                                     for c in readme_commands()])
def test_readme_command_runs_on_a_fresh_clone_offline(command, fresh_clone, tmp_path):
    if command in SKIPPED:
        pytest.skip(SKIPPED[command])
    dataset = re.search(r"--dataset (\w+)", command)
    if dataset and dataset[1] != "SBM" and not (fresh_clone / "data" / dataset[1] / "raw").is_dir():
        pytest.skip(f"Planetoid raw files not found at {SHARED}")
    for before in producers(command):  # run on their own (-k, --lf, a worker restarted): what it reads first
        if not (fresh_clone / str(_out_folder(before))).exists():
            run_command(before, fresh_clone, tmp_path / "before")
    out = run_command(command, fresh_clone, tmp_path)
    assert out.strip(), f"{command} printed nothing"
    assert "\r" not in out, f"{command}: a progress bar in its log (not a terminal):\n{out[:2000]}"
    assert not warnings_in_logs(tmp_path), f"{command}: {warnings_in_logs(tmp_path)[:10]}"
    if re.match(r"torchrun .* examples/train_gcn\.py$", command):  # the main job's first line
        assert re.search(r"^P=\d+ dataset=SBM .*\| graph [0-9.]+s, partition [0-9.]+s, shard [0-9.]+s$",
                         out, re.M), out[:2000]


def test_commands_reading_an_earlier_commands_output_run_it_first():
    """``graph_to_npy.py --out graph/`` -> ``partition --x graph/x.npy ... --out sbm-parts/`` ->
    ``train_gcn.py --partition-dir sbm-parts/``: each test of the chain passes alone."""
    commands = readme_commands()
    to_npy = next(c for c in commands if "graph_to_npy.py" in c)
    partition = next(c for c in commands if c.startswith("python -m pyg_sparsecomm partition ") and "graph/" in c)
    train = next(c for c in commands if f"--partition-dir {_out_folder(partition)}" in c)
    assert _out_folder(to_npy) == "graph/" and producers(to_npy) == []
    assert producers(partition) == [to_npy] and producers(train) == [to_npy, partition]
    assert not [c for c in commands if "examples/train_gcn.py" in c and producers(c) and c != train]


def test_readme_commands_are_found():
    commands = readme_commands()
    assert "torchrun --standalone --nproc-per-node 4 examples/train_gcn.py" in commands
    assert "pip install -e .[test]" in commands
    assert "python -m pytest -q -n 2 --dist loadgroup --durations=25 tests" in commands
    assert not [c for c in commands if "#" in c or "\\" in c or "&&" in c], commands
