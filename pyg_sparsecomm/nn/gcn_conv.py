"""``DistributedGCNConv``: ``GCNConv`` over a partitioned graph, on :func:`~pyg_sparsecomm.distribute`'s runtime."""
from dataclasses import replace

import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import GCNConv, MessagePassing

from ..algorithms.choice import compression_note, explain_table
from ..algorithms.cost import CostModel
from ..algorithms.settings import check_settings
from ..comm.halo_options import ExchangeSlots, HaloOptions
from .rules import pyg as _pyg_rules  # noqa: F401  (registers GCNConv's rule, which this one derives from)
from .rules.registry import layer_rule, register_layer_rule
from .runtime.layer import attach
from .runtime.plan import DistributedSettings
from .runtime.state import LayerState


class DistributedGCNConv(GCNConv):
    r"""The graph convolution of Kipf & Welling, trained full-graph across processes.

    .. math::
        \mathbf{X}' = \hat{\mathbf{D}}^{-1/2} \hat{\mathbf{A}} \hat{\mathbf{D}}^{-1/2}
        \mathbf{X} \mathbf{\Theta} + \mathbf{b}

    A ``GCNConv`` (same arguments, defaults, parameter names and ``state_dict`` keys) that runs
    distributed when called with a shard's :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj`, through the
    runtime :func:`~pyg_sparsecomm.distribute` gives ``GCNConv``
    (:mod:`~pyg_sparsecomm.nn.runtime.call`): ``GCNConv.forward`` runs on a local
    ``edge_index``; it normalises with global degrees (the halo's with one exchange of one
    column, :mod:`~pyg_sparsecomm.nn.runtime.normalisation`); its linear map runs first on the owned rows and
    the aggregation :math:`\hat A (X \Theta)` is one distributed SpMM by ``algorithm`` (ICPP'24
    eq. (1), Algorithm 1), which fetches the rows of other ranks that the block row needs.  With
    ``cached=True`` the normalisation and the SpMM built on it are kept, the normalised adjacency
    once per shard for all the cached layers that normalise alike (:mod:`~pyg_sparsecomm.nn.runtime.shared_adjacency`).
    Forward, input gradients
    and parameter gradients equal single-process ``GCNConv`` on the whole graph.  Unlike
    ``distribute(GCNConv(...))`` it accepts a 1.5D algorithm with ``replication=1`` (the ``P x 1``
    grid) and does not synchronise parameter gradients (a model holding it does, e.g. through
    ``distribute(model)`` or ``DistributedDataParallel``).  Its first call on a shard checks that
    every rank holds the same parameters and raises naming the fix otherwise (e.g. built without
    a common ``torch.manual_seed`` and not wrapped).

    Called with a plain ``edge_index``/sparse tensor it is ``GCNConv`` when no process group with
    more than one rank is active, and raises otherwise (partition and shard the graph first).

    Args:
        in_channels (int): size of each input sample (``-1``: lazy).
        out_channels (int): size of each output sample.
        improved (bool, optional): self-loops of weight 2 (:math:`\mathbf{\hat{A}} = \mathbf{A} + 2\mathbf{I}`),
            as in ``GCNConv``. (default: :obj:`False`)
        cached (bool, optional): keep the normalised adjacency (and the SpMM built on it) after the first
            call, as in ``GCNConv`` (transductive learning). (default: :obj:`False`)
        add_self_loops (bool, optional): add self-loops, as in ``GCNConv`` (``None``: ``normalize``).
            (default: :obj:`None`)
        normalize (bool, optional): the symmetric normalisation, as in ``GCNConv``. (default: :obj:`True`)
        bias (bool, optional): learn an additive bias. (default: :obj:`True`)
        algorithm (str, optional): the SpMM algorithm: ``"1d"`` (sparsity-aware, one all-to-allv
            per SpMM), ``"1d_overlap"`` (overlapped with the owned-column SpMM),
            ``"1d_overlap_p2p"`` (overlapped, point-to-point messages to the peers that have
            rows only), ``"oblivious"`` (CAGNET's block-row broadcasts), ``"rdma"`` (the one-sided
            engine of :mod:`pyg_sparsecomm.rdma`, under ``mpiexec``), ``"1.5d"`` /
            ``"1.5d_oblivious"`` (replicated block rows on a :math:`(P/c) \times c` grid, ICPP'24
            Algorithm 2, with ``shard(data, grid=ProcessGrid(c))`` of a partition into
            :math:`P/c` parts), or ``"auto"``: at the first call the α-β model of ``cost_model``
            predicts the communication time of the algorithms that fit the shard's layout and the
            cheapest is used for good (:meth:`explain_algorithm`). (default: ``"1d"``)
        group (ProcessGroup, optional): group of the 1D algorithms (1.5D algorithms run on the
            grid of the default group). (default: the default group)
        replication (int, optional): ``c``, the replicas of each block row (1: 1D). (default: ``1``)
        cost_model (CostModel, optional): α and β for ``"auto"``
            (``CostModel.calibrate()`` measures the running backend). (default: ``CostModel()``)
        halo_precision (str, optional): wire format of the halo rows: ``None`` (exact), ``"bf16"``,
            ``"fp16"``, ``"int8"`` or ``"int4"``
            (:class:`~pyg_sparsecomm.comm.halo_options.HaloOptions`). (default: ``None``)
        halo_grad_precision (str, optional): wire format of the halo gradients (``"same"``:
            ``halo_precision``; ``None``: exact). (default: ``"same"``)
        staleness (int, optional): ``0`` (exact) or ``1``: the previous training step's halo rows
            and gradients, exchanged while this step computes (PipeGCN). (default: ``0``)
        stale_smoothing (float, optional): ``γ`` of the exponential smoothing of stale halos
            (``None``: off). (default: ``None``)
        **kwargs (optional): additional arguments of ``MessagePassing``.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_r|, F_{in})` (the shard's ``local.x``),
          ``local.adj`` (a :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj`), edge weights
          :math:`(|\mathcal{E}_r|)` *(optional, in* ``local.adj`` *'s edge order; default: its
          values)*
        - **output:** node features :math:`(|\mathcal{V}_r|, F_{out})` of the owned rows
    """

    # PyG compiles ``propagate`` per class from a template and keeps the class's previous
    # ``propagate`` as the generic one its ``explain``/``decomposed_layers`` modes switch to
    # (``_orig_propagate``).  Inherited, that previous one would be GCNConv's compiled version
    # once a GCNConv exists, which supports neither mode: start from MessagePassing's generic one.
    propagate = MessagePassing.propagate

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False,
                 cached: bool = False, add_self_loops: bool | None = None, normalize: bool = True,
                 bias: bool = True, algorithm: str = "1d", group: dist.ProcessGroup | None = None,
                 replication: int = 1, cost_model: CostModel | None = None,
                 halo_precision: str | None = None, halo_grad_precision: str | None = "same",
                 staleness: int = 0, stale_smoothing: float | None = None, **kwargs) -> None:
        options = HaloOptions.from_arguments(halo_precision, halo_grad_precision, staleness, stale_smoothing)
        # compression refused now rather than at the first forward; a 1.5D algorithm may run on c = 1
        replicated = check_settings(algorithm, replication, group, options.compression_only, unit_grid=True)
        super().__init__(in_channels, out_channels, improved=improved, cached=cached,
                         add_self_loops=add_self_loops, normalize=normalize, bias=bias, **kwargs)
        attach(self, DistributedSettings(algorithm, group, replication, cost_model or CostModel(), options,
                                         unit_grid=replicated and replication == 1), own=True)

    # the distributed settings and what the layer found out, as attributes of the layer
    _state = property(lambda self: self._sparsecomm)
    algorithm = property(lambda self: self._state.settings.algorithm, doc="The ``algorithm`` argument.")
    group = property(lambda self: self._state.settings.group, doc="The ``group`` argument.")
    replication = property(lambda self: self._state.settings.replication, doc="The ``replication`` argument.")
    cost_model = property(lambda self: self._state.settings.cost_model, doc="α and β of ``\"auto\"``.")
    halo_options = property(lambda self: self._state.settings.halo_options, doc="The halo's wire format and staleness.")
    chosen_algorithm = property(lambda self: self._state.chosen_algorithm,
                                doc="The algorithm in use (``\"auto\"``: ``None`` until the first call).")
    cost_report = property(lambda self: self._state.cost_report, doc="``\"auto\"``'s predictions.")
    exact_cost_report = property(lambda self: self._state.exact_cost_report, doc="The same with exact halos.")
    sync_cost_report = property(lambda self: self._state.sync_cost_report, doc="The same bytes, not pipelined.")

    @property
    def exchange_slots(self) -> ExchangeSlots:
        """State of the stale exchanges across calls."""
        return self._state.exchange_slots

    @property
    def _cached_spmm(self):
        """The SpMM algorithm a ``cached=True`` layer keeps (``None`` before its first call)."""
        return self._state.cached_spmm.spmm

    @_cached_spmm.setter
    def _cached_spmm(self, value) -> None:
        if value is not None:
            raise ValueError("_cached_spmm can only be dropped (set to None)")
        self._state.forget_spmm()

    def reset_parameters(self) -> None:
        super().reset_parameters()  # GCNConv's drops its cached normalisation
        state: LayerState | None = getattr(self, "_sparsecomm", None)
        if state is not None:  # a reset also starts a new pipeline of stale halos
            state.forget()

    def _apply(self, fn, recurse: bool = True):
        # GCNConv and the runtime keep tensors across calls that a move (.to, .cuda, .double, ...)
        # would leave on the old device or dtype: dropped here, rebuilt by the next forward
        self._cached_edge_index = self._cached_adj_t = None
        state: LayerState | None = getattr(self, "_sparsecomm", None)
        if state is not None:
            state.forget()
        return super()._apply(fn, recurse)

    def explain_algorithm(self) -> str:
        """Why ``algorithm="auto"`` chose what it chose (available after the first call).

        Not named ``explain``: that is :class:`~torch_geometric.nn.conv.MessagePassing`'s
        explainability flag, set by PyG's :class:`~torch_geometric.explain.Explainer`.
        """
        state: LayerState = self._state
        element_size = state.exchanged_width[1] if state.exchanged_width else 4
        note = compression_note(self.out_channels, element_size, self.halo_options)
        if not state.cost_report:
            return "\n".join(filter(None, [f"algorithm={self.algorithm!r} (nothing was chosen automatically)",
                                            note]))
        header = (f"this layer's SpMM (width {self.out_channels}), forward + backward, i.e. its communication "
                  f"per training step; slowest rank:")
        table = explain_table(state.cost_report, state.chosen_algorithm, header, self.cost_model,
                              state.exact_cost_report, state.sync_cost_report if self.halo_options.staleness else None)
        return "\n".join(filter(None, [table, note]))

    def __repr__(self) -> str:
        extra = f", replication={self.replication}" if self.replication > 1 else ""
        if not self.halo_options.exact:
            extra += f", {self.halo_options.describe()}"
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"algorithm={self.algorithm!r}{extra})")


def _floating_features(conv: MessagePassing, bound, context) -> None:
    """The rule's adapter: on a shard, ``x`` must be floating point (the SpMM multiplies it)."""
    x = bound.arguments.get("x")
    if isinstance(x, Tensor) and not x.is_floating_point():
        raise ValueError(f"x must be a floating point tensor, got dtype {x.dtype}")


register_layer_rule(DistributedGCNConv, replace(layer_rule(GCNConv), adapter=_floating_features))
