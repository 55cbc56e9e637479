"""0.2's module paths (``pyg_sparsecomm.runtime``, ``pyg_sparsecomm.datasets``, ...) still import, warn
once naming the new import, and give the very objects of the modules they moved to."""
import importlib
import subprocess
import sys
import textwrap

import pytest

from pyg_sparsecomm._moved_modules import MOVED_AFTER_0_3, MOVED_MODULES


def _fresh_import(name: str):
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_old_path_warns_and_gives_the_new_modules_objects(old):
    with pytest.warns(DeprecationWarning, match=f"pyg_sparsecomm.{old} moved in 0.3.0: import from "
                                                f"pyg_sparsecomm.{MOVED_MODULES[old][0]}"):
        module = _fresh_import(f"pyg_sparsecomm.{old}")
    names = dir(module)
    assert names, old
    for target in MOVED_MODULES[old]:
        new = importlib.import_module(f"pyg_sparsecomm.{target}")
        for name in (n for n in dir(new) if not n.startswith("_")):
            if MOVED_MODULES[old].index(target) == 0 or not hasattr(
                    importlib.import_module(f"pyg_sparsecomm.{MOVED_MODULES[old][0]}"), name):
                assert getattr(module, name) is getattr(new, name), (old, name)


def test_the_names_of_0_2s_readme_import_from_their_old_paths():
    from pyg_sparsecomm.graph.datasets import rmat_graph, sbm_graph
    from pyg_sparsecomm.launch.datasets import load_dataset
    from pyg_sparsecomm.launch.runtime import init_distributed
    with pytest.warns(DeprecationWarning):
        old_runtime = _fresh_import("pyg_sparsecomm.runtime")
    with pytest.warns(DeprecationWarning):
        old_datasets = _fresh_import("pyg_sparsecomm.datasets")
    assert old_runtime.init_distributed is init_distributed
    assert (old_datasets.sbm_graph, old_datasets.rmat_graph, old_datasets.load_dataset) == (
        sbm_graph, rmat_graph, load_dataset)
    with pytest.raises(AttributeError, match="moved to pyg_sparsecomm.launch.runtime.*no attribute 'nothing'"):
        old_runtime.nothing  # noqa: B018


def test_a_script_sees_the_warning_at_its_own_import_line(tmp_path):
    """Python shows a DeprecationWarning by default only when ``__main__`` triggers it: the warning
    must point at the script's line, not at importlib."""
    script = tmp_path / "old_script.py"
    script.write_text(textwrap.dedent("""
        import sys
        from pyg_sparsecomm.runtime import init_distributed
        print("imported", init_distributed.__module__)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "imported pyg_sparsecomm.launch.runtime" in done.stdout
    assert f"{script}:3: DeprecationWarning: pyg_sparsecomm.runtime moved in 0.3.0" in done.stderr, done.stderr


@pytest.mark.parametrize("old", sorted(MOVED_AFTER_0_3))
def test_the_heterogeneous_loaders_modules_import_and_warn(old):
    """The three heterogeneous loader modules merged into the loaders (issue 57): their paths import,
    warn naming the new modules, and give the loaders' classes and the helpers they defined."""
    from pyg_sparsecomm import loader
    moved = f"pyg_sparsecomm.{old} moved in 0.4.0: import from pyg_sparsecomm.loader"
    with pytest.warns(DeprecationWarning, match=moved):
        module = _fresh_import(f"pyg_sparsecomm.{old}")
    name = {"loader.hetero_neighbor_loader": "DistributedNeighborLoader",
            "loader.hetero_link_loader": "DistributedLinkNeighborLoader",
            "loader.hetero_subset_loader": "DistributedNodeSubsetLoader"}[old]
    with pytest.warns(DeprecationWarning, match=f"use {name}"):
        old_class = getattr(module, name.replace("Distributed", "DistributedHetero"))
    assert old_class is getattr(loader, name)
    for helper in {"loader.hetero_neighbor_loader": ("hetero_input_nodes", "relation_adjs"),
                   "loader.hetero_link_loader": ("supervision_relation",)}.get(old, ()):
        assert callable(getattr(module, helper)), helper


def test_a_name_that_never_existed_is_still_a_module_not_found_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("pyg_sparsecomm.no_such_module")
