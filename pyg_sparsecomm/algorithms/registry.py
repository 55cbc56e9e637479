"""A name -> class registry whose entries may be declared before their module is imported.

``algorithm="rdma"`` lives in a module that imports the one-sided engine (:mod:`pyg_sparsecomm.rdma`);
declaring its name with :meth:`LazyRegistry.declare` keeps it in every listing (``sorted(ALGORITHMS)``,
``"rdma" in ALGORITHMS``, the CLI's choices) while the module is imported only at the first lookup
of the class (``ALGORITHMS["rdma"]``, ``.items()``), i.e. when the algorithm is used or compared.
"""
import importlib
from collections.abc import Iterator, MutableMapping
from typing import TypeVar

T = TypeVar("T")


class LazyRegistry(MutableMapping[str, T]):
    """A mutable mapping ``name -> value`` in which :meth:`declare` d names load their module on lookup.

    Args:
        what (str): what the values are (for error messages), e.g. ``"algorithm"``.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._registered: dict[str, T] = {}
        self._declared: dict[str, str] = {}  # declared name -> module whose import registers it

    def declare(self, name: str, module: str) -> None:
        """Lists ``name`` now; its value is registered by importing ``module`` at the first lookup."""
        if name not in self._registered:
            self._declared[name] = module

    def is_loaded(self, name: str) -> bool:
        """Whether ``name``'s value is registered (``False`` for a declared name not looked up yet)."""
        return name in self._registered

    def __getitem__(self, name: str) -> T:
        if name not in self._registered and name in self._declared:
            module = self._declared[name]
            importlib.import_module(module)  # registers the value through __setitem__
            if name not in self._registered:
                raise RuntimeError(f"importing {module} did not register the {self.what} {name!r} it was "
                                   f"declared for")
        return self._registered[name]

    def __setitem__(self, name: str, value: T) -> None:
        self._registered[name] = value
        self._declared.pop(name, None)

    def __delitem__(self, name: str) -> None:
        if name in self._registered:
            del self._registered[name]
        else:
            del self._declared[name]

    def __contains__(self, name: object) -> bool:
        return name in self._registered or name in self._declared

    def __iter__(self) -> Iterator[str]:
        return iter([*self._registered, *self._declared])

    def __len__(self) -> int:
        return len(self._registered) + len(self._declared)

    def __repr__(self) -> str:
        return f"LazyRegistry({sorted(self)})"
