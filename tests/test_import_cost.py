"""What an import loads (issue 57): the lazy packages load a module at the first use of one of its names,
so ``import pyg_sparsecomm.nn`` loads a handful of the package's modules and nothing of ``link/``, and
the layers themselves (``distribute``) load nothing of ``link/`` either (LightGCN and the autoencoders
import it in the calls that need it).

Each import runs in a fresh interpreter (a clean ``sys.modules``); the bars are module counts, not times.
"""
import json
import subprocess
import sys

import pytest

#: the processes run one at a time and mostly wait for their imports (tests/core_sharing.py)
pytestmark = pytest.mark.one_core

NAME = "pyg_sparsecomm"

#: code -> the most modules of the package it may load (before issue 57: 3, 129, 46 and 129); the root
#: loads graph/dataset_lock (a PyG dataset's files built once, issue 54) with its package
BARS = {
    "import pyg_sparsecomm": 5,
    "import pyg_sparsecomm.nn": 10,
    # (before issue 57 item 4: 78, the heterogeneous loaders' dispatch; +2 since issue 54's dataset lock, graph/)
    "import pyg_sparsecomm.loader": 7,
    "import pyg_sparsecomm.partition": 42,
    "from pyg_sparsecomm import distribute": 115,
}


def loaded_after(code: str) -> list[str]:
    """The package's modules a fresh interpreter has loaded after running ``code``."""
    report = f"import json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == {NAME!r})))"
    done = subprocess.run([sys.executable, "-c", f"{code}\n{report}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("code", sorted(BARS))
def test_an_import_loads_at_most_its_bar_and_nn_nothing_of_link(code):
    loaded = loaded_after(code)
    assert NAME in loaded, loaded  # the report saw the package
    assert len(loaded) <= BARS[code], f"{code} loads {len(loaded)} modules of the package (bar {BARS[code]}): {loaded}"
    if "nn" in code or "distribute" in code:
        link = [m for m in loaded if m == f"{NAME}.link" or m.startswith(f"{NAME}.link.")]
        assert not link, f"{code} loads link/: {link}"


def test_lazy_names_resolve_after_their_modules_loaded_by_path():
    """A name both exported and a submodule (``nn.distribute``, ``link.negative_sampling``) stays the
    export when the module is imported by its path first, as an eager re-export kept it."""
    code = ("import pyg_sparsecomm.nn.distribute, pyg_sparsecomm.link.negative_sampling\n"
            "import pyg_sparsecomm.nn as nn, pyg_sparsecomm.link as link\n"
            "assert callable(nn.distribute) and nn.distribute.__module__ == 'pyg_sparsecomm.nn.distribute'\n"
            "assert link.negative_sampling.__module__ == 'pyg_sparsecomm.link.shard_negatives'\n"
            "from pyg_sparsecomm.nn import layer_rule\n"
            "from torch_geometric.nn import GCNConv\n"
            "assert layer_rule(GCNConv).aggregation == 'spmm'  # PyG's rules loaded with the lookup")
    assert f"{NAME}.nn.rules.pyg" in loaded_after(code)
