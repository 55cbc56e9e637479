"""The noise a ``distribute()``d ``VGAE``/``ARGA``/``ARGVA`` draws, given to single-process PyG: inside
:func:`keyed_noise`, ``torch.randn_like`` called by PyG's ``reparametrize`` (stream 0) or
``discriminator_loss`` (stream 1) returns the rows ``arange(N)`` of
:func:`~pyg_sparsecomm.nn.models.node_normal` with seed 0 (what ``torch.manual_seed(0)`` before
``distribute`` gives), a step per call of each stream, as the distributed model counts them."""
import contextlib
import sys

import torch

from pyg_sparsecomm.nn.models import node_normal

STREAMS = {"reparametrize": 0, "discriminator_loss": 1}


@contextlib.contextmanager
def keyed_noise(seed: int = 0):
    """``torch.randn_like`` of PyG's models drawing the distributed models' noise (see the module doc)."""
    steps: dict[int, int] = {}
    original = torch.randn_like

    def randn_like(like, *args, **kwargs):
        caller = sys._getframe(1).f_code.co_name
        if caller not in STREAMS:
            return original(like, *args, **kwargs)
        stream = STREAMS[caller]
        steps[stream] = steps.get(stream, -1) + 1
        return node_normal(torch.arange(like.size(0)), like.size(1), seed, stream, steps[stream], like.dtype)

    torch.randn_like = randn_like
    try:
        yield
    finally:
        torch.randn_like = original
