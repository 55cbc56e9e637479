r"""The halo exchange with compressed payloads (``halo_precision`` / ``halo_grad_precision``).

The same map as :func:`~pyg_sparsecomm.comm.halo.halo_exchange`, with every row encoded by
:mod:`~pyg_sparsecomm.comm.quantize` before it leaves and decoded where it arrives:

.. math::
    \mathrm{halo} = D_p(E_p(X[\mathrm{send}])) \text{ moved by the all-to-allv}, \qquad
    \partial X \mathrel{+}= \mathrm{index\_add}(\mathrm{send}, D_g(E_g(\partial\,\mathrm{halo})))

with ``p`` the forward and ``g`` the gradient precision (``None``: that direction is exact).
The payload is a ``uint8`` tensor of :func:`~pyg_sparsecomm.comm.quantize.payload_row_bytes`
per row, moved by the ordinary row exchange, so ``comm_counter()`` records the compressed bytes,
scale and offset included, under the usual kinds ``"halo"`` and ``"halo_grad"``.

The backward treats the codec as the identity (a straight-through estimator): the gradient of
the halo rows flows to the owners' rows as if they had travelled exactly.  With unbiased
stochastic rounding the forward is exact in expectation, so the gradient is too.  Random numbers
come from torch's default generator (seed it with ``torch.manual_seed``).
"""
import math

import torch
import torch.distributed as dist
from torch import Tensor

from ..plan import RankPlan
from .halo import all_to_all_rows, halo_exchange
from .halo_options import HaloOptions
from .quantize import decode, encode


def encode_rows(rows: Tensor, precision: str | None) -> Tensor:
    """``[n, ...]`` rows as the ``[n, B]`` payload that goes on the wire (``None``: the rows themselves)."""
    if precision is None:
        return rows.contiguous()
    return encode(rows.reshape(rows.size(0), math.prod(rows.shape[1:])), precision)


def decode_rows(payload: Tensor, like: Tensor, precision: str | None) -> Tensor:
    """The received payload as rows shaped and typed like ``like``'s rows (``None``: as received)."""
    if precision is None:
        return payload
    width = math.prod(like.shape[1:])
    return decode(payload, width, precision, like.dtype).reshape((payload.size(0),) + tuple(like.shape[1:]))


class _QuantizedHaloExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, plan: RankPlan, group, options: HaloOptions) -> Tensor:
        ctx.plan, ctx.group, ctx.options, ctx.num_owned = plan, group, options, x.size(0)
        send = encode_rows(x.index_select(0, plan.send_index), options.precision)
        recv = all_to_all_rows(send, plan.send_counts, plan.recv_counts, group, "halo")
        return decode_rows(recv, x, options.precision)

    @staticmethod
    def backward(ctx, grad_halo: Tensor):
        plan, precision = ctx.plan, ctx.options.grad_precision
        back = all_to_all_rows(encode_rows(grad_halo, precision), plan.recv_counts, plan.send_counts, ctx.group,
                               "halo_grad")
        grad = grad_halo.new_zeros((ctx.num_owned,) + tuple(grad_halo.shape[1:]))
        return grad.index_add_(0, plan.send_index, decode_rows(back, grad_halo, precision)), None, None, None


def quantized_halo_exchange(x: Tensor, plan: RankPlan, group: dist.ProcessGroup | None,
                            options: HaloOptions) -> Tensor:
    """:func:`~pyg_sparsecomm.comm.halo.halo_exchange` with the rows (forward) and halo gradients
    (backward) in ``options.precision`` / ``options.grad_precision``.

    Tensors that are not floating point (ids, masks) travel exactly: there is nothing to round.
    """
    if x.size(0) != plan.num_owned:
        raise ValueError(f"halo_exchange: x has {x.size(0)} rows but this rank owns {plan.num_owned}")
    if plan.world_size == 1 or not x.is_floating_point() or not options.compressed:
        return halo_exchange(x, plan, group)
    return _QuantizedHaloExchange.apply(x, plan, group, options)
