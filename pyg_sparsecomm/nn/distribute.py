"""``distribute(model)``: any module of PyG layers, trained full-graph across processes."""

import torch
import torch.distributed as dist
from torch_geometric.nn import MessagePassing

from ..algorithms import ALGORITHMS
from ..algorithms.base import check_options
from ..algorithms.choice import compression_note, explain_table
from ..comm.halo_options import HaloOptions
from ..compat import edge_update_arguments, message_arguments
from ..cost import CostModel
from . import degree_norm, gradient_sync, trim
from .distributed_layer import DistributedSettings, attach
from .layer_rules import layer_rule
from .norms import convert_norm


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
    :class:`~pyg_sparsecomm.nn.layer_rules.LayerRule` refuses it (a refused PyG class or a subclass
    of one; a user's class of the same name is not), it holds a global pooling or attention module
    outside a message passing layer (:func:`whole_graph_children`), or it is a ``MessagePassing``
    layer whose messages flow ``target_to_source`` or that reads a source tensor both whole and at
    sources.

    Args:
        module (torch.nn.Module): any module of the model.

    A functional global pooling inside a ``forward`` (``global_mean_pool(x, batch)``) cannot be
    seen here: under ``distribute()`` it pools each rank's rows only."""
    reason = layer_rule(type(module)).refused or _whole_graph_child(module)
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


def distribute(module: torch.nn.Module, algorithm: str = "1d", group: dist.ProcessGroup | None = None,
               replication: int = 1, cost_model: CostModel | None = None, halo_precision: str | None = None,
               halo_grad_precision: str | None = "same", staleness: int = 0,
               stale_smoothing: float | None = None, broadcast: bool = True,
               sync_gradients: bool = True) -> torch.nn.Module:
    r"""Makes every PyG layer in ``module`` train full-graph on a rank's shard; returns ``module``.

    Works in place, as ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` does: classes,
    parameters and ``state_dict`` keys are unchanged, so a single-process checkpoint loads
    before or after.  Call the model as before, with the shard's ``local.adj`` where it took
    ``edge_index`` (and ``local.edge_weight`` / ``local.edge_attr``, which are in ``adj``'s
    edge order, where it took those)::

        model = distribute(GraphSAGE(in_channels, 64, num_layers=2, out_channels=c))
        out = model(local.x, local.adj)

    Every ``MessagePassing`` layer computes its owned rows exactly as on the whole graph:
    the layer transforms its inputs first, then the tensors its messages read at sources
    (``x_j``, ``alpha_j``, ...) are completed with halo rows in one all-to-allv (backward:
    the reverse exchange), so bytes per row are the transformed widths.  A linear
    aggregation (:math:`\sum_j w_{ji} x_j`, sum or mean) runs as one distributed SpMM by
    ``algorithm``.  Degree normalisations (``gcn_norm``, ``get_laplacian``) use global
    degrees.  Norms with whole-graph statistics (``BatchNorm``, graph-mode ``LayerNorm``,
    ``GraphNorm``, ``InstanceNorm``) reduce them over all ranks.  Layers that cannot be
    exact raise ``NotImplementedError`` here, naming the layer and the reason.  Without a
    process group, or with one rank, and without a ``HaloAdj``, every layer is plain PyG.

    Mini-batches of :class:`~pyg_sparsecomm.loader.DistributedNeighborLoader` run the same way
    (``model(batch.x, batch.adj)``); a ``BasicGNN`` given ``num_sampled_nodes_per_hop=
    batch.num_sampled_nodes, num_sampled_edges_per_hop=batch.num_sampled_edges`` trims each
    layer to the hops it needs, its exchanges included (:func:`pyg_sparsecomm.loader.trim_to_layer`).

    Args:
        module: a PyG layer, a ``BasicGNN`` (``GCN``, ``GraphSAGE``, ``GIN``, ``GAT``, ...),
            ``torch_geometric.nn.Sequential`` or any module holding them.
        algorithm: SpMM algorithm of the linear aggregations (``"1d"``, ``"1d_overlap"``,
            ``"1d_overlap_p2p"``, ``"oblivious"``, ``"auto"``, or with ``replication > 1``
            ``"1.5d"`` / ``"1.5d_oblivious"``); other messages always use the 1D exchange.
        group: process group of the 1D exchanges (default: the default group).
        replication: ``c`` of the 1.5D layout (``shard(data, grid=process_grid(c))``).
        cost_model: α and β for ``algorithm="auto"``.
        halo_precision: wire format of every layer's halo rows: ``None`` (exact, the default),
            ``"bf16"``, ``"fp16"``, ``"int8"`` or ``"int4"`` (see
            :class:`~pyg_sparsecomm.comm.halo_options.HaloOptions`).
        halo_grad_precision: wire format of the backward's halo gradients (``"same"``:
            ``halo_precision``; ``None``: exact).
        staleness: ``0`` (exact) or ``1``: every layer uses the previous training step's halo
            rows and halo gradients, exchanged while this step computes (PipeGCN).
        stale_smoothing: ``γ`` of the exponential smoothing of stale halos (``None``: off).
        broadcast: copy rank 0's parameters and buffers to every rank now, as
            ``DistributedDataParallel`` does, so ranks start identical without a seed.
        sync_gradients: after every backward, ``p.grad`` holds the sum of the ranks' shares
            (:mod:`~pyg_sparsecomm.nn.gradient_sync`: bucketed all-reduces overlapped with
            backward, on a process group of their own); with the loss rule of
            :func:`~pyg_sparsecomm.distributed_loss` that is the single-process gradient, and a
            backward from a loss that did not go through it warns
            (:class:`~pyg_sparsecomm.nn.gradient_sync.LossNormalisationWarning`).  Calling
            :func:`~pyg_sparsecomm.sync_gradients` as well is harmless (it skips these
            parameters).  ``False`` if another wrapper (``DistributedDataParallel``)
            synchronises them; wrapping without it raises.

    With a process group of more than one rank, every rank must call ``distribute`` on the same
    model in the same order (the broadcast and the gradient synchronisation's process group are
    collectives), after ``init_process_group`` (under ``torchrun`` it joins the job itself if the
    script did not, :func:`~pyg_sparsecomm.runtime.join_job`).
    """
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS) + ['auto']}")
    if not isinstance(replication, int) or replication < 1:
        raise ValueError(f"replication must be a positive integer, got {replication!r}")
    if algorithm != "auto" and ALGORITHMS[algorithm].replicated != (replication > 1):
        raise ValueError(f"algorithm={algorithm!r} needs replication "
                         f"{'> 1' if ALGORITHMS[algorithm].replicated else '= 1'}, got {replication}")
    if replication > 1 and group is not None:
        raise ValueError("1.5D layouts run on the ProcessGrid of the default group; do not pass group=")
    options = HaloOptions.from_arguments(halo_precision, halo_grad_precision, staleness, stale_smoothing)
    check_options(algorithm, options.compression_only)
    settings = DistributedSettings(algorithm, group, replication, cost_model or CostModel(), options)
    for name, child in module.named_modules():
        reason = refusal(child)
        if reason:
            raise NotImplementedError(f"distribute(): {type(child).__name__} ({name or 'the module itself'}) cannot "
                                      f"be trained exactly on a partitioned graph: it {reason}")
    trim.install(module)
    for child in module.modules():
        if isinstance(child, MessagePassing):
            degree_norm.install(type(child))
            attach(child, settings)
        else:
            convert_norm(child, settings)
    gradient_sync.install(module, group, broadcast, sync_gradients)
    return module


def summary(module: torch.nn.Module) -> str:
    """One line per distributed layer of ``module``: how its aggregation runs (after a first
    forward, the SpMM algorithm chosen, with the cost table of ``algorithm="auto"``)."""
    from .linear_aggregation import edge_weighted_arg, linear_weight_arg
    lines = []
    for name, child in module.named_modules():
        state = getattr(child, "_sparsecomm", None)
        if state is None:
            continue
        if edge_weighted_arg(child) is not None:
            how = "source tensors exchanged (1D all-to-allv), aggregation as one CSR SpMM per head"
        elif linear_weight_arg(child) is None:
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
