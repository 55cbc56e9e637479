r"""The registry of layer rules: one :class:`LayerRule` per layer class, what
:func:`~pyg_sparsecomm.distribute` does with it.

This module is a leaf: it imports nothing of :mod:`pyg_sparsecomm.nn`.  PyG's own rules register
into it from above (:mod:`.pyg`, imported by ``distribute`` and by ``pyg_sparsecomm.nn.layer_rule``), and
:mod:`~pyg_sparsecomm.nn.runtime.plan` compiles a layer's rule once, when it is attached.

A rule says how the layer's messages aggregate on a shard, which ``Linear`` may move across the
aggregation, which whole-graph quantity an adapter supplies, and why a layer is refused.  Rules
sit in one registry keyed by class and are found through the method resolution order, so a
subclass of a registered class gets its parent's rule, and users register rules for their own
layers with :func:`register_layer_rule`.  A layer without a rule runs the default: every tensor
its messages read at sources (``x_j``, ``alpha_j``, ...) is completed with halo rows before PyG
propagates.

Aggregations (``aggregation``):

* ``"exchange"`` (the default): source tensors exchanged after the layer's own transform;
* ``"spmm"``: the message is :math:`w_{ji} x_j` (``weight`` names the argument holding
  :math:`w`, ``""`` for none), so a ``"sum"``/``"add"``/``"mean"`` aggregation is
  :math:`\mathrm{out} = A x`, run as one distributed SpMM by the ``algorithm`` of ``distribute``;
* ``"attention"``: the message is :math:`\alpha_{ji} x_j` per head (``weight`` names
  :math:`\alpha`, shape ``[E, heads]``), aggregated as one CSR SpMM per head.

A layer whose ``forward`` normalises with PyG's ``gcn_norm`` says how in its rule's
``normalisation`` (:class:`GcnNormalisation`); :mod:`~pyg_sparsecomm.nn.runtime.normalisation` gives
it the normalisation with global degrees, per instance.

A rule relies on the methods it names in ``relies_on`` (default ``("message",)``): its
aggregation applies only while the class's methods are the rule owner's (a subclass overriding
``message`` gets the default exchange; its refusal, adapter and fused source still apply).  The
``Linear`` moves (``post_linear``, ``input_linear``) rely on ``forward`` too.
"""
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch

AGGREGATIONS = ("exchange", "spmm", "attention")
DELIVERIES = ("arguments", "propagate", "placeholder")


@dataclass(frozen=True)
class GcnNormalisation:
    r"""How a layer's ``forward`` calls PyG's ``gcn_norm``, which on a shard needs global degrees
    (:mod:`~pyg_sparsecomm.nn.runtime.normalisation` says what each ``delivery`` does, and why).

    PyG's layers call ``gcn_norm(edge_index, weight, x.size(node_dim), improved, add_self_loops,
    flow, x.dtype)`` while their ``normalize`` attribute (if they have one) is ``True``.

    Args:
        delivery (str): ``"arguments"`` (the forward normalises its graph arguments first:
            ``GCNConv``), ``"propagate"`` (it passes the graph it normalises on to ``propagate``
            unchanged: ``PDNConv``) or ``"placeholder"`` (it normalises without a ``normalize``
            flag: ``SGConv``).
        weight (str, optional): the argument holding :math:`w` (the forward's; ``"propagate"``: the
            ``propagate`` call's); ``None``: PyG normalises the unweighted graph, and a given
            ``edge_weight`` leaves the call to PyG's own code (``FAConv`` refuses it,
            ``LabelPropagation`` then does not normalise). (default: ``"edge_weight"``)
        target (str, optional): the argument that receives the normalised weights (the forward's
            for ``"arguments"``, ``propagate``'s otherwise). (default: ``"edge_weight"``)
        improved (bool, optional): PyG passes ``conv.improved`` (else ``False``). (default: ``False``)
        self_loops (bool, optional): PyG passes ``conv.add_self_loops`` (else ``False``).
            (default: ``True``)
        dtype_of (str, optional): the forward argument whose dtype PyG passes (``None``: none).
            (default: ``"x"``)
        pyg_cache (bool, optional): the forward uses PyG's normalisation cache whenever it is
            filled, so a ``cached=True`` instance gets its normalisation there. (default: ``False``)
        applies (callable, optional): ``applies(conv)``: whether this instance normalises at all
            (beyond its ``normalize`` flag; ``EGConv``: with the ``"symnorm"`` aggregator).
            (default: ``None``)
        folds_degrees (bool, optional): the forward passes the normalised ``target`` unchanged to a
            ``propagate`` that aggregates linearly by it (``GCNConv``), so a weighted call's source
            degrees may travel folded into the exchanged rows,
            :math:`\hat d_j^{-1/2} w_{ji} \hat d_i^{-1/2} x_j = (w_{ji} \hat d_i^{-1/2}) (\hat d_j^{-1/2} x_j)`
            (:func:`~pyg_sparsecomm.nn.runtime.normalisation.kept_normalisation`). (default: ``False``)
    """
    delivery: str
    weight: str | None = "edge_weight"
    target: str = "edge_weight"
    improved: bool = False
    self_loops: bool = True
    dtype_of: str | None = "x"
    pyg_cache: bool = False
    applies: Callable[[Any], bool] | None = None
    folds_degrees: bool = False

    def __post_init__(self) -> None:
        if self.delivery not in DELIVERIES:
            raise ValueError(f"GcnNormalisation: delivery must be one of {DELIVERIES}, got {self.delivery!r}")


@dataclass(frozen=True)
class LayerRule:
    r"""What :func:`~pyg_sparsecomm.distribute` does with one layer class.

    Args:
        aggregation (str, optional): ``"exchange"``, ``"spmm"`` or ``"attention"`` (see the module
            doc). (default: ``"exchange"``)
        weight (str, optional): the message's weight argument: :math:`w_{ji}` of ``"spmm"``
            (``""``: unweighted), :math:`\alpha` of ``"attention"``. (default: ``None``)
        post_linear (str, optional): attribute name of a ``Linear`` applied right after a
            ``"spmm"`` aggregation (``SAGEConv.lin_l``); when it narrows the rows it runs before
            it, :math:`(A x) W^\top + b = A (x W^\top) + b`. (default: ``None``)
        input_linear (str, optional): attribute name of a module computing
            :math:`\mathrm{nn}((1 + \epsilon) x + A x)` (``GINConv.nn``): its first ``Linear``,
            if it narrows, is applied to ``x`` before the layer. (default: ``None``)
        fused_source (tuple[str, ...], optional): submodules (first present wins) whose output
            ``propagate`` reads at sources and which exist before ``edge_updater`` runs
            (``GATConv``: ``lin_src``, ``lin``): exchanged once, with the edge update's sources.
            (default: ``()``)
        adapter (callable, optional): ``adapter(conv, bound_arguments, context)`` supplying a
            whole-graph argument of ``forward`` (``ChebConv``'s ``lambda_max``). (default: ``None``)
        refused (str, optional): why the class cannot be exact on a partitioned graph (completes
            "it ..."); ``distribute`` raises ``NotImplementedError`` with it. (default: ``None``)
        drops_adj_values (bool, optional): PyG's sparse ``adj_t`` path of the layer ignores the
            adjacency's values, so ``local.adj``'s values are not passed. (default: ``False``)
        distributed_class (type, optional): a subclass swapped in for the rule's class itself (not
            its subclasses) by :func:`swap_class`: a norm with whole-graph statistics, or a layer
            whose forward runs on a heterogeneous shard's ``adj_dict`` (``HGTConv``,
            ``HANConv``). (default: ``None``)
        relies_on (tuple[str, ...], optional): the methods the aggregation relies on.
            (default: ``("message",)``)
        normalisation (GcnNormalisation, optional): how the layer's ``forward`` calls PyG's
            ``gcn_norm``. (default: ``None``)
    """
    aggregation: str = "exchange"
    weight: str | None = None
    post_linear: str | None = None
    input_linear: str | None = None
    fused_source: tuple[str, ...] = ()
    adapter: Callable[..., None] | None = None
    refused: str | None = None
    drops_adj_values: bool = False
    distributed_class: type | None = None
    relies_on: tuple[str, ...] = ("message",)
    normalisation: GcnNormalisation | None = None

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"LayerRule: aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.aggregation != "exchange" and self.weight is None:
            raise ValueError(f"LayerRule: aggregation={self.aggregation!r} needs weight= (the message's weight "
                             f"argument; '' for an unweighted 'spmm')")
        if (self.post_linear or self.input_linear) and self.aggregation != "spmm":
            raise ValueError("LayerRule: post_linear and input_linear move a Linear across an 'spmm' aggregation")


DEFAULT_RULE = LayerRule()

_RULES: dict[type, LayerRule] = {}
_RESOLVED: dict[type, LayerRule] = {}


def register_layer_rule(cls: type, rule: LayerRule) -> None:
    r"""Registers ``rule`` for ``cls`` and its subclasses (replacing a rule of ``cls`` itself).

    Args:
        cls (type): a ``torch.nn.Module`` class, usually a ``MessagePassing`` layer.
        rule (LayerRule): what ``distribute`` does with it.

    Example::

        class MyConv(MessagePassing):
            def message(self, x_j, edge_weight):
                return edge_weight.view(-1, 1) * x_j

        register_layer_rule(MyConv, LayerRule(aggregation="spmm", weight="edge_weight"))
    """
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"register_layer_rule: expected a torch.nn.Module class, got {cls!r}")
    if not isinstance(rule, LayerRule):
        raise TypeError(f"register_layer_rule: expected a LayerRule, got {type(rule).__name__}")
    _RULES[cls] = rule
    _RESOLVED.clear()


def registered_rules() -> dict[type, LayerRule]:
    """Every registered ``{class: rule}`` (PyG's, then the user's)."""
    return dict(_RULES)


def layer_rule(cls: type) -> LayerRule:
    r"""The rule that applies to instances of ``cls``: the nearest registered class in its method
    resolution order, its aggregation and ``Linear`` moves dropped where ``cls`` overrides a method
    they rely on (:data:`DEFAULT_RULE` if none is registered).

    Args:
        cls (type): the module's class.
    """
    if cls not in _RESOLVED:
        owner = next((k for k in cls.__mro__ if k in _RULES), None)
        rule = DEFAULT_RULE if owner is None else _applied(_RULES[owner], owner, cls)
        _RESOLVED[cls] = rule
    return _RESOLVED[cls]


def swap_class(module: torch.nn.Module) -> None:
    """Swaps ``module``'s class for its rule's ``distributed_class`` in place (parameters, buffers
    and ``state_dict`` keys stay; idempotent: the distributed class is a subclass, which has none)."""
    target = layer_rule(type(module)).distributed_class
    if target is not None:
        module.__class__ = target


def _same(cls: type, owner: type, method: str) -> bool:
    return getattr(cls, method, None) is getattr(owner, method, None)


def _applied(rule: LayerRule, owner: type, cls: type) -> LayerRule:
    if cls is not owner and rule.distributed_class is not None:
        rule = replace(rule, distributed_class=None)
    if rule.aggregation != "exchange" and not all(_same(cls, owner, m) for m in rule.relies_on):
        return replace(rule, aggregation="exchange", weight=None, post_linear=None, input_linear=None)
    if (rule.post_linear or rule.input_linear) and not _same(cls, owner, "forward"):
        return replace(rule, post_linear=None, input_linear=None)
    return rule


def register_named(module: Any, rules: dict[str, LayerRule]) -> None:
    """Registers ``rules`` by class name in ``module`` (names ``module`` lacks, e.g. of another PyG
    version, are skipped; a class's rule registered before is kept): how PyG's own rules
    (:mod:`.pyg`) register.

    Args:
        module (module): where the classes are defined (``torch_geometric.nn.conv``, ...).
        rules (dict[str, LayerRule]): the rule of each class, by class name.
    """
    for name, rule in rules.items():
        cls = getattr(module, name, None)
        if isinstance(cls, type) and cls not in _RULES:
            _RULES[cls] = rule
            _RESOLVED.clear()


def describe(rule: LayerRule) -> str:
    """One line of the README's layer table for a class with ``rule``."""
    if rule.refused:
        return f"refused: it {rule.refused}"
    if rule.aggregation == "spmm":
        return "exact; aggregation as one distributed SpMM (`algorithm=` applies)"
    if rule.aggregation == "attention":
        return "exact; source tensors exchanged after the layer's transform, aggregation as one CSR SpMM per head"
    return "exact; source tensors exchanged after the layer's transform"


def layer_table(names: Iterable[str] | None = None, notes: dict[str, str] | None = None) -> str:
    """The README's table: what ``distribute`` does with each entry of ``torch_geometric.nn.conv``.

    Args:
        names (Iterable[str], optional): class names in ``torch_geometric.nn.conv`` (default: its
            ``__all__``).
        notes (dict[str, str], optional): rows written as given instead of from the registry.
            (default: :obj:`None`)
    """
    from torch_geometric.nn import conv
    rows = ["| layer | under `distribute()` |", "|---|---|"]
    for name in conv.__all__ if names is None else names:
        how = (notes or {}).get(name) or describe(layer_rule(getattr(conv, name)))
        rows.append(f"| `{name}` | {how} |")
    return "\n".join(rows)
