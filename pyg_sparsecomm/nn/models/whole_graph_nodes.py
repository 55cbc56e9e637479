r"""A node tensor of the whole graph as a user's function sees it on a shard, of which this rank holds
its rows: the reductions and permutations of such functions made global, or refused by name.

PyG's ``DeepGraphInfomax`` takes two functions of the user's, a readout over all nodes and a
corruption of the input, which PyG's ``examples/infomax_transductive.py`` writes as::

    summary = lambda z, *args, **kwargs: torch.sigmoid(z.mean(dim=0))
    def corruption(x, edge_index):
        return x[torch.randperm(x.size(0))], edge_index

On a shard ``z`` and ``x`` hold the rank's rows only: ``z.mean(dim=0)`` would average them,
``torch.randperm(x.size(0))`` permute them among themselves.  The model calls such functions with
:class:`WholeGraphNodes` in place of its node tensors: an object that stands for the whole graph's
tensor (``size(0)``, ``shape[0]`` and ``len()`` are :math:`N`) and computes, of what a function may do
with it,

* **reductions over the nodes** (``mean``/``sum`` over dimension 0, or over all elements): one
  differentiable all-reduce of the rank's partial sums (its backward all-reduces the gradient, as
  every rank's loss depends on the value), divided by the global count;
* **a row permutation** ``x[index]`` by a ``[N]`` integer tensor of global ids, the same on every rank
  (checked: a CRC of the index compared in one host all-reduce): node :math:`v`'s row becomes
  :math:`x_{index[v]}`, each rank fetching the rows of its nodes from their owners in one sparse
  exchange (differentiable; :math:`O(N_r)` rows, never the whole :math:`x`);
* **row-wise operations** (elementwise functions, arithmetic with numbers or with tensors broadcast
  over the rows, ``F.linear``/``z @ W``, reductions and ``softmax``/``normalize`` along other
  dimensions, ``x[:, cols]``): computed on the rank's rows.

Anything else raises ``NotImplementedError`` naming the operation and the function, on every rank
alike (the same code meets the same operation everywhere), never a silently different result.
"""
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...comm.collectives import row_all_reduce
from .shard_model import ShardContext

_UNARY = {"sigmoid", "tanh", "relu", "exp", "log", "abs", "neg", "sqrt", "rsqrt", "square", "sign", "sin", "cos",
          "log1p", "expm1", "reciprocal", "clamp", "clip", "clamp_min", "clamp_max", "nan_to_num", "pow", "float",
          "double", "half", "bfloat16", "to", "detach", "clone", "contiguous", "cpu", "cuda", "type_as",
          "__neg__", "__abs__", "__pow__", "__rpow__", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish",
          "softplus", "hardtanh", "relu6", "prelu", "layer_norm", "logsigmoid"}
_BINARY = {"add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "maximum", "minimum",
           "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__"}
_LINEAR = {"linear", "matmul", "mm", "__matmul__"}
_ALONG_DIM = {"softmax", "log_softmax", "normalize", "cumsum", "amax", "amin", "logsumexp", "norm", "std", "var",
              "prod"}
#: (position, default) of the ``dim`` argument where it is not the second with no default
_DIM_ARGUMENT = {"normalize": (2, 1), "norm": (2, None)}
_REDUCTIONS = {"mean", "sum"}
_SUPPORTED = ("reductions over all nodes by mean or sum (z.mean(dim=0)), a permutation of all nodes by a [N] index "
              "(x[torch.randperm(x.size(0))]), elementwise functions, arithmetic with numbers or tensors without a "
              "node dimension, and linear maps of the rows")


class WholeGraphNodes:
    r"""The whole graph's node tensor of which this rank holds ``rows`` (see the module doc).

    Args:
        rows (torch.Tensor): this rank's rows, in the shard's order.
        shard (ShardContext): the shard (its ``n_id`` and the graph's :math:`N`).
        what (str): the function it is given to, for error messages.
    """

    def __init__(self, rows: Tensor, shard: ShardContext, what: str) -> None:
        self.sparsecomm_rows, self.shard, self.what = rows, shard, what

    def size(self, dim: int | None = None) -> Any:
        """The whole tensor's size (:math:`N` rows), of ``dim`` if given.

        Args:
            dim (int, optional): one dimension. (default: :obj:`None`, all)
        """
        shape = torch.Size((self.shard.num_nodes, *self.sparsecomm_rows.shape[1:]))
        return shape if dim is None else shape[dim]

    @property
    def shape(self) -> torch.Size:
        return self.size()

    def dim(self) -> int:
        return self.sparsecomm_rows.dim()

    @property
    def ndim(self) -> int:
        return self.sparsecomm_rows.dim()

    @property
    def dtype(self) -> torch.dtype:
        return self.sparsecomm_rows.dtype

    @property
    def device(self) -> torch.device:
        return self.sparsecomm_rows.device

    @property
    def requires_grad(self) -> bool:
        return self.sparsecomm_rows.requires_grad

    def numel(self) -> int:
        return math.prod(self.size())

    def __len__(self) -> int:
        return self.shard.num_nodes

    def __repr__(self) -> str:
        return (f"WholeGraphNodes(shape={list(self.size())}, this rank's {self.sparsecomm_rows.size(0)} rows; "
                f"given to {self.what})")

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(Tensor, name, None)
        if name.startswith("_") or not callable(method):
            raise NotImplementedError(_refusal(f"Tensor.{name}", self.what))
        return lambda *args, **kwargs: dispatch(method, (self, *args), kwargs)

    def __getitem__(self, key: Any) -> Any:
        return dispatch(Tensor.__getitem__, (self, key), {})

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


def _operator(name: str) -> Callable[..., Any]:
    method = getattr(Tensor, name)
    return lambda self, *args: dispatch(method, (self, *args), {})


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__pow__", "__rpow__", "__matmul__", "__neg__", "__abs__"):
    setattr(WholeGraphNodes, _name, _operator(_name))


def local_rows(value: Any) -> Any:
    """``value`` with every :class:`WholeGraphNodes` replaced by its rows (through tuples, lists and dicts)."""
    if isinstance(value, WholeGraphNodes):
        return value.sparsecomm_rows
    if isinstance(value, (tuple, list)):
        return type(value)(local_rows(v) for v in value)
    if isinstance(value, dict):
        return {k: local_rows(v) for k, v in value.items()}
    return value


def dispatch(func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)`` with :class:`WholeGraphNodes` among the arguments (see the module doc)."""
    nodes = next(a for a in _flat(args, kwargs) if isinstance(a, WholeGraphNodes))
    name = getattr(func, "__name__", str(func))
    if func is Tensor.__getitem__:
        return _index(args[0], args[1])
    if name in _REDUCTIONS and args and args[0] is nodes:
        return _reduce(name, nodes, args[1:], kwargs)
    if name in _ALONG_DIM and args and args[0] is nodes:
        return _row_wise(func, nodes, args, kwargs, _along_other_dims(name, nodes, args, kwargs))
    if name in _LINEAR and args and args[0] is nodes:
        others = any(isinstance(a, WholeGraphNodes) for a in _flat(args[1:], kwargs))
        return _row_wise(func, nodes, args, kwargs, "of two node tensors" if others else None)
    if name in _UNARY or name in _BINARY:
        return _row_wise(func, nodes, args, kwargs, _broadcast_over_rows(nodes, args, kwargs))
    raise NotImplementedError(_refusal(_qualified(func), nodes.what))


def _flat(args: tuple, kwargs: dict) -> list[Any]:
    out: list[Any] = []
    for value in (*args, *kwargs.values()):
        out.extend(_flat(tuple(value), {}) if isinstance(value, (tuple, list)) else [value])
    return out


def _qualified(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", str(func))
    if getattr(Tensor, name, None) is func:
        return f"Tensor.{name}"
    if getattr(F, name, None) is func:
        return f"torch.nn.functional.{name}"
    return f"torch.{name}"


def _refusal(operation: str, what: str) -> str:
    return (f"{what}: {operation} of the whole graph's node tensor cannot be computed exactly on a shard under "
            f"distribute() (each rank holds its own rows); supported: {_SUPPORTED}. Write the function with those, "
            f"or train this model on one process")


def _row_wise(func: Callable[..., Any], nodes: WholeGraphNodes, args: tuple, kwargs: dict,
              refusal: str | None) -> WholeGraphNodes:
    if refusal:
        raise NotImplementedError(_refusal(f"{_qualified(func)} ({refusal})", nodes.what))
    return WholeGraphNodes(func(*local_rows(args), **local_rows(kwargs)), nodes.shard, nodes.what)


def _broadcast_over_rows(nodes: WholeGraphNodes, args: tuple, kwargs: dict) -> str | None:
    """Why an operand of an elementwise or linear operation is not row-wise (``None`` if every one is):
    node tensors of another shard, or tensors with a node dimension of their own."""
    for value in _flat(args, kwargs):
        if isinstance(value, WholeGraphNodes):
            if value.shard is not nodes.shard:
                return "node tensors of different shards"
        elif isinstance(value, Tensor) and value.dim() >= nodes.dim() and value.dim() > 0 and value.size(0) > 1:
            return f"with a tensor of shape {list(value.shape)}, which has a node dimension of its own"
    return None


def _dims(dim: Any, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    return tuple(sorted({int(d) % ndim for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}))


def _along_other_dims(name: str, nodes: WholeGraphNodes, args: tuple, kwargs: dict) -> str | None:
    """Why ``name`` along its ``dim`` mixes nodes (``None`` if it runs along other dimensions only)."""
    position, default = _DIM_ARGUMENT.get(name, (1, None))
    dim = args[position] if len(args) > position else kwargs.get("dim", default)
    if dim is not None and 0 not in _dims(dim, nodes.dim()):
        return None
    return "along the nodes" if dim is not None else "without a dimension, over the nodes"


def _reduce(name: str, nodes: WholeGraphNodes, args: tuple, kwargs: dict) -> Any:
    """``mean``/``sum`` of ``nodes``: over the rows by one differentiable all-reduce, else row-wise."""
    dim = args[0] if args else kwargs.get("dim", kwargs.get("axis"))
    keepdim = bool(args[1]) if len(args) > 1 else bool(kwargs.get("keepdim", False))
    dtype = kwargs.get("dtype")
    rows = nodes.sparsecomm_rows
    dims = _dims(dim, rows.dim())
    if 0 not in dims:
        reduce = Tensor.mean if name == "mean" else Tensor.sum
        return WholeGraphNodes(reduce(rows, dims, keepdim, dtype=dtype), nodes.shard, nodes.what)
    total = row_all_reduce(rows.sum(dim=dims, keepdim=keepdim, dtype=dtype), nodes.shard.group)
    if name == "sum":
        return total
    count = nodes.shard.num_nodes * math.prod(rows.size(d) for d in dims if d != 0)
    return total / max(count, 1)


def _index(nodes: Any, key: Any) -> Any:
    """``nodes[key]``: a permutation of all nodes (a ``[N]`` integer index), or an index of the other
    dimensions (``x[:, cols]``); anything else refused."""
    if not isinstance(nodes, WholeGraphNodes):
        raise NotImplementedError(_refusal("indexing a tensor by the whole graph's node tensor", key.what))
    if isinstance(key, tuple) and key and key[0] == slice(None) or key is Ellipsis:
        return WholeGraphNodes(nodes.sparsecomm_rows[key], nodes.shard, nodes.what)
    if isinstance(key, (list, np.ndarray)):
        key = torch.as_tensor(key)
    N = nodes.shard.num_nodes
    if not (isinstance(key, Tensor) and key.dim() == 1 and not key.is_floating_point() and key.dtype != torch.bool
            and key.numel() == N):
        raise NotImplementedError(_refusal(f"indexing by {_describe(key)}", nodes.what))
    return _permuted(nodes, key.detach().cpu().long())


def _describe(key: Any) -> str:
    if isinstance(key, Tensor):
        return f"a {key.dtype} tensor of shape {list(key.shape)} (a permutation of all nodes is a [N] integer tensor)"
    return repr(key)


def _permuted(nodes: WholeGraphNodes, index: Tensor) -> WholeGraphNodes:
    """Row ``v`` of the result is row ``index[v]`` of ``nodes``: this rank's rows fetched from their owners."""
    from ...link.embedding_rows import same_everywhere  # link/ at the call: importing the layers loads none of it
    from ...link.pair_exchange import ends_plan, rows_with_halo
    shard, N = nodes.shard, nodes.shard.num_nodes
    if not same_everywhere(index, shard.group):
        raise ValueError(f"{nodes.what}: the ranks indexed the node tensor with different permutations; the "
                         f"model gives every rank rank 0's torch generator state before the call, so draw the "
                         f"permutation from torch's default generator (torch.randperm(x.size(0))), or seed the "
                         f"generator it comes from alike on every rank")
    if N and (int(index.min()) < 0 or int(index.max()) >= N):
        raise IndexError(f"{nodes.what}: a node index holds {int(index.max())} or {int(index.min())}, outside the "
                         f"graph's {N} nodes")
    ends = index[shard.n_id.cpu()].numpy()
    plan, column = ends_plan(ends, shard.part, shard.group)
    rows = rows_with_halo(nodes.sparsecomm_rows, plan.to(nodes.device), shard.group)
    return WholeGraphNodes(rows.index_select(0, column.to(rows.device)), shard, nodes.what)
