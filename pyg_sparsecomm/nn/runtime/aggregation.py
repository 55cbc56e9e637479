r"""Message passing whose aggregation is linear in the source rows, run as one SpMM.

When a layer's message is :math:`m_{ji} = w_{ji} x_j` (or :math:`x_j`) and it aggregates
by ``"sum"``/``"add"``/``"mean"``, propagation is :math:`\mathrm{out} = A x` with
:math:`A_{ij} = w_{ji}` (divided by the in-degree for ``"mean"``): exactly the SpMM the
package's algorithms distribute (``"1d"``, ``"1d_overlap"``, ``"oblivious"``, ``"1.5d"``,
``"auto"``, ...), computed as one compact CSR SpMM over ``[owned | halo]`` columns instead
of a scatter over edges.  Which layers qualify, and with which weight argument, their
:class:`~pyg_sparsecomm.nn.rules.registry.LayerRule` says (``aggregation="spmm"``; a subclass that
overrides ``message`` does not inherit it).

Where the layer applies a linear map *after* the aggregation (``SAGEConv``'s ``lin_l``,
``GraphConv``'s ``lin_rel``) and it narrows the rows, the map moves before it
(:math:`(A x) W^T + b = A (x W^T) + b`, also for isolated nodes), so the exchange carries
the narrower width: the layer's ``Linear`` is replaced by :class:`AppliedLinear` (its bias
only) for the duration of the call.  ``GINConv``'s ``nn`` likewise: when its first module is a
narrowing ``Linear``, :math:`\mathrm{nn}((1 + \epsilon) x + A x)` starts with
:math:`(1 + \epsilon) x W^T + A (x W^T) + b`, so ``x`` is multiplied by :math:`W^T` before the
layer runs (:func:`narrowing_input_linear`).

Attention layers whose message is :math:`\alpha_{ji} x_j` per head (``GATConv``,
``GATv2Conv``) aggregate linearly in :math:`x` once :math:`\alpha` is computed: their
propagation is one CSR SpMM per head with the (learnable) :math:`\alpha` as values
(``aggregation="attention"``, :func:`edge_weighted_arg`), instead of a gather of :math:`x_j` over edges, a product and a
scatter; :math:`\partial \alpha_e = \langle \partial \mathrm{out}_i, x_j \rangle`.
"""
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ...plan.halo_adj import HaloAdj, csr_order
from .plan import LayerPlan, compile_plan


def linear_weight_arg(conv: MessagePassing, plan: LayerPlan | None = None) -> str | None:
    """The weight argument of ``conv``'s linear message (``""`` if unweighted), or ``None`` if
    its propagation is not a linear aggregation of source rows (now: not while it explains).

    Args:
        conv (MessagePassing): the layer.
        plan (LayerPlan, optional): its compiled plan. (default: :obj:`None`, compiled now)
    """
    plan = plan or compile_plan(conv)
    return None if getattr(conv, "explain", False) else plan.spmm_weight


def edge_weighted_arg(conv: MessagePassing, plan: LayerPlan | None = None) -> str | None:
    r"""The per-edge, per-head weight argument of ``conv``'s message :math:`\alpha_{ji} x_j`, or
    ``None`` if its message is not of that form.

    Args:
        conv (MessagePassing): the layer.
        plan (LayerPlan, optional): its compiled plan. (default: :obj:`None`, compiled now)
    """
    plan = plan or compile_plan(conv)
    return None if getattr(conv, "explain", False) else plan.attention_weight


class AdjacencyCache:
    """The CSR of the last local edge index a layer propagated over.

    Layers rebuild their edge index every call (self-loops, normalisation) unless they
    cache it; the sort into CSR is done again only when the structure changed (compared
    element-wise, O(E)) or the shard did, and the values are permuted with the stored
    order.  Unweighted aggregations (sum, mean) depend on the structure only: their
    adjacency, with its CSR and transpose, is kept as a whole.
    """

    def __init__(self) -> None:
        self.edge_index: Tensor | None = None
        self.perm: Tensor | None = None
        self.structure: HaloAdj | None = None
        self.unweighted: dict[tuple[str, torch.dtype], HaloAdj] = {}

    def ordered(self, edge_index: Tensor, like: HaloAdj) -> tuple[HaloAdj, Tensor | None]:
        """The unweighted CSR structure of ``edge_index`` and the order of its edges in it (``perm``:
        edge ``perm[k]`` of ``edge_index`` is stored entry ``k``; ``None``: in order), sorted again only
        when it changed.  ``like``'s own edge index (``like.edge_index()``, what the local-graph stage
        passes: a mini-batch's new adjacency every batch) is ``like``'s CSR as it is: no sort."""
        if edge_index is like._structure.get("edge_index"):  # (HaloAdj.edge_index's cache, read inline)
            if self.edge_index is not edge_index or self.perm is not None:
                self.structure, self.perm = like.with_value(None), None
                self.edge_index, self.unweighted = edge_index, {}
            assert self.structure is not None
            return self.structure, None
        same = self.perm is not None and self.structure is not None and self.structure.plan is like.plan and (
            self.edge_index is edge_index or (self.edge_index is not None and self.edge_index.shape == edge_index.shape
                                              and torch.equal(self.edge_index, edge_index)))
        if not same:
            col, row = edge_index[0], edge_index[1]
            rowptr, self.perm = csr_order(row, col, like.num_owned, like.num_cols)
            assert self.perm is not None  # not is_sorted: always a permutation
            self.structure = HaloAdj(rowptr, col[self.perm], None, like.plan)
            self.edge_index, self.unweighted = edge_index, {}
        assert self.structure is not None
        return self.structure, self.perm

    def adjacency(self, edge_index: Tensor, value: Tensor | None, like: HaloAdj) -> HaloAdj:
        """The CSR of ``edge_index`` with per-edge ``value`` (in ``edge_index``'s order)."""
        structure, perm = self.ordered(edge_index, like)
        return structure.with_value(value if value is None or perm is None else value[perm])

    def aggregation(self, edge_index: Tensor, weight: Tensor | None, aggr: str, like: HaloAdj,
                    dtype: torch.dtype) -> HaloAdj:
        """The adjacency of the aggregation ``aggr`` with message weights ``weight`` (``None``: 1)."""
        if weight is not None:
            return self.adjacency(edge_index, aggregation_weights(edge_index, weight, aggr, like.num_owned, dtype),
                                  like)
        self.ordered(edge_index, like)
        if (aggr, dtype) not in self.unweighted:
            value = aggregation_weights(edge_index, None, aggr, like.num_owned, dtype)
            self.unweighted[aggr, dtype] = self.adjacency(edge_index, value, like)
        return self.unweighted[aggr, dtype]


def aggregation_weights(edge_index: Tensor, weight: Tensor | None, aggr: str, num_owned: int,
                        dtype: torch.dtype) -> Tensor | None:
    """Per-edge coefficients of the linear aggregation (``None``: all ones) for rows of ``dtype``.

    Weights keep the wider of their dtype and ``dtype``, as PyG's message ``w * x_j`` promotes
    (under autocast, ``float32`` weights times ``bfloat16`` rows aggregate in ``float32``;
    :func:`~pyg_sparsecomm.plan.halo_adj.spmm_dtypes`)."""
    if weight is not None and weight.is_floating_point():
        dtype = torch.promote_types(weight.dtype, dtype)
    if aggr != "mean":
        return None if weight is None else weight.to(dtype)
    count = torch.bincount(edge_index[1], minlength=num_owned).clamp_(min=1).to(dtype)
    inv = count.reciprocal()[edge_index[1]]
    if weight is None:
        return inv
    return weight.to(dtype) * inv.view((-1,) + (1,) * (weight.dim() - 1))


def node_rows(t: Tensor, node_dim: int) -> tuple[Tensor, tuple[int, ...]]:
    """``t`` with its node dimension first, flattened to ``[num_nodes, -1]``, and the moved shape."""
    moved = t.movedim(node_dim, 0)
    return moved.reshape(moved.size(0), math.prod(moved.shape[1:])), tuple(moved.shape)


def from_node_rows(rows: Tensor, moved_shape: tuple[int, ...], node_dim: int) -> Tensor:
    return rows.reshape((rows.size(0),) + moved_shape[1:]).movedim(0, node_dim)


def narrowing_linear(conv: MessagePassing, plan: LayerPlan | None = None) -> str | None:
    """The name of ``conv``'s post-aggregation ``Linear`` if applying it first narrows the
    exchanged rows, else ``None``.

    Args:
        conv (MessagePassing): the layer.
        plan (LayerPlan, optional): its compiled plan. (default: :obj:`None`, compiled now)
    """
    plan = plan or compile_plan(conv)
    name = plan.rule.post_linear
    if name is None or linear_weight_arg(conv, plan) is None:
        return None
    lin = getattr(conv, name, None)
    in_channels, out_channels = getattr(lin, "in_channels", -1), getattr(lin, "out_channels", -1)
    return name if 0 < out_channels < in_channels else None


class AppliedLinear(torch.nn.Module):
    """Stands in for a post-aggregation ``Linear`` whose weight was applied before the
    aggregation: adds its bias only."""

    def __init__(self, linear: torch.nn.Module) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: Tensor) -> Tensor:
        bias = self.linear.bias
        if not isinstance(bias, Tensor):  # a Linear without bias
            return x
        return x + bias.to(x.dtype)  # in x's dtype, as the Linear returns it (under autocast: 16-bit)


class Narrowing:
    """A layer's narrowing ``Linear`` modules as its calls move them (:meth:`post_linear`, :meth:`applied`):
    one :class:`AppliedLinear` per ``Linear``, made at the first call and reused by every later one
    (the swap itself is per call: PyG's forward applies the module after ``propagate``)."""

    def __init__(self) -> None:
        self.stand_ins: dict[int, AppliedLinear] = {}

    def __getstate__(self) -> dict:
        return {"stand_ins": {}}  # (they hold the layer's Linear modules: made again after a copy)

    def post_linear(self, conv: MessagePassing, plan: LayerPlan) -> "tuple[str, AppliedLinear] | None":
        """``(name, stand-in)`` of ``conv``'s narrowing post-aggregation ``Linear`` (:func:`narrowing_linear`)
        in a call on a shard (``plan.rule.post_linear`` is set), else ``None``."""
        name = plan.rule.post_linear
        if plan.spmm_weight is None or getattr(conv, "explain", False):
            return None
        lin = getattr(conv, name, None)  # type: ignore[arg-type]
        in_channels, out_channels = getattr(lin, "in_channels", -1), getattr(lin, "out_channels", -1)
        if not 0 < out_channels < in_channels:
            return None
        assert lin is not None
        stand_in = self.stand_ins.get(id(lin))
        if stand_in is None or stand_in.linear is not lin:
            stand_in = self.stand_ins[id(lin)] = AppliedLinear(lin)
        return name, stand_in  # type: ignore[return-value]

    def applied(self, linear: torch.nn.Module) -> "AppliedLinear":
        """The :class:`AppliedLinear` standing in for ``linear`` (the same object every call)."""
        stand_in = self.stand_ins.get(id(linear))
        if stand_in is None or stand_in.linear is not linear:
            stand_in = self.stand_ins[id(linear)] = AppliedLinear(linear)
        return stand_in


def _first_linear(nn: torch.nn.Module) -> tuple[torch.nn.Module, str] | None:
    """``(container, key)`` of the module ``nn`` applies first, if it is a ``Linear`` with
    initialised weights (a PyG ``MLP``'s ``lins[0]``, a ``torch.nn.Sequential``'s first)."""
    from torch_geometric.nn import MLP
    from torch_geometric.nn.dense.linear import Linear
    if isinstance(nn, MLP) and len(nn.lins) > 0:
        container = nn.lins
    elif type(nn) is torch.nn.Sequential and len(nn) > 0:
        container = nn
    else:
        return None
    key = next(iter(container._modules))
    lin = container._modules[key]
    weight = getattr(lin, "weight", None)
    if not isinstance(lin, (torch.nn.Linear, Linear)) or isinstance(weight, torch.nn.parameter.UninitializedParameter):
        return None
    return container, key


def narrowing_input_linear(conv: MessagePassing, plan: LayerPlan) -> tuple[torch.nn.Module, str] | None:
    """``(container, key)`` of the ``Linear`` that ``conv``'s ``nn`` applies first to the
    aggregation, if applying it to ``x`` before the layer narrows the exchanged rows.

    Args:
        conv (MessagePassing): the layer.
        plan (LayerPlan): its compiled plan.
    """
    name = plan.rule.input_linear
    if name is None or linear_weight_arg(conv, plan) is None:
        return None
    found = _first_linear(getattr(conv, name))
    if found is None:
        return None
    out_features, in_features = linear_weight(found[0], found[1]).shape
    return found if out_features < in_features else None


def linear_inputs(x, weight: Tensor):
    """``x W^T`` for a tensor or each tensor of an ``(x_src, x_dst)`` pair (``None`` kept)."""
    if isinstance(x, Tensor):
        return F.linear(x, weight)
    if isinstance(x, (tuple, list)) and len(x) == 2:
        src = None if x[0] is None else F.linear(x[0], weight)
        dst = src if x[1] is x[0] else (None if x[1] is None else F.linear(x[1], weight))
        return (src, dst)
    raise ValueError(f"expected node features or an (x_src, x_dst) pair, got {type(x).__name__}")


def linear_weight(container: torch.nn.Module, key: str) -> Tensor:
    """The ``weight`` of the ``Linear`` stored as ``container``'s ``key``."""
    weight = getattr(container._modules[key], "weight", None)
    if not isinstance(weight, Tensor):
        raise TypeError(f"{type(container).__name__}[{key!r}] is not a Linear with a weight")
    return weight
