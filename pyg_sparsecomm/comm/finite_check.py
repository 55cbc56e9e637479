"""Value checks of the halo codecs that never make the host wait for a device.

The codecs (:mod:`~pyg_sparsecomm.comm.quantize`) refuse non-finite rows (a ``NaN`` has no
scale, ``fp16`` cannot hold :math:`|v| > 65504`).  Reading a device flag with ``bool()`` /
``.item()`` on every encode would wait for the device each time (forward and backward of every
compressed exchange), so the flag is computed where the rows are and read where that costs
nothing:

* a CPU flag is read at once (host memory: there is nothing to wait for), so the error is
  raised by the encode that met the values;
* a CUDA flag is copied to pinned host memory without blocking, behind an event; it is read
  once the event completed, at a later check (the next encode, or :func:`check_pending`), which
  raises the error then.  The bad rows still travel (as ``inf``/``NaN``, or as garbage levels in
  the integer formats); the step that made them fails at its next encode at the latest.
"""
from typing import Any

import torch
from torch import Tensor

#: CUDA flags not read yet: (host copy, event after the copy, message)
_PENDING: list[tuple[Tensor, Any, str]] = []


def require(ok: Tensor, message: str) -> None:
    """``ValueError(message)`` unless the bool tensor ``ok`` is all true (see the module: on a
    CUDA device the error comes from a later check).  Also reads the earlier flags that are ready."""
    check_pending(wait=False)
    if ok.device.type != "cuda":
        if not bool(ok.cpu().numpy().all()):  # numpy: host memory only, never a device wait
            raise ValueError(message)
        return
    host = ok.all().to("cpu", non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    _PENDING.append((host, event, message))


def check_pending(wait: bool = True) -> None:
    """Reads the pending CUDA flags (``wait``: all of them, synchronising with their events; else
    those already computed) and raises the first failed check's ``ValueError``."""
    global _PENDING
    ready = [p for p in _PENDING if wait or p[1].query()]
    _PENDING = [p for p in _PENDING if not any(p is r for r in ready)]
    for host, event, message in ready:
        event.synchronize()
        if not bool(host.numpy().all()):
            raise ValueError(message)
