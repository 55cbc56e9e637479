"""The SpMM algorithm a ``cached=True`` layer keeps: :class:`CachedSpMM` (held by its
:class:`~.port.HaloPort`)."""
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ...compat import tensor_version
from ...plan.halo_adj import HaloAdj


class CachedSpMM:
    """The SpMM algorithm a ``cached=True`` layer built over its cached normalised adjacency.

    PyG's ``cached=True`` layers (``GCNConv``) compute their normalisation once and then
    propagate over the same ``edge_index`` and weights every call; the algorithm built on them
    (with its CSR, its transpose and, for ``"rdma"``, its engine lease) is kept too.  It is reused
    while the call's local edge index and weights are the same tensors (at the same version) on
    the same plan and dtype; weights that need a gradient are never kept (their autograd graph is
    per step)."""

    def __init__(self) -> None:
        self.spmm: Any = None
        self._key: tuple = ()
        self._refs: list[Callable[[], Any]] = []

    @staticmethod
    def _key_of(edge_index: Tensor, weight: Tensor | None, dtype: torch.dtype, algorithm: str) -> tuple:
        return (dtype, algorithm, tensor_version(edge_index), None if weight is None else tensor_version(weight))

    def get(self, edge_index: Tensor, weight: Tensor | None, like: HaloAdj, dtype: torch.dtype,
            algorithm: str) -> Any:
        """The kept algorithm if it was built on these inputs, else ``None``."""
        inputs = (edge_index, weight, like.plan)
        same = bool(self._refs) and all(r() is t for r, t in zip(self._refs, inputs, strict=True))
        return self.spmm if same and self._key == self._key_of(edge_index, weight, dtype, algorithm) else None

    def keep(self, spmm: Any, edge_index: Tensor, weight: Tensor | None, like: HaloAdj, dtype: torch.dtype,
             algorithm: str) -> None:
        if weight is not None and weight.requires_grad:
            return
        self.spmm, self._key = spmm, self._key_of(edge_index, weight, dtype, algorithm)
        self._refs = [weakref.ref(edge_index), (lambda: None) if weight is None else weakref.ref(weight),
                      weakref.ref(like.plan)]

    def __getstate__(self) -> dict:
        return {"spmm": None, "_key": (), "_refs": []}  # a cache: a copy builds its own
