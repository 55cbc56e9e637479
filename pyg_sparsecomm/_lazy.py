"""The package's one lazy-export mechanism (PEP 562): a package names what it exports and the module
that defines each name; the module loads at the first lookup of one of its names.

Why lazily: ``import pyg_sparsecomm.partition`` (or ``from pyg_sparsecomm import SparsityAwarePartitioner``)
must not import the layers, the SpMM algorithms or the one-sided engine, and ``import pyg_sparsecomm.rdma``
must not initialise MPI; only what a user touches is imported.
"""
import importlib
import importlib.util
import warnings
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str], moved: dict[str, str] | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package (str): the package's ``__name__``.
        exports (dict[str, str]): public name -> the module, relative to ``package``, that defines it.
        moved (dict[str, str], optional): names that used to be exported here -> the module they are now
            imported from (absolute); looking one up warns with a :class:`DeprecationWarning` naming the new
            import, then returns it. (default: :obj:`None`)
    """
    moved = moved or {}

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
        if importlib.util.find_spec(f"{package}.{name}") is not None:  # a subpackage or module: pyg_sparsecomm.nn
            return importlib.import_module(f".{name}", package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *exports})

    return __getattr__, __dir__
