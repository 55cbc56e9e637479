r"""Sizes the host must know, read from the device in as few waits as possible.

A tensor whose length depends on data (the nodes a hop reaches, the in-edges they keep) can only
be made once the host knows that length, and on a GPU reading a number of the device makes the host
wait for every kernel queued before it.  The samplers therefore compute every count a step needs on
the device, read them together (:func:`read_counts`: one wait), and then take index sets at sizes
they know (:func:`indices`): ``nonzero_static`` on an accelerator (no second wait); ``nonzero`` on
the CPU, where reading costs nothing and ``nonzero`` is several times faster.
"""
import torch
from torch import Tensor


def waits_for_device(device: torch.device) -> bool:
    """Whether reading a number of a tensor on ``device`` makes the host wait (every device but
    the CPU)."""
    return device.type != "cpu"


def read_counts(*counts: Tensor) -> list[int]:
    """The integers of ``counts`` (tensors of one device, any shapes, flattened in order), read
    from the device at once."""
    return torch.cat([c.reshape(-1) for c in counts]).tolist()


def indices(mask: Tensor, count: int | None = None) -> Tensor:
    """``[count]`` positions of the ``True`` entries of the 1-D ``mask``, ascending.

    Args:
        mask (torch.Tensor): a bool mask.
        count (int, optional): its number of ``True`` entries, when known (read with other counts);
            used on an accelerator, where finding it would wait for the device (default: :obj:`None`).
    """
    if count is not None and waits_for_device(mask.device):
        return torch.nonzero_static(mask, size=count).view(-1)
    return torch.nonzero(mask).view(-1)
