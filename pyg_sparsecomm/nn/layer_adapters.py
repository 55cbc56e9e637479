"""Whole-graph quantities a few PyG layers compute inside ``forward``, supplied globally.

Most layers reach the graph only through ``propagate``/``edge_updater`` and the degree
normalisations, which :mod:`.distributed_layer` and :mod:`.degree_norm` make exact.  A layer
that also reduces over *all* edges in its forward gets an adapter here (its
:class:`~pyg_sparsecomm.nn.layer_rules.LayerRule`'s ``adapter``), run by the forward
pre-hook on the call's bound arguments, that passes the whole-graph value explicitly:

* ``ChebConv`` with ``lambda_max=None`` scales by :math:`2 \\max_e L_e`, the largest
  Laplacian weight of the whole graph: the maximum over ranks is passed as ``lambda_max``.
"""
import inspect

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import ChebConv, MessagePassing

from ..comm.collectives import all_reduce_value
from ..comm.group import is_distributed
from . import degree_norm
from .layer_rules import layer_rule
from .shard_context import ShardContext

_SIGNATURES: dict[type[torch.nn.Module], inspect.Signature] = {}


def forward_signature(cls: type[torch.nn.Module]) -> inspect.Signature:
    """The signature of ``cls.forward`` (with ``self``), computed once per class."""
    if cls not in _SIGNATURES:
        _SIGNATURES[cls] = inspect.signature(cls.forward)
    return _SIGNATURES[cls]


def global_max(value: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """The maximum of ``value`` over all ranks (``-inf`` where empty); the gradient reaches the
    rank(s) holding it, as a single-process ``max`` would."""
    local = value.max() if value.numel() else value.new_tensor(float("-inf"))
    if not is_distributed(group):
        return local
    reduced = all_reduce_value(local.detach(), dist.ReduceOp.MAX, group, "global_max")
    return torch.where(local == reduced, local, reduced)


def cheb_lambda_max(conv: ChebConv, bound: inspect.BoundArguments, context: ShardContext) -> None:
    r"""``ChebConv``'s adapter: ``lambda_max=None`` becomes :math:`2 \max_e L_e` over all ranks.

    Args:
        conv (ChebConv): the layer.
        bound (inspect.BoundArguments): its ``forward`` arguments (edited in place).
        context (ShardContext): the shard the call runs on.
    """
    args = bound.arguments
    if args.get("lambda_max") is not None:
        return
    if args.get("batch") is not None:
        raise NotImplementedError("ChebConv with a batch vector and lambda_max=None cannot run distributed: "
                                  "pass lambda_max explicitly")
    x = args["x"]
    _, weight = degree_norm.get_laplacian(context, args["edge_index"], args.get("edge_weight"),
                                          conv.normalization, x.dtype, x.size(conv.node_dim))
    args["lambda_max"] = 2.0 * global_max(weight, context.group)


def adapt(conv: MessagePassing, args: tuple, kwargs: dict, context: ShardContext):
    """``(args, kwargs)`` with the whole-graph arguments ``conv``'s adapter supplies (if any)."""
    adapter = layer_rule(type(conv)).adapter
    if adapter is None:
        return args, kwargs
    bound = forward_signature(type(conv)).bind(conv, *args, **kwargs)
    adapter(conv, bound, context)
    return bound.args[1:], bound.kwargs  # without self
