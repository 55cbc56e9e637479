r"""``distribute(model)``: any module of PyG layers, trained full-graph across processes.

What happens to the model's modules, in place (classes of layers, parameters and ``state_dict``
keys stay, as with ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``):

* every module is judged by its class's :class:`~pyg_sparsecomm.nn.rules.registry.LayerRule`
  (found through the MRO): a refused one raises ``NotImplementedError`` naming it and why;
* every ``MessagePassing`` layer keeps its class and code and gets hooks and two instance-level
  overrides (:mod:`.runtime.call` lists them, and why each is needed): on a shard it propagates
  over a local ``edge_index`` whose sources are ``[owned | halo]`` columns, the tensors its
  messages read at sources completed with halo rows after the layer's own transform, and an
  ``"spmm"`` aggregation runs as one distributed SpMM by ``algorithm``.  A layer whose forward
  normalises with ``gcn_norm`` (``get_laplacian``:
  ``ChebConv``) gets, per instance, the normalisation with global degrees its rule describes
  (:mod:`.runtime.normalisation`); PyG's modules are not touched;
* ``HGTConv`` and ``HANConv`` take a whole heterogeneous graph: their rules swap in a subclass
  (:mod:`.hgt_conv`, :mod:`.han_conv`) whose forward runs on a shard's ``local.adj_dict``,
  exchanging each source node type once (:mod:`.runtime.relation_dict`);
* norms with whole-graph statistics (``torch.nn.BatchNorm1d``, PyG's ``InstanceNorm``,
  ``GraphNorm``, ``LayerNorm``) get their rule's distributed class (``module.__class__`` is
  swapped; parameters and buffers stay) and reduce their statistics over all ranks;
* PyG's ``LightGCN`` becomes :class:`~.lightgcn.DistributedLightGCN`: its embedding table is cut to
  the owned rows at its first call on a shard (:mod:`.lightgcn`);
* PyG's ``DeepGraphInfomax``, ``GAE``, ``VGAE``, ``ARGA``, ``ARGVA`` and ``InnerProductDecoder`` (and
  users' subclasses) get their distributed classes (:mod:`.models`): summaries, corruptions, losses,
  negatives, noise and evaluation over all nodes of all ranks;
* PyG's ``SparseLinear`` (``LINKX``'s) reads its weight row per node at the global ids of the shard's
  sources (:mod:`.models.sparse_linear`), with no exchange attached;
* PyG's ``TrimToLayer`` modules also trim mini-batch adjacencies (:mod:`.trim`);
* the model's parameters get the gradient synchronisation of :mod:`.gradient_sync`.

Called without a ``HaloAdj``, and without a process group of more than one rank, every layer is
plain PyG.
"""

import torch
import torch.distributed as dist
from torch_geometric.nn import MessagePassing

from ..algorithms.choice import compression_note, explain_table
from ..algorithms.cost import CostModel
from ..algorithms.settings import check_settings
from ..comm.halo_options import HaloOptions
from ..comm.host_allocator import keep_host_buffers
from ..compat import edge_update_arguments, message_arguments
from . import gradient_sync, trim
from .lightgcn import DistributedLightGCN, attach_embedding
from .models.classes import convert_model, model_refusal
from .norms import convert_norm
from .rules import pyg as _pyg_rules  # noqa: F401  (PyG's rules registered before any lookup)
from .rules.registry import layer_rule, swap_class
from .runtime import hetero
from .runtime.aggregation import edge_weighted_arg, linear_weight_arg
from .runtime.layer import attach, distributed_layers
from .runtime.outer_frames import register as register_outer_frames
from .runtime.plan import DistributedSettings


def whole_graph_children() -> dict[type, str]:
    """Modules that compute over all nodes unless a message passing layer holds them as its own
    aggregation: ``torch_geometric.nn.aggr.*`` (global pooling), ``torch.nn.MultiheadAttention``."""
    from torch_geometric.nn.aggr import Aggregation
    return {Aggregation: "pools over all nodes of the graph (global pooling: each rank would pool its own rows only)",
            torch.nn.MultiheadAttention: "attends from every node to all nodes of the graph"}


def _whole_graph_child(module: torch.nn.Module) -> str | None:
    """Why a submodule of ``module`` computes over all nodes, or ``None``: an aggregation or
    attention module held (directly or through ``ModuleList``/``ModuleDict``/``Sequential``
    containers, which are judged with their holder) by a module that is neither a message passing
    layer nor an aggregation (:func:`whole_graph_children`)."""
    from torch_geometric.nn.aggr import Aggregation
    containers = (torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.Sequential)
    if isinstance(module, (MessagePassing, Aggregation, *containers)):
        return None
    children = list(module.named_children())
    while children:
        name, child = children.pop(0)
        if isinstance(child, containers):
            children.extend((f"{name}.{key}", grandchild) for key, grandchild in child.named_children())
            continue
        for cls, reason in whole_graph_children().items():
            if isinstance(child, cls):
                return f"holds {type(child).__name__} ({name!r}), which {reason}"
    return None


def refusal(module: torch.nn.Module) -> str | None:
    """Why ``module`` cannot run exactly on a partitioned graph, or ``None``: its class's
    :class:`~pyg_sparsecomm.nn.rules.registry.LayerRule` refuses it (a refused PyG class or a subclass
    of one; a user's class of the same name is not), it holds a global pooling or attention module
    outside a message passing layer (:func:`whole_graph_children`), or it is a ``MessagePassing``
    layer whose messages flow ``target_to_source`` or that reads a source tensor both whole and at
    sources.

    Args:
        module (torch.nn.Module): any module of the model.

    A functional global pooling inside a ``forward`` (``global_mean_pool(x, batch)``) cannot be
    seen here: under ``distribute()`` it pools each rank's rows only."""
    reason = layer_rule(type(module)).refused or _whole_graph_child(module) or model_refusal(module)
    if reason:
        return reason
    if isinstance(module, MessagePassing) and module.flow != "source_to_target":
        return (f"has flow={module.flow!r}; a rank holds the in-edges of its nodes, so only "
                f"flow='source_to_target' can run distributed")
    if isinstance(module, MessagePassing):
        for args in (message_arguments(module), edge_update_arguments(module)):
            both = sorted({a[:-2] for a in args if a.endswith("_j")} & set(args))
            if both:
                return (f"reads {both[0]!r} both whole and at sources ('{both[0]}_j') in its message functions; "
                        f"distribute() completes source tensors with halo rows, so pass the whole tensor under "
                        f"another name")
    return None


def _settings(algorithm: str, group: dist.ProcessGroup | None, replication: int, cost_model: CostModel | None,
              halo_precision: str | None, halo_grad_precision: str | None, staleness: int,
              stale_smoothing: float | None) -> DistributedSettings:
    """The checked arguments of :func:`distribute`."""
    options = HaloOptions.from_arguments(halo_precision, halo_grad_precision, staleness, stale_smoothing)
    check_settings(algorithm, replication, group, options.compression_only)
    return DistributedSettings(algorithm, group, replication, cost_model or CostModel(), options)


def _refuse_inexact(module: torch.nn.Module) -> None:
    """Raises naming the first submodule whose rule refuses it (before anything is installed)."""
    for name, child in module.named_modules():
        reason = refusal(child)
        if reason:
            raise NotImplementedError(f"distribute(): {type(child).__name__} ({name or 'the module itself'}) cannot "
                                      f"be trained exactly on a partitioned graph: it {reason}")


def distribute(module: torch.nn.Module, algorithm: str = "1d", group: dist.ProcessGroup | None = None,
               replication: int = 1, cost_model: CostModel | None = None, halo_precision: str | None = None,
               halo_grad_precision: str | None = "same", staleness: int = 0,
               stale_smoothing: float | None = None, broadcast: bool = True,
               sync_gradients: bool = True) -> torch.nn.Module:
    r"""Makes every PyG layer in ``module`` train full-graph on a rank's shard, in place
    (see the module doc for what happens to each class); returns ``module``.

    Call the model as before, with the shard's ``local.adj`` where it took ``edge_index``
    (``local.edge_weight`` / ``local.edge_attr`` are in ``adj``'s edge order); a mini-batch of
    :class:`~pyg_sparsecomm.loader.DistributedNeighborLoader` likewise (``batch.adj``)::

        model = distribute(GraphSAGE(in_channels, 64, num_layers=2, out_channels=c))
        out = model(local.x, local.adj)

    Every rank calls it on the same model in the same order (it runs collectives).

    Args:
        module (torch.nn.Module): a PyG layer, a ``BasicGNN``, a ``torch_geometric.nn.Sequential``
            or any module holding them.
        algorithm (str, optional): SpMM algorithm of the ``"spmm"`` aggregations: ``"1d"``,
            ``"1d_overlap"``, ``"1d_overlap_p2p"``, ``"oblivious"``, ``"auto"``, or with
            ``replication > 1`` ``"1.5d"``/``"1.5d_oblivious"``. (default: ``"1d"``)
        group (ProcessGroup, optional): group of the 1D exchanges. (default: the default group)
        replication (int, optional): ``c`` of the 1.5D layout. (default: ``1``)
        cost_model (CostModel, optional): α and β for ``algorithm="auto"``. (default: ``CostModel()``)
        halo_precision (str, optional): wire format of the halo rows: ``None`` (exact),
            ``"bf16"``, ``"fp16"``, ``"int8"`` or ``"int4"``. (default: ``None``)
        halo_grad_precision (str, optional): wire format of the halo gradients (``"same"``:
            ``halo_precision``; ``None``: exact). (default: ``"same"``)
        staleness (int, optional): ``0`` (exact) or ``1``: the previous step's halo rows and
            gradients, exchanged while this step computes. (default: ``0``)
        stale_smoothing (float, optional): ``γ`` of the smoothing of stale halos. (default: ``None``)
        broadcast (bool, optional): copy rank 0's parameters and buffers now. (default: ``True``)
        sync_gradients (bool, optional): after every backward ``p.grad`` holds the sum of the
            ranks' shares (the single-process gradient with
            :func:`~pyg_sparsecomm.distributed_loss`); ``False`` if another wrapper
            (``DistributedDataParallel``) synchronises them. (default: ``True``)

    Shapes:
        - **input:** the model's own inputs: node tensors with the shard's ``local.num_owned``
          rows, ``local.adj`` in place of ``edge_index``
        - **output:** the model's own outputs, for the owned rows
    """
    settings = _settings(algorithm, group, replication, cost_model, halo_precision, halo_grad_precision, staleness,
                         stale_smoothing)
    _refuse_inexact(module)
    keep_host_buffers()  # each step's exchange buffers reused, not faulted in afresh (comm/host_allocator.py)
    trim.install(module)
    if hetero.is_heterogeneous(module):  # homogeneous models get no hooks of it
        hetero.install_scope(module)
    for child in module.modules():
        if isinstance(child, MessagePassing):
            swap_class(child)  # HGTConv, HANConv: their forward on a heterogeneous shard's adj_dict
            if not getattr(child, "runs_on_shard", False):  # LINKX's SparseLinear reads its rows by global id
                attach(child, settings)
        else:
            convert_norm(child, settings)  # and LightGCN: its rule's DistributedLightGCN
            if isinstance(child, DistributedLightGCN):
                attach_embedding(child, settings.group)  # a table sharded by owner: its gradient not summed
            convert_model(child, settings.group)  # DeepGraphInfomax, GAE and kin (and users' subclasses of them)
    gradient_sync.install(module, group, broadcast, sync_gradients)
    register_outer_frames(module)  # under torch.compile: traced again once its layers have records
    return module


def summary(module: torch.nn.Module) -> str:
    """One line per distributed layer of ``module``: how its aggregation runs (after a first
    forward, the SpMM algorithm chosen, with the cost table of ``algorithm="auto"``).

    Args:
        module (torch.nn.Module): a model :func:`distribute` converted.
    """
    lines = []
    modules = dict(module.named_modules())
    for name, state in distributed_layers(module):
        child = modules[name]
        if edge_weighted_arg(child, state.plan) is not None:
            how = "source tensors exchanged (1D all-to-allv), aggregation as one CSR SpMM per head"
        elif linear_weight_arg(child, state.plan) is None:
            how = "source tensors exchanged (1D all-to-allv)"
        else:
            how = f"distributed SpMM, algorithm={state.chosen_algorithm or state.settings.algorithm!r}"
        lines.append(f"{name or type(child).__name__} ({type(child).__name__}): {how}")
        if state.cost_report:
            header = "  algorithm=\"auto\" compared (forward + backward, slowest rank):"
            stale = state.settings.halo_options.staleness
            lines.append(explain_table(state.cost_report, state.chosen_algorithm, header, state.settings.cost_model,
                                       state.exact_cost_report, state.sync_cost_report if stale else None))
        if state.exchanged_width is not None and not state.settings.halo_options.exact:
            width, element_size = state.exchanged_width
            lines.append("  " + compression_note(width, element_size, state.settings.halo_options))
    return "\n".join(lines)
