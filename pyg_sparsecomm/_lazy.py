"""The package's one lazy-export mechanism (PEP 562): a package names what it exports and the module
that defines each name; the module loads at the first lookup of one of its names.

Why lazily: ``import pyg_sparsecomm.partition`` (or ``from pyg_sparsecomm import SparsityAwarePartitioner``)
must not import the layers, the SpMM algorithms or the one-sided engine, and ``import pyg_sparsecomm.rdma``
must not initialise MPI; only what a user touches is imported.

A name may be both an export and a submodule (``pyg_sparsecomm.nn.distribute``: the function and its
module): the import system binds a submodule to its package's attribute when it loads it, which would
hide the export once anything imported the module; a lazy package (:class:`LazyPackage`) keeps the
export, as an eager ``from .distribute import distribute`` did.
"""
import importlib
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any


class LazyPackage(types.ModuleType):
    """A package of :func:`lazy_exports`: a submodule loaded by the name of an export does not replace it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}" \
                and name in self.__dict__.get("__lazy_exports__", ()):
            return  # the import system binding the submodule: the export of that name keeps it
        super().__setattr__(name, value)


def lazy_exports(package: str, exports: dict[str, str], moved: dict[str, str] | None = None,
                 renamed: dict[str, tuple[str, str]] | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package (str): the package's ``__name__``.
        exports (dict[str, str]): public name -> the module, relative to ``package``, that defines it.
        moved (dict[str, str], optional): names that used to be exported here -> the module they are now
            imported from (absolute); looking one up warns with a :class:`DeprecationWarning` naming the new
            import, then returns it. (default: :obj:`None`)
        renamed (dict[str, tuple[str, str]], optional): deprecated aliases, kept for one release: old name ->
            (the export of ``package`` it now is, why); looking one up warns with a :class:`DeprecationWarning`
            naming the new name and why, then returns the new name's value (the same object).
            (default: :obj:`None`)
    """
    moved, renamed = moved or {}, renamed or {}
    sys.modules[package].__class__ = LazyPackage
    vars(sys.modules[package])["__lazy_exports__"] = frozenset(exports)

    def __getattr__(name: str) -> Any:
        module = importlib.import_module(package)
        if name in exports:
            value = getattr(importlib.import_module(exports[name], package), name)
            setattr(module, name, value)  # later lookups skip this function
            return value
        if name in moved:
            warnings.warn(f"{package}.{name} moved: import it with 'from {moved[name]} import {name}' "
                          f"(it is no longer exported by {package})", DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(moved[name]), name)
        if name in renamed:
            new, why = renamed[name]
            warnings.warn(f"{package}.{name} is deprecated: use {new} ({why}); the old name is an alias of it "
                          f"and goes in the next release", DeprecationWarning, stacklevel=2)
            return __getattr__(new)
        if importlib.util.find_spec(f"{package}.{name}") is not None:  # a subpackage or module: pyg_sparsecomm.nn
            return importlib.import_module(f".{name}", package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *exports})

    return __getattr__, __dir__
