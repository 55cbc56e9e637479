"""Modules that 0.3.0 moved into folders, importable by their 0.2 paths for one more release (and
the heterogeneous loaders' modules, merged into the loaders after 0.3.0, by theirs).

0.3.0 moved every root module into the folder of its step (``pyg_sparsecomm.runtime`` became
``pyg_sparsecomm.launch.runtime``, ``pyg_sparsecomm.datasets`` split into ``graph.datasets`` and
``launch.datasets``, ...) without keeping the old paths, so scripts written against 0.2's README
stopped at ``ModuleNotFoundError``. A finder on ``sys.meta_path`` answers each old path with a module
that warns once (:class:`DeprecationWarning` naming the new import) and looks every name up in the
module(s) it moved to, loading them at first use.
"""
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

#: 0.2's module (relative to the package) -> the modules its names live in now, looked up in order
MOVED_MODULES = {
    "runtime": ("launch.runtime",), "startup": ("launch.startup",), "attempts": ("launch.attempts",),
    "datasets": ("graph.datasets", "launch.datasets"), "inputs": ("graph.inputs",), "io": ("graph.io",),
    "offline": ("graph.offline",), "_validate": ("graph.validate",),
    "cost": ("algorithms.cost",), "layout": ("algorithms.layout",), "grid": ("comm.grid",),
    "adj": ("plan.halo_adj",), "relation_adj": ("plan.relation_adj",), "sorted_keys": ("plan.sorted_keys",),
    "stats": ("plan.stats",),
    "data": ("store.rank_data",), "data_hetero": ("store.rank_hetero",), "store_format": ("store.file_format",),
    "store_hetero": ("store.hetero_files",), "from_files": ("store.from_files",),
    "atomic_dir": ("store.atomic_dir",), "edges_by_part": ("store.edges_by_part",),
    "part_in_edges": ("store.part_in_edges",), "streamed_save": ("store.streamed_save",),
    "cli_partition": ("cli.partition",), "cli_partition_stats": ("cli.partition_stats",), "plots": ("cli.plots",),
    "testing_warm": ("testing.warm",),
    "grad_registry": ("training.grad_registry",), "loss_reduction": ("training.loss_reduction",),
    "per_rank": ("training.per_rank",),
}

#: modules moved after 0.3.0 (issue 57: one loader per kind) -> their names' modules now, as above
MOVED_AFTER_0_3 = {
    "loader.hetero_neighbor_loader": ("loader", "loader.shards"),
    "loader.hetero_link_loader": ("loader", "loader.hetero_link_sampler"),
    "loader.hetero_subset_loader": ("loader",),
}


def _moved(old: str) -> tuple[str, tuple[str, ...]] | None:
    """``(the release that moved it, its new modules)`` of an old module path (relative), if it moved."""
    if old in MOVED_MODULES:
        return "0.3.0", MOVED_MODULES[old]
    if old in MOVED_AFTER_0_3:
        return "0.4.0", MOVED_AFTER_0_3[old]
    return None


class MovedModule(types.ModuleType):
    """An old path's module: each name is the one of the first new module that defines it."""

    def __init__(self, name: str, targets: tuple[str, ...]) -> None:
        super().__init__(name, f"moved in 0.3.0 to {', '.join(targets)}")
        self.__targets = targets

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for target in self.__targets:
            module = importlib.import_module(target)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} (moved to {', '.join(self.__targets)}) has no "
                             f"attribute {name!r}")

    def __dir__(self) -> list[str]:
        names = set()
        for target in self.__targets:
            names |= {n for n in dir(importlib.import_module(target)) if not n.startswith("_")}
        return sorted(names)


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``<package>.<old>`` for every old module of :data:`MOVED_MODULES`."""

    def __init__(self, package: str) -> None:
        self.package = package

    def _moved(self, fullname: str) -> tuple[str, tuple[str, ...]] | None:
        if not fullname.startswith(self.package + "."):
            return None
        moved = _moved(fullname[len(self.package) + 1:])
        return None if moved is None else (moved[0], tuple(f"{self.package}.{t}" for t in moved[1]))

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if self._moved(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        moved = self._moved(spec.name)
        assert moved is not None  # find_spec answered only such names
        release, targets = moved
        new = " and ".join(targets)
        warnings.warn(f"{spec.name} moved in {release}: import from {new} instead (the old path works until 0.5)",
                      DeprecationWarning, stacklevel=2)  # warn() skips importlib's frames: the user's import line
        return MovedModule(spec.name, targets)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the names load from the new modules at first lookup."""


def install(package: str) -> None:
    """Lets ``import <package>.<old>`` find the module an old path moved to (once per interpreter)."""
    if not any(isinstance(f, MovedModuleFinder) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder(package))
