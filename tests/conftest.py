import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from pyg_templates import render_fused_templates

from pyg_sparsecomm.partition import set_hypergraph_threads

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# debug mode: every collective checks its tensors are on the group's device (inherited by the workers)
os.environ.setdefault("PYG_SPARSECOMM_CHECK_DEVICES", "1")

#: ``pytest -n 2 --dist loadgroup``: the workers share the cores (see core_sharing.py)
pytest_plugins = ["core_sharing"]

#: the Planetoid raw files (PLANETOID_RAW overrides the default, as for the benchmarks)
SHARED = Path(os.environ.get("PLANETOID_RAW", Path(__file__).resolve().parents[1].parent / "shared" / "data"
                             / "planetoid"))


@pytest.fixture(scope="session")
def planetoid_root(tmp_path_factory):
    """A temporary Planetoid root holding copies of the shared raw files (never downloads)."""
    if not SHARED.is_dir():
        pytest.skip(f"Planetoid raw files not found at {SHARED} (the project's shared/ data folder, "
                    f"beside the repository; a plain clone has none): dataset tests skipped")
    root = tmp_path_factory.mktemp("planetoid")
    for name in ("Cora", "CiteSeer"):
        shutil.copytree(SHARED / name / "raw", root / name / "raw")
    return str(root)


def pytest_configure(config):
    """Mt-KaHyPar's deterministic partition does not depend on its threads: pytest's process
    partitions with two (in a hook: test_readme imports this module, and the fork server of
    ``launch`` imports test_readme, so module-level code here would give every rank two)."""
    set_hypergraph_threads(min(2, os.cpu_count() or 1))
    render_fused_templates()  # PyG's per-class propagate template: see pyg_templates.py


def pytest_collection_finish(session):
    """The fork server of ``launch`` imports pytest, the collected test modules and
    ``forkserver_warm`` once: each rank imports the module of the function it runs, and what that
    imports, after the fork (pytest alone is 0.2 s of CPU per rank; the suite starts several hundred
    ranks).  Python 3.11's fork server does not take this process's ``sys.path``: it finds the test
    folders on ``PYTHONPATH``."""
    if not session.items:  # xdist's controller runs no test
        return
    import forkserver_warm  # noqa: F401 - preloaded below

    from pyg_sparsecomm.testing import preload, start_fork_server
    modules = {item.module for item in session.items if getattr(item, "module", None) is not None}
    folders = sorted({str(Path(m.__file__).parent) for m in modules} | {str(Path(__file__).parent)})
    os.environ["PYTHONPATH"] = os.pathsep.join([*folders, *filter(None, [os.environ.get("PYTHONPATH")])])
    try:
        preload("pytest", "forkserver_warm", *sorted(m.__name__ for m in modules if m.__name__ in sys.modules))
    except RuntimeError:  # a session inside a process whose fork server runs (test_conftest's inner pytest):
        return            # that server stays, and its ranks import what it lacks, as without preload
    # the server imports all that (about 12 s of one core) beside the first tests, not inside the first
    # launch: under -n 2 that launch holds the cores alone (core_sharing.py) while the server imports
    start_fork_server()


def pytest_collection_modifyitems(items):
    """Tests that read the Planetoid files carry the ``dataset`` marker (``-m "not dataset"``)."""
    for item in items:
        if "planetoid_root" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.dataset)


@pytest.fixture(scope="session")
def drill(tmp_path_factory) -> Path:
    """The output folder of one real ``torchrun --max-restarts=1`` run of ``checkpoint_drill.py``
    (every configuration; rank 1 dies once, the job restarts and resumes), shared by
    tests/checkpoint/test_checkpoint.py and tests/launch/test_attempts.py: a torchrun job starts five interpreters."""
    from checkpoint_drill import CONFIGS
    from torchrun_job import torchrun
    out = tmp_path_factory.mktemp("drill")
    done = torchrun(Path(__file__).parent / "checkpoint_drill.py", 2, str(out), *CONFIGS, max_restarts=1,
                    timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "exitcode: 3" in done.stderr, "rank 1 did not die: the job was not restarted"
    return out


@pytest.fixture(scope="session")
def hetero_results():
    """Per rank, ``{(P, configuration): results}`` of tests/nn's test_hetero_models, test_hetero_gcn and
    test_hetero_layers: one launch of four ranks runs every configuration of the three at P = 1..4 (a
    launch's start-up on two cores costs more than all their configurations)."""
    from test_hetero_layers import launch_all
    return launch_all()
