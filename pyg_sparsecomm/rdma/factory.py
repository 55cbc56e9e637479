"""``make_backend``: the one-sided backend for a device.

Kept apart from :mod:`.backend` (the interface both backends import), so that the
interface never imports its implementations: importing this module imports neither
mpi4py nor the symmetric-memory API; :func:`make_backend` does, on demand.
"""
from typing import Any

import torch

from .backend import RMABackend


def make_backend(device: Any = "cpu", **kwargs: Any) -> RMABackend:
    """The one-sided backend for ``device``; every algorithm runs on either.

    * ``"cpu"``: :class:`~pyg_sparsecomm.rdma.mpi_backend.MPIBackend` (MPI-3 RMA through
      mpi4py, processes launched with ``mpiexec``);
    * ``"cuda"``: :class:`~pyg_sparsecomm.rdma.symm_backend.SymmetricMemoryBackend`
      (PyTorch symmetric memory over the ``torch.distributed`` group; remote atomics by a
      Triton kernel).  Written to the PyTorch API but never run on a GPU here: the test
      suite runs its code on an emulated CPU symmetric heap (``tests/_symm_emulation.py``).

    Args:
        device (Any, optional): a ``torch.device`` or its name; other device types raise ValueError.
            (default: :obj:`"cpu"`)
        **kwargs (optional): passed to the backend's constructor (e.g. ``heap_bytes`` of the MPI backend).

    Returns:
        A new backend over all ranks of the job.
    """
    device = torch.device(device)
    if device.type == "cpu":
        from .mpi_backend import MPIBackend
        return MPIBackend(**kwargs)
    if device.type == "cuda":
        from .symm_backend import SymmetricMemoryBackend
        return SymmetricMemoryBackend(device, **kwargs)
    raise ValueError(f"no RDMA backend for device type {device.type!r}; use 'cpu' (MPI one-sided RMA) "
                     f"or 'cuda' (PyTorch symmetric memory)")
