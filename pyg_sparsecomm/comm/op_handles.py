"""Python objects named by string handles, for custom ops: a custom op's arguments are tensors and
plain values, so an op that runs an object's eager code (an exchanger, a layer call's checks, an
adjacency's product) takes its handle.  A string, because dynamo may turn an integer attribute into a
symbolic one; kept by weak reference, so a compiled graph does not keep a shard alive.
"""
import itertools
import weakref
from typing import Any


class OpHandles:
    """The objects of one custom op by handle.

    Args:
        op (str): the op's name, in errors (``"pyg_sparsecomm::halo_exchange"``).
        outlives (str): what a compiled graph outlived when a handle is gone, in errors.
    """

    _count = itertools.count()  # one count for every registry: no handle names two objects

    def __init__(self, op: str, outlives: str) -> None:
        self.op, self.outlives = op, outlives
        self.objects: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

    def register(self, obj: Any, kind: str = "") -> str:
        """A new handle of ``obj`` (``kind`` prefixes it), valid while ``obj`` lives."""
        handle = f"{kind}{next(OpHandles._count)}"
        self.objects[handle] = obj
        return handle

    def get(self, handle: str, what: str) -> Any:
        """The object of ``handle``; a ``RuntimeError`` naming ``what`` and the fix when it is gone."""
        obj = self.objects.get(handle)
        if obj is None:
            raise RuntimeError(f"{self.op}: {what} {handle} is gone (a compiled graph outlived {self.outlives}); "
                               f"call torch._dynamo.reset() or compile again")
        return obj
