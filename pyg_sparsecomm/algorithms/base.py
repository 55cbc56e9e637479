"""The interface every distributed SpMM algorithm implements."""
from abc import ABC, abstractmethod
from typing import ClassVar, Dict, Optional, Type

import torch.distributed as dist
from torch import Tensor

from ..adj import HaloAdj
from ..comm.group import check_plan_matches_group

ALGORITHMS: Dict[str, Type["SpMMAlgorithm"]] = {}


class SpMMAlgorithm(ABC):
    """Computes this rank's block row of ``A H`` from its owned rows of ``H``.

    An instance is bound to one (normalised) ``HaloAdj`` and may precompute
    per-adjacency structures in ``__init__``; ``__call__`` may be invoked many
    times and must be differentiable in ``x``.  Subclasses register themselves
    by defining ``name``; adding an algorithm touches only its own file (and the
    import in ``algorithms/__init__.py``).
    """
    name: ClassVar[str]
    #: whether gradients reach learnable edge weights (adjacency values that require grad)
    differentiates_edge_weights: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "name", None):
            ALGORITHMS[cls.name] = cls

    def __init__(self, adj: HaloAdj, group: Optional[dist.ProcessGroup] = None) -> None:
        check_plan_matches_group(adj.plan.world_size, adj.plan.rank, group)
        if not self.differentiates_edge_weights and adj.value is not None and adj.value.requires_grad:
            raise NotImplementedError(f"algorithm={self.name!r} does not differentiate edge weights; "
                                      f"use algorithm='1d' for learnable edge weights")
        self.adj, self.group = adj, group

    @abstractmethod
    def __call__(self, x: Tensor) -> Tensor:
        """``x``: ``[num_owned, f]`` owned rows of ``H``; returns ``[num_owned, f]`` rows of ``A H``."""


def make_algorithm(name: str, adj: HaloAdj, group: Optional[dist.ProcessGroup] = None) -> SpMMAlgorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name](adj, group)
