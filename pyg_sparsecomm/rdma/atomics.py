"""Remote atomic fetch-and-add on a peer-mapped int64, for the symmetric-memory backend.

PyTorch's symmetric memory exposes peer allocations as ordinary device tensors
but has no Python-level remote atomic; a one-thread Triton kernel provides it:
``tl.atomic_add`` returns the old value, and with ``scope="sys"`` /
``sem="acq_rel"`` the update is atomic with respect to every GPU that maps the
address and orders the caller's earlier writes before it (a queue handle
``put`` before the publishing ``fetch_add``, see :mod:`.queue`).  Triton ships
with the CUDA builds of PyTorch.  With ``TRITON_INTERPRET=1`` the same kernel runs
on CPU tensors, which is how the tests execute it.
"""
from __future__ import annotations

import functools

import torch


@functools.cache
def _kernel():
    try:
        import triton
        import triton.language as tl
    except ImportError as exc:
        raise ImportError("the symmetric-memory RDMA backend needs Triton for remote fetch-and-add "
                          "(installed with CUDA builds of PyTorch; `pip install triton`)") from exc

    @triton.jit
    def fetch_add_kernel(target, value, old):
        tl.store(old, tl.atomic_add(target, value, sem="acq_rel", scope="sys"))
    return fetch_add_kernel


def fetch_add(target: torch.Tensor, value: int) -> int:
    """Atomically adds ``value`` to ``target[0]`` (int64, possibly a peer's memory); returns the old value."""
    if target.dtype != torch.int64 or target.numel() < 1:
        raise ValueError(f"fetch_add needs a non-empty int64 tensor, got {target.dtype} with {target.numel()} elements")
    old = torch.empty(1, dtype=torch.int64, device=target.device)
    _kernel()[(1,)](target, value, old)
    return int(old.item())  # .item() waits for the kernel
