r"""The exact halo exchange as a registered custom op, so that ``torch.compile`` traces a layer
call through it instead of breaking the graph (issue 57, item 6).

Dynamo cannot trace a collective whose result is read on the host (the agreement header's flags,
:func:`~pyg_sparsecomm.comm.halo.headered_exchange`) nor gloo's asynchronous all-to-allv; an op
it does not look into, with a known output shape (``register_fake``) and gradient
(``register_autograd``), it puts into the graph as one node.  The op runs the exchanger's own
eager code at run time, so what an exchange does is unchanged under compilation: the call's first
exchange still carries the header rows, a peer's flag still runs the agreed checks and the
exchange again, bytes are counted.

* ``pyg_sparsecomm::halo_exchange(x, handle, call="")``: the halo rows of ``x``,
  ``[num_owned, *] -> [halo_size, *]``; with ``call`` (:func:`register_call`, a traced steady-state
  layer call) the exchange runs inside that call's checks, at run time, as an eager call's first one;
* ``pyg_sparsecomm::halo_to_owners(grad, handle)``: its adjoint, the backward: halo gradients travel
  back to their owners (the reverse all-to-allv, send and receive counts swapped) and are summed
  into the owned rows.  Nothing assumes ``A = A^T``; its own backward is the forward exchange.

``handle`` names an exchanger registered with :func:`register`: a string, as a custom op's
arguments are tensors and plain values and dynamo may turn an integer attribute into a symbolic
one.  Every rank runs the same ops in the same order, as the eager exchanges.
"""
from typing import Any

import torch
from torch import Tensor

from .halo import _to_halo, _to_owners
from .op_handles import OpHandles

_EXCHANGERS = OpHandles("pyg_sparsecomm::halo_exchange", "the shard it was traced on")


@torch.compiler.disable(reason="registering an exchanger happens once per shard, eagerly")
def register(exchanger: Any) -> str:
    """A handle of ``exchanger`` (an exact :class:`~pyg_sparsecomm.comm.exchanger.HaloExchanger` whose
    ``exchange(x)`` returns the halo rows) for :func:`halo_exchange`, valid while it lives.

    Args:
        exchanger (HaloExchanger): the exchanger (kept by weak reference).
    """
    return _EXCHANGERS.register(exchanger)


def _exchanger(handle: str) -> Any:
    return _EXCHANGERS.get(handle, "exchanger")


@torch.compiler.disable(reason="registering a layer's steady-state call happens at an eager call")
def register_call(call: Any) -> str:
    """A handle of ``call`` (whose ``around_exchange(exchange, x)`` runs a layer call's checks around
    its first exchange ``exchange(x)``) for :func:`halo_exchange`, valid while it lives.

    Args:
        call (Any): the call (kept by weak reference).
    """
    return _EXCHANGERS.register(call, "call")


@torch.library.custom_op("pyg_sparsecomm::halo_exchange", mutates_args=())
def _halo_exchange_op(x: Tensor, handle: str, call: str = "") -> Tensor:
    with torch.no_grad():  # the op's autograd is registered below
        exchanger = _exchanger(handle)
        if call:
            return _exchanger(call).around_exchange(exchanger.exchange, x)
        return exchanger.exchange(x)


@_halo_exchange_op.register_fake
def _(x: Tensor, handle: str, call: str = "") -> Tensor:
    return x.new_empty((_exchanger(handle).plan.halo_size,) + tuple(x.shape[1:]))


@torch.library.custom_op("pyg_sparsecomm::halo_to_owners", mutates_args=())
def _halo_to_owners_op(grad: Tensor, handle: str) -> Tensor:
    exchanger = _exchanger(handle)
    zeros = grad.new_zeros((exchanger.plan.num_owned,) + tuple(grad.shape[1:]))
    return _to_owners(grad.contiguous(), zeros, exchanger.plan, exchanger.group)


@_halo_to_owners_op.register_fake
def _(grad: Tensor, handle: str) -> Tensor:
    return grad.new_empty((_exchanger(handle).plan.num_owned,) + tuple(grad.shape[1:]))


def _setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.handle, ctx.num_inputs = inputs[1], len(inputs)


def _exchange_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    return (_halo_to_owners_op(grad, ctx.handle),) + (None,) * (ctx.num_inputs - 1)


def _to_owners_backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
    return _halo_exchange_plain_op(grad, ctx.handle), None


@torch.library.custom_op("pyg_sparsecomm::halo_exchange_plain", mutates_args=())
def _halo_exchange_plain_op(x: Tensor, handle: str) -> Tensor:
    """The exchange without the agreement header (the adjoint's backward)."""
    exchanger = _exchanger(handle)
    return _to_halo(x.contiguous(), exchanger.plan, exchanger.group)


@_halo_exchange_plain_op.register_fake
def _(x: Tensor, handle: str) -> Tensor:
    return x.new_empty((_exchanger(handle).plan.halo_size,) + tuple(x.shape[1:]))


_halo_exchange_op.register_autograd(_exchange_backward, setup_context=_setup)
_halo_to_owners_op.register_autograd(_to_owners_backward, setup_context=_setup)
_halo_exchange_plain_op.register_autograd(_exchange_backward, setup_context=_setup)


def halo_exchange(x: Tensor, handle: str, call: str = "") -> Tensor:
    """The halo rows of ``x`` by the exchanger ``handle`` (:func:`register`), as one op of a traced graph.

    Args:
        x (Tensor): this rank's owned rows.
        handle (str): the exchanger's handle.
        call (str, optional): the handle of a layer call (:func:`register_call`) whose checks run
            around this, its first exchange. (default: ``""``: none)

    Shapes:
        - **input:** ``[num_owned, *]``
        - **output:** ``[halo_size, *]``
    """
    return _halo_exchange_op(x, handle, call)
