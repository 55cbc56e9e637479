"""``distribute()`` first checks that every rank built the same model.

``distribute()`` copies rank 0's parameters and buffers to every rank (one flat broadcast per
dtype) and later sums gradients in buckets of the same layout.  Ranks that built different models
(another number of layers, other widths or options) would meet there: gloo aborts the process of a
rank whose flat buffer is smaller than rank 0's (``op.preamble.length <= op.nbytes``, a C++ abort
without a Python error), and copies a prefix of rank 0's values into a larger one, silently; the
layers' first-use check then finds different parameters, whose only cure named there is the
one already taken (``distribute(model)``).  Here every rank compares the model's structure (the
names, shapes and dtypes of its parameters and buffers) before anything is copied: one host
all-gather of a digest; only when they differ are the structures gathered, to name the first
difference.
"""
import torch
import torch.distributed as dist
from torch.nn.parameter import is_lazy

from ..comm.group import host_all_gather, world_size
from ..comm.peer_failure import failures_named
from .runtime.first_use import _text_digest


def structure(module: torch.nn.Module) -> list[str]:
    """``"name: [shape] dtype"`` of every parameter and buffer of ``module`` (``"name: lazy"``
    for a parameter not yet materialised), in registration order."""
    tensors = [*module.named_parameters(), *module.named_buffers()]
    return [f"{name}: lazy" if is_lazy(t) else f"{name}: {list(t.shape)} {str(t.dtype).removeprefix('torch.')}"
            for name, t in tensors]


def _first_difference(rank0: list[str], other: list[str], r: int) -> str:
    """Where rank ``r``'s :func:`structure` (``other``) first differs from rank 0's."""
    for a, b in zip(rank0, other, strict=False):
        if a != b:
            return f"rank 0 has {a}, rank {r} has {b}"
    n = min(len(rank0), len(other))
    longer, who = (rank0, "rank 0") if len(rank0) > n else (other, f"rank {r}")
    return f"{who} has {len(longer) - n} more, from {longer[n]}"


def check_same_model(module: torch.nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Raises ``ValueError`` on every rank of ``group`` unless every rank's ``module`` has the same
    :func:`structure` (collective: every rank calls it for the same model, as ``distribute()``).

    Args:
        module (torch.nn.Module): the model ``distribute()`` is given.
        group (ProcessGroup, optional): the ranks holding a replica. (default: all)
    """
    if world_size(group) == 1:
        return
    mine = structure(module)
    if len({row[0] for row in host_all_gather([_text_digest("\n".join(mine))], group)}) == 1:
        return
    every: list = [None] * world_size(group)
    with failures_named("distribute()'s comparison of the ranks' models", group):
        dist.all_gather_object(every, mine, group=group)
    differ = [f"  {_first_difference(every[0], theirs, r)}" for r, theirs in enumerate(every) if theirs != every[0]]
    raise ValueError("distribute(): the ranks built different models (every rank raises this error), so rank 0's "
                     "parameters cannot be copied to every rank:\n" + "\n".join(differ) +
                     "\nBuild the same model on every rank: the same layers, widths and options (a value read "
                     "per rank, such as a rank's own data or a command-line argument, must be equal on every rank)")
