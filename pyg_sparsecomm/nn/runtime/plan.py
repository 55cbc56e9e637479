r"""What a distributed layer does on every call, decided once: :class:`LayerPlan` and its
:class:`CallPath` objects (each path a declared list of stages, see ARCHITECTURE.md).

:func:`compile_plan` reads the layer's :class:`~pyg_sparsecomm.nn.rules.registry.LayerRule` (found
through its class's method resolution order) and what its class and instance say about it (the
signature of ``forward``, the arguments ``message``/``edge_update`` read at sources, a linear
aggregation) when :func:`~pyg_sparsecomm.nn.runtime.layer.attach` runs, so that a call derives
nothing from the rules again.  What may still change between calls is read per call: the
explain flag, whether a ``Linear`` moved across the aggregation narrows the rows (a lazy
``Linear`` learns its width at its first call).

:class:`DistributedSettings` are the checked arguments of :func:`~pyg_sparsecomm.distribute`.
"""
import inspect
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch_geometric.nn import MessagePassing

from ...algorithms.cost import CostModel
from ...comm.grid import ProcessGrid, process_grid
from ...comm.halo_options import EXACT, HaloOptions
from ...compat import edge_update_arguments, message_arguments
from ..rules.registry import GcnNormalisation, LayerRule, layer_rule

#: aggregations PyG computes as a sum over in-edges (``"mean"``: divided by the in-degree)
LINEAR_AGGRS = ("add", "sum", "mean")

_SIGNATURES: dict[type[torch.nn.Module], inspect.Signature] = {}


def forward_signature(cls: type[torch.nn.Module]) -> inspect.Signature:
    """The signature of ``cls.forward`` (with ``self``), computed once per class.

    Args:
        cls (type): a module class.
    """
    if cls not in _SIGNATURES:
        _SIGNATURES[cls] = inspect.signature(cls.forward)
    return _SIGNATURES[cls]


@dataclass
class DistributedSettings:
    """How :func:`~pyg_sparsecomm.distribute` runs a model's layers (see its arguments).

    Args:
        algorithm (str, optional): the SpMM algorithm. (default: ``"1d"``)
        group (ProcessGroup, optional): group of the 1D exchanges. (default: ``None``)
        replication (int, optional): ``c`` of the 1.5D layout. (default: ``1``)
        cost_model (CostModel, optional): α and β of ``"auto"``. (default: ``CostModel()``)
        halo_options (HaloOptions, optional): wire format and staleness. (default: exact)
        unit_grid (bool, optional): a 1.5D algorithm on the ``P x 1`` grid (``replication=1``),
            which ``DistributedGCNConv`` allows. (default: ``False``)
    """
    algorithm: str = "1d"
    group: dist.ProcessGroup | None = None
    replication: int = 1
    cost_model: CostModel = field(default_factory=CostModel)
    halo_options: HaloOptions = EXACT
    unit_grid: bool = False

    @property
    def replicated(self) -> bool:
        """Whether the layout is 1.5D: the SpMM runs on a :class:`~pyg_sparsecomm.comm.grid.ProcessGrid`."""
        return self.replication > 1 or self.unit_grid

    def grid(self) -> ProcessGrid | None:
        """The process grid of a 1.5D layout (``None``: 1D)."""
        return process_grid(self.replication) if self.replicated else None


@dataclass(frozen=True)
class CallPath:
    """One way a call of a distributed layer runs, decided once (:func:`compile_plan`, at attach):
    the stages its forward pre-hook runs, in order, and what its ``propagate`` does.  A call runs its
    path's stages and nothing else (:meth:`~.call.LayerCall.enter`); ``propagate`` falls back to
    ``"sources"`` only where PyG's forward passes no tensor the plan's aggregation reads.

    Args:
        name (str): ``"homogeneous"`` (a shard's ``HaloAdj``), ``"fused-source"`` (the same, the layer's
            source module's output exchanged with ``edge_update``'s sources: ``GATConv``), ``"own-type
            relation"`` (a relation within one node type, as a homogeneous shard), ``"nested"`` (a layer
            called inside a distributed layer's forward, on its shard) or ``"relation"`` (a relation of a
            heterogeneous shard: the sources completed, then plain PyG, :func:`~.hetero.enter_relation`).
        stages (tuple[str, ...]): the pre-hook's stages: ``"check"``, ``"local graph"``, ``"outer
            shard"``, ``"move linears"``, ``"normalise"``, ``"relation sources"``.
        propagate (str, optional): ``"spmm"`` (the distributed SpMM), ``"attention"`` (one CSR SpMM per
            head), ``"sources"`` (sources completed with halo rows, then PyG's ``propagate``) or
            ``"pyg"`` (PyG's own). (default: ``"sources"``)
    """
    name: str
    stages: tuple[str, ...]
    propagate: str = "sources"


def call_paths(spmm_weight: str | None, attention_weight: str | None, fused: str | None, moves_linears: bool,
               adapts: bool) -> dict[str, CallPath]:
    """The :class:`CallPath` of each kind of call of a layer whose plan has these fields, by name
    (the first: a call on a shard's ``HaloAdj``)."""
    after = (("move linears",) if moves_linears else ()) + (("normalise",) if adapts else ())
    propagate = "spmm" if spmm_weight is not None else "attention" if attention_weight is not None else "sources"
    main = CallPath("fused-source" if fused else "homogeneous", ("check", "local graph", *after), propagate)
    return {main.name: main, "own-type relation": CallPath("own-type relation", main.stages, propagate),
            "nested": CallPath("nested", ("outer shard",) + (("normalise",) if adapts else ()), propagate),
            "relation": CallPath("relation", ("relation sources",), "pyg")}


@dataclass(frozen=True)
class LayerPlan:
    r"""A layer's rule compiled for its class and instance (see the module doc).

    Args:
        rule (LayerRule): the rule that applies to the layer's class.
        signature (inspect.Signature): its ``forward``'s (with ``self``).
        spmm_weight (str, optional): the weight argument of a message :math:`w_{ji} x_j` aggregated
            linearly (``""``: unweighted), run as the distributed SpMM. (default: ``None``)
        attention_weight (str, optional): the per-edge, per-head :math:`\alpha` of a message
            :math:`\alpha_{ji} x_j`, aggregated as one CSR SpMM per head. (default: ``None``)
        message_sources (tuple[str, ...], optional): the tensors ``message`` reads at sources
            (``x`` of ``x_j``). (default: ``()``)
        edge_update_sources (tuple[str, ...], optional): those ``edge_update`` reads. (default: ``()``)
        takes_edge_weight (bool, optional): ``forward`` has an ``edge_weight`` argument.
            (default: ``False``)
        drops_adj_values (bool, optional): PyG's ``adj_t`` path ignores the adjacency's values.
            (default: ``False``)
        fused_source (str, optional): the submodule whose first output ``propagate`` reads at
            sources, exchanged with ``edge_update``'s sources. (default: ``None``)
        normalisation (GcnNormalisation, optional): how ``forward`` calls ``gcn_norm``.
            (default: ``None``)
        adapts (bool, optional): the call's arguments need the rule's normalisation or adapter.
            (default: ``False``)
        moves_linears (bool, optional): the rule names a ``post_linear`` or ``input_linear`` (the call
            has a *move linears* stage). (default: ``False``)
        path (CallPath, optional): the path of a call on a shard's ``HaloAdj``. (default: ``None``)
        paths (dict[str, CallPath], optional): every path of the layer, by name (:func:`call_paths`).
            (default: ``{}``)

    Plain fields only (no properties): reading a plan runs no code.
    """
    rule: LayerRule
    signature: inspect.Signature
    spmm_weight: str | None = None
    attention_weight: str | None = None
    message_sources: tuple[str, ...] = ()
    edge_update_sources: tuple[str, ...] = ()
    takes_edge_weight: bool = False
    drops_adj_values: bool = False
    fused_source: str | None = None
    normalisation: GcnNormalisation | None = None
    adapts: bool = False
    moves_linears: bool = False
    path: CallPath | None = None
    paths: dict[str, CallPath] = field(default_factory=dict)


def source_names(arg_names: list[str]) -> tuple[str, ...]:
    """The tensors read at sources: ``x`` of ``x_j``, ...

    Args:
        arg_names (list[str]): the arguments of ``message`` or ``edge_update``.
    """
    return tuple(sorted({a[:-2] for a in arg_names if a.endswith("_j")}))


def linear_aggregation(conv: MessagePassing) -> bool:
    """PyG's own ``update`` and a sum or mean aggregation (``decomposed_layers`` does not matter:
    a linear aggregation of feature chunks, concatenated, is the aggregation).

    Args:
        conv (MessagePassing): the layer.
    """
    return (type(conv).update is MessagePassing.update and isinstance(conv.aggr, str)
            and conv.aggr in LINEAR_AGGRS)


def _drops_values(conv: MessagePassing, rule: LayerRule) -> bool:
    """Whether PyG's ``adj_t`` path of ``conv`` ignores the adjacency's values: its rule says so,
    or nothing of it reads them."""
    from torch_geometric.nn import EGConv
    if rule.drops_adj_values:
        return True
    if isinstance(conv, EGConv):  # only its "symnorm" aggregator reads the values (through gcn_norm)
        return "symnorm" not in getattr(conv, "aggregators", ())
    fused = type(conv).message_and_aggregate is not MessagePassing.message_and_aggregate
    reads = {"edge_weight", "edge_type"} & set(message_arguments(conv))
    return not fused and not reads


def compile_plan(conv: MessagePassing) -> LayerPlan:
    """The :class:`LayerPlan` of ``conv`` (see the module doc).

    Args:
        conv (MessagePassing): the layer being attached.
    """
    rule = layer_rule(type(conv))
    linear = linear_aggregation(conv)
    signature = forward_signature(type(conv))
    fused = next((name for name in rule.fused_source if isinstance(getattr(conv, name, None), torch.nn.Module)),
                 None)
    spmm_weight = rule.weight if rule.aggregation == "spmm" and linear else None
    attention_weight = rule.weight if rule.aggregation == "attention" and linear else None
    adapts = rule.normalisation is not None or rule.adapter is not None
    moves_linears = rule.post_linear is not None or rule.input_linear is not None
    paths = call_paths(spmm_weight, attention_weight, fused, moves_linears, adapts)
    return LayerPlan(
        rule, signature, spmm_weight=spmm_weight, attention_weight=attention_weight,
        message_sources=source_names(message_arguments(conv)),
        edge_update_sources=source_names(edge_update_arguments(conv)),
        takes_edge_weight="edge_weight" in signature.parameters,
        drops_adj_values=_drops_values(conv, rule), fused_source=fused, normalisation=rule.normalisation,
        adapts=adapts, moves_linears=moves_linears, path=next(iter(paths.values())), paths=paths)
