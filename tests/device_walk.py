"""``tensors_not_on(obj, device)``: the tensors reachable from an object that are not on ``device``.

A generic walker for the device tests: moving a package object ``.to("meta")`` must move every
tensor it holds (a tensor left on the CPU crashes the first CUDA kernel that mixes it with a
moved one, or silently runs on the CPU).  It follows tensors, containers (dicts, lists, tuples,
sets), dataclasses, PyG storages, ``torch.nn.Module`` s and the ``__dict__`` / ``__slots__`` of
this package's and PyG's own objects; other objects (process groups, modules of other libraries, functions) are leaves.
"""
import dataclasses
from typing import Any

import torch

#: objects of these packages are walked into; others are leaves
_WALKED_MODULES = ("pyg_sparsecomm", "torch_geometric", "device_walk", "test_")


def _children(obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        fields = getattr(obj, "_fields", None)  # NamedTuple: by field name
        return [(f".{fields[i]}" if fields else f"[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, (set, frozenset)):
        return [(f"{{{i}}}", v) for i, v in enumerate(obj)]
    if isinstance(obj, type) or callable(obj) and not hasattr(obj, "__dict__"):
        return []
    module = type(obj).__module__ or ""
    if not (dataclasses.is_dataclass(obj) or module.startswith(_WALKED_MODULES)
            or isinstance(obj, torch.nn.Module)):
        return []
    out = list(getattr(obj, "__dict__", {}).items())
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                out.append((name, getattr(obj, name)))
    return [(f".{k}", v) for k, v in out]


def tensors(obj: Any, path: str = "obj") -> list[tuple[str, torch.Tensor]]:
    """Every distinct tensor reachable from ``obj``, with its path (``obj.adj.plan.n_id``, ...)."""
    found, seen, stack = [], set(), [(path, obj)]
    while stack:
        where, item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, (str, bytes, int, float, bool)):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append((where, item))
            if type(item) is not torch.Tensor:  # a subclass's own tensors (a batch's n_id: its rows)
                stack.extend((f"{where}.{name}", v) for name, v in vars(item).items() if isinstance(v, torch.Tensor))
            continue
        stack.extend((where + name, child) for name, child in _children(item))
    return sorted(found, key=lambda pair: pair[0])


def tensors_not_on(obj: Any, device: torch.device | str, path: str = "obj") -> list[str]:
    """``"path on device"`` for every tensor under ``obj`` that is not on ``device``."""
    device = torch.device(device)
    return [f"{where} on {t.device}" for where, t in tensors(obj, path) if t.device != device]
