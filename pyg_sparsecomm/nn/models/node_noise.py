r"""Standard normal noise whose entry :math:`(v, k)` is a function of the *global* node id :math:`v`:
the same rows for any number of ranks and any partition.

PyG's ``VGAE.reparametrize`` (:math:`z = \mu + \varepsilon \odot \sigma`) and
``ARGA.discriminator_loss`` (samples of the prior) draw :math:`\varepsilon` with
``torch.randn_like``: one matrix of :math:`N \times d` entries from the process's generator.  On a
shard a rank holds :math:`N_r` rows; drawing the whole matrix on every rank to keep its rows would
cost :math:`O(N d)` per rank, and drawing :math:`N_r \times d` entries locally gives every layout
other noise.  Here entry :math:`(v, k)` is a Box-Muller transform of two counter-based uniforms
(:mod:`~pyg_sparsecomm.sampling.randomness`) of the element id :math:`v d + k`, keyed by
``(seed, stream, step)``:

.. math::
    \varepsilon_{vk} = \sqrt{-2 \ln(1 - u_1)}\, \cos(2 \pi u_2), \qquad
    u_j = u(\mathrm{key}_j, v d + k)

so a distributed run draws what a single-process run of the same model draws (its rows in
``arange(N)`` order); it follows PyG's distribution, not PyG's draws from ``torch``'s generator.
"""
import math

import torch
from torch import Tensor

from ...sampling.randomness import stream_key, uniform_tensor

#: the stream of node noise in :func:`~pyg_sparsecomm.sampling.randomness.stream_key`
NODE_NOISE = 21


def node_normal(n_id: Tensor, cols: int, seed: int, stream: int, step: int, dtype: torch.dtype = torch.float32,
                device: torch.device | str | None = None) -> Tensor:
    r"""Rows ``n_id`` of the standard normal matrix of stream ``(seed, stream, step)`` (see the module doc).

    Args:
        n_id (torch.Tensor): ``[n]`` global node ids of the rows.
        cols (int): the matrix's columns :math:`d`.
        seed (int): the seed of the noise.
        stream (int): which noise of a model (its reparametrisation, its prior samples).
        step (int): the draw (a new matrix at every step).
        dtype (torch.dtype, optional): the result's dtype. (default: :obj:`torch.float32`)
        device (torch.device, optional): the result's device. (default: ``n_id``'s)

    Shapes:
        - **input:** :math:`(n)` node ids
        - **output:** :math:`(n, d)`
    """
    ids = n_id.to(device if device is not None else n_id.device, torch.long).view(-1, 1)
    element = (ids * cols + torch.arange(cols, device=ids.device)).view(-1)
    radius = torch.sqrt(-2.0 * torch.log1p(-uniform_tensor(stream_key(seed, NODE_NOISE, stream, step, 0), element)))
    angle = (2.0 * math.pi) * uniform_tensor(stream_key(seed, NODE_NOISE, stream, step, 1), element)
    return (radius * torch.cos(angle)).view(-1, cols).to(dtype)
