"""The package's import structure: no import cycle, ``nn/`` does not import ``loader/``, the
partitioner loads neither the exchanges, the SpMM algorithms, the layers nor the RDMA engine, the
plan imports no ``torch.distributed``, the root holds at most 10 flat modules, every public name is
still importable, and a missing optional dependency names the extra that installs it.

The import graph is static and counts every import statement of a module, wherever it stands: at
module level, in a function, under ``if TYPE_CHECKING:``, in ``try``/``except`` (relative ones
resolved; ``__init__`` modules included), since each is a dependency a reader follows and an import
a call may run.  What a process really loads is checked in a
process that has not imported the package: a fork of this one with every module of the package
(and any module a check blocks) taken out of ``sys.modules`` first, so each check re-imports the
package from nothing, as a fresh interpreter would, without paying a fresh interpreter's seconds
of importing torch and PyG (torch and PyG do not import the package, so keeping them is faithful).
"""
import ast
import multiprocessing as mp
import pathlib
import sys

import pytest

import pyg_sparsecomm

#: the forked checks run one child at a time (tests/core_sharing.py)
pytestmark = pytest.mark.one_core

PACKAGE = pathlib.Path(pyg_sparsecomm.__file__).parent
NAME = "pyg_sparsecomm"


def _modules(package: pathlib.Path = PACKAGE, name: str = NAME) -> dict[str, pathlib.Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = [name, *path.relative_to(package).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(tree: ast.AST):
    """Every import statement of a module: at module level, in functions and classes, under
    ``if TYPE_CHECKING:``, in ``try``/``except`` and ``with`` blocks."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph(package: pathlib.Path = PACKAGE, name: str = NAME) -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere (see the module doc; ``from .x import y``
    imports ``x.y`` when ``y`` is a module, else ``x``)."""
    modules = _modules(package, name)
    graph = {}
    for module, path in modules.items():
        parent = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets = set()
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(parent[:len(parent) - node.level + 1] + ([node.module] if node.module else []))
            submodules = {f"{base}.{a.name}" for a in node.names} & modules.keys()
            targets |= submodules if len(submodules) == len(node.names) else submodules | {base}
        graph[module] = {t for t in targets if t in modules and t != module}
    return graph


def knots(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (each a knot of
    import cycles), their modules sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_cycle_outside_nn():
    """No knot of import cycles holds a module outside ``nn/`` (the whole-package test above also
    covers ``nn/``)."""
    outside = [knot for knot in knots(import_graph())
               if any(m != f"{NAME}.nn" and not m.startswith(f"{NAME}.nn.") for m in knot)]
    assert not outside, outside


def test_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert knots({"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"e"}, "e": {"d"}}) == [["a", "b"], ["d", "e"]]
    assert knots({"a": {"b"}, "b": set()}) == []


def test_graph_resolves_relative_imports():
    graph = import_graph()
    assert f"{NAME}.sampling.sampled_adj" in graph[f"{NAME}.nn.trim"]
    assert f"{NAME}.partition.hypergraph" in graph[f"{NAME}.partition"]  # from . import hypergraph
    assert f"{NAME}.plan.halo_adj" in graph[f"{NAME}.sampling.sampled_adj"]
    assert f"{NAME}.plan.halo_adj" in graph[NAME]  # the root's TYPE_CHECKING imports
    assert f"{NAME}.store.from_files" in graph[f"{NAME}.cli.partition"]  # an import in a function


def test_graph_counts_every_import_statement(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from .a import A\n")
    (package / "a.py").write_text("def f():\n    from .sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("try:\n    import pkg.c\nexcept ImportError:\n    pass\n")
    (package / "c.py").write_text("class C:\n    def g(self):\n        from . import a\n")
    graph = import_graph(package, "pkg")
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.sub.b"}, "pkg.sub": set(), "pkg.sub.b": {"pkg.c"},
                     "pkg.c": {"pkg.a"}}
    assert knots(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_root_holds_at_most_10_flat_modules():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= 10, flat


def test_plan_imports_no_torch_distributed():
    """The plan is computed for any ``P`` in one process: no module of ``plan/`` imports
    ``torch.distributed`` (anywhere in it), and loading all of them loads nothing of the exchanges,
    the algorithms or the layers (checked in a fresh process)."""
    found = []
    for module, path in _modules().items():
        if module.startswith(f"{NAME}.plan"):
            for node in _imports(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
                found += [f"{module}: {n}" for n in names if n == "torch.distributed"
                          or n.startswith("torch.distributed.")]
    assert not found, found
    plans = sorted(m for m in _modules() if m.startswith(f"{NAME}.plan."))
    loaded = _loaded_after("".join(f"import {m}\n" for m in plans))
    assert set(plans) <= set(loaded)
    heavy = [m for m in loaded if m.startswith((f"{NAME}.comm", f"{NAME}.algorithms", f"{NAME}.nn"))]
    assert not heavy, heavy


#: what each folder may import from the package's other folders and root modules, as ARCHITECTURE.md's
#: table says (every import statement counted); a new edge must be added here and there, or avoided
FOLDER_IMPORTS = {
    "graph": {"compat"},
    "partition": {"graph", "plan", "sampling", "compat", "memory", "_lazy"},
    "plan": {"graph", "_lazy"},
    "store": {"graph", "plan", "partition", "comm", "memory", "compat", "_lazy"},
    "comm": {"plan", "compat", "_lazy"},
    "algorithms": {"comm", "plan", "partition", "rdma", "_lazy"},
    "nn": {"algorithms", "comm", "graph", "plan", "sampling", "training", "link", "launch", "compat", "_lazy"},
    "sampling": {"plan", "graph", "_lazy"},
    "loader": {"sampling", "plan", "comm", "graph", "store", "link", "training", "_lazy"},
    "link": {"plan", "comm", "graph", "sampling", "training", "_lazy"},
    "training": {"comm", "graph", "compat", "_lazy"},
    "launch": {"graph", "partition", "plan", "store", "comm", "link", "memory", "_lazy"},
    "checkpoint": {"store", "nn", "plan", "comm", "graph", "_lazy"},
    "rdma": {"comm", "plan", "launch", "compat", "_lazy"},
    "cli": {"graph", "partition", "plan", "store", "launch", "memory", "porting"},
    "porting": {"sampling"},
    "testing": {"", "comm", "nn", "_lazy"},  # "": the root package (its export table)
}


def _folder(module: str) -> str:
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


def test_folders_import_what_the_architecture_document_says():
    graph = import_graph()
    found = sorted(f"{m} imports {t}" for m, targets in graph.items() for t in targets
                   if _folder(m) in FOLDER_IMPORTS and _folder(t) != _folder(m)
                   and _folder(t) not in FOLDER_IMPORTS[_folder(m)])
    assert not found, "not in ARCHITECTURE.md's table (tests/test_layering.py FOLDER_IMPORTS):\n" + "\n".join(found)


def test_nn_imports_nothing_from_loader():
    graph = import_graph()
    found = sorted(f"{m} imports {t}" for m, targets in graph.items() if m.startswith(f"{NAME}.nn")
                   for t in targets if t == f"{NAME}.loader" or t.startswith(f"{NAME}.loader."))
    assert not found, found


def _run_without_package(code: str, blocked: list[str], results) -> None:
    """In the forked child: forget the package and ``blocked``, run ``code``, send back what it printed
    and the package's modules it loaded (or the error it raised)."""
    import contextlib
    import io
    import traceback
    for name in [m for m in sys.modules if m == NAME or m.startswith(f"{NAME}.")
                 or any(m == b or m.startswith(f"{b}.") for b in blocked)]:
        del sys.modules[name]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError, as when not installed
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<check>", "exec"), {"__name__": "__check__"})
        results.put((out.getvalue(), sorted(m for m in sys.modules if m.startswith(NAME)), None))
    except BaseException:  # noqa: BLE001 -- reported to the test
        results.put((out.getvalue(), [], traceback.format_exc()))


def _in_process_without_package(code: str, blocked: list[str] = ()) -> tuple[str, list[str]]:
    """``(printed, loaded)``: what ``code`` printed and the package's modules loaded after it ran in a
    process without the package (and without ``blocked``), see the module doc."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_run_without_package, args=(code, list(blocked), results))
    child.start()
    printed, loaded, error = results.get(timeout=300)
    child.join(timeout=30)
    assert error is None, error
    return printed, loaded


def _loaded_after(code: str) -> list[str]:
    """The package's modules a process that had not imported it has loaded after running ``code``."""
    return _in_process_without_package(code)[1]


@pytest.mark.parametrize("code", ["import pyg_sparsecomm.partition",
                                  "from pyg_sparsecomm import SparsityAwarePartitioner"])
def test_partitioner_loads_neither_algorithms_nor_rdma(code):
    loaded = _loaded_after(code)
    assert f"{NAME}.partition.partitioner" in loaded
    heavy = [m for m in loaded if m.startswith((f"{NAME}.comm", f"{NAME}.algorithms", f"{NAME}.rdma", f"{NAME}.nn"))]
    assert not heavy, heavy


def test_every_public_name_importable_and_rdma_listed_not_loaded():
    import pyg_sparsecomm.loader as loader
    import pyg_sparsecomm.sampling as sampling
    for name in pyg_sparsecomm.__all__:
        assert getattr(pyg_sparsecomm, name) is not None, name
    assert set(pyg_sparsecomm.__all__) <= set(dir(pyg_sparsecomm))
    for name in ("SampledAdj", "trim_to_layer", "NeighborSampling", "NodeSubsetSampling", "global_batches"):
        assert getattr(loader, name) is getattr(sampling, name), name
    assert pyg_sparsecomm.nn.distribute is pyg_sparsecomm.distribute  # subpackages as attributes
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        pyg_sparsecomm.not_a_name  # noqa: B018
    # every public name, and the algorithms' listing, without the RDMA engine
    code = """
from pyg_sparsecomm import *
from pyg_sparsecomm.algorithms import ALGORITHMS
assert "rdma" in ALGORITHMS and "rdma" in sorted(ALGORITHMS) and not ALGORITHMS.is_loaded("rdma")
"""
    loaded = _loaded_after(code)
    assert f"{NAME}.nn" in loaded and not any(m.startswith(f"{NAME}.rdma") for m in loaded)
    used = _loaded_after("from pyg_sparsecomm.algorithms import ALGORITHMS, algorithm_class\n"
                         "assert algorithm_class('rdma').name == 'rdma' and ALGORITHMS.is_loaded('rdma')")
    assert f"{NAME}.algorithms.rdma" in used and f"{NAME}.rdma.engine_cache" in used
    from pyg_sparsecomm.algorithms import ALGORITHMS, RDMAStationaryC
    assert ALGORITHMS["rdma"] is RDMAStationaryC


def _errors_without(modules: list[str], snippets: list[str]) -> list[str]:
    """The ImportError message of each snippet, in one process where ``modules`` are missing."""
    runs = "".join(f"try:\n    {code}\nexcept ImportError as e:\n    print('ImportError:', e)\n"
                   f"else:\n    print('no error')\n" for code in snippets)
    return _in_process_without_package(runs, modules)[0].strip().splitlines()


def test_missing_extras_are_named():
    multiconstraint = ("import numpy as np; from pyg_sparsecomm.partition.multiconstraint import metis_multiconstraint;"
                       " metis_multiconstraint(np.array([0, 1, 2]), np.array([1, 0]), np.ones((2, 2), dtype=int), 2,"
                       " (1.1, 1.1))")
    metis = ("import torch; from pyg_sparsecomm import SparsityAwarePartitioner as S; from torch_geometric.data import "
             "Data; S(2, method='metis')(Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=4))")
    mpi = "import pyg_sparsecomm.rdma as r; r.MPIBackend()"
    messages = _errors_without(["pymetis", "pymetis._internal", "mpi4py", "mpi4py.MPI"], [multiconstraint, metis, mpi])
    assert len(messages) == 3, messages
    for message, extra in zip(messages, ["metis", "metis", "mpi"], strict=True):
        assert message.startswith("ImportError:") and f'pip install "pyg_sparsecomm[{extra}]"' in message, message


def test_lazy_registry_loads_declared_names_on_lookup(tmp_path, monkeypatch):
    from pyg_sparsecomm.algorithms.registry import LazyRegistry
    registry: LazyRegistry[int] = LazyRegistry("thing")
    (tmp_path / "declares_one.py").write_text("import registry_under_test\nregistry_under_test.REGISTRY['one'] = 1\n")
    (tmp_path / "declares_none.py").write_text("")
    module = type(sys)("registry_under_test")
    module.REGISTRY = registry
    monkeypatch.setitem(sys.modules, "registry_under_test", module)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry["zero"] = 0
    registry.declare("one", "declares_one")
    registry.declare("two", "declares_none")
    registry.declare("three", "no_such_module")
    assert sorted(registry) == ["one", "three", "two", "zero"] and len(registry) == 4 and "one" in registry
    assert not registry.is_loaded("one") and "declares_one" not in sys.modules
    assert registry["one"] == 1 and registry.is_loaded("one")
    with pytest.raises(RuntimeError, match="importing declares_none did not register the thing 'two'"):
        registry["two"]  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        registry["three"]  # noqa: B018
    assert "three" in registry  # still declared: the error repeats at the next lookup
    del registry["three"], registry["two"]
    assert dict(registry) == {"zero": 0, "one": 1}


def test_version_is_the_one_pyproject_declares():
    import re
    declared = re.search(r'^version = "([^"]+)"', (PACKAGE.parent / "pyproject.toml").read_text(), re.M)
    assert declared and declared.group(1) == pyg_sparsecomm.__version__, (declared, pyg_sparsecomm.__version__)
