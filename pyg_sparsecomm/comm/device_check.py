"""Debug mode: every collective the package issues checks that its tensors are on the group's device.

With ``PYG_SPARSECOMM_CHECK_DEVICES=1`` in the environment (the test suite sets it,
``tests/conftest.py``), :func:`check_devices` raises before a collective whose tensors are not
where the group's backend needs them (:func:`~pyg_sparsecomm.comm.group.collective_device`: the
rank's GPU for NCCL, the CPU for gloo).  NCCL would otherwise fail far from the cause or, for a
tensor on another GPU, deadlock; on the CPU suite the check catches tensors that a move to a
device forgot (a code path that mixes devices).  Off by default: it reads the environment on
every collective, which the hot path need not pay.
"""
import os

import torch
import torch.distributed as dist
from torch import Tensor

from .group import collective_device, is_distributed

#: the environment variable that turns the checks on (any value but "" and "0")
CHECK_DEVICES_ENV = "PYG_SPARSECOMM_CHECK_DEVICES"


def checking_devices() -> bool:
    return os.environ.get(CHECK_DEVICES_ENV, "") not in ("", "0")


def check_devices(what: str, group: dist.ProcessGroup | None, *tensors: Tensor) -> None:
    """Raises RuntimeError naming ``what`` (the collective) if, in debug mode, a tensor of
    ``tensors`` is not on ``group``'s device (CUDA ``current_device`` for NCCL, CPU otherwise)."""
    if not checking_devices():
        return
    expected = collective_device(group) or torch.device("cpu")
    wrong = sorted({str(t.device) for t in tensors if t.device != expected})
    if wrong:
        backend = dist.get_backend(group) if is_distributed(group) else "no"
        raise RuntimeError(f"{what}: tensors on {', '.join(wrong)} reach a collective of a {backend} process "
                           f"group, whose device is {expected} ({CHECK_DEVICES_ENV} is set): move them "
                           f"with .to(collective_device(group)) first")
