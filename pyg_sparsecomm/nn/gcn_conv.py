"""``DistributedGCNConv``: ``GCNConv`` over a partitioned graph."""

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import GCNConv, MessagePassing

from ..adj import HaloAdj
from ..algorithms import SpMMAlgorithm, make_algorithm
from ..algorithms.choice import choose_algorithm, compression_note, explain_table
from ..algorithms.settings import check_settings, exchange_group
from ..comm.exchanger import HaloExchanger
from ..comm.group import world_size
from ..comm.halo_options import ExchangeSlots, HaloOptions
from ..cost import CostModel
from ..grid import ProcessGrid, process_grid
from .distributed_layer import check_full_graph, check_not_cached
from .first_use import CheckedPlan, check_first_call
from .gcn_norm import distributed_gcn_norm


class DistributedGCNConv(GCNConv):
    r"""The graph convolution of Kipf & Welling, trained full-graph across processes.

    .. math::
        X' = \hat D^{-1/2} \hat A \hat D^{-1/2} X \Theta + b

    Each rank holds the rows of :math:`X` and of the normalised adjacency it owns
    (see :func:`~pyg_sparsecomm.shard`) and computes its rows of
    :math:`Z = A^T H W` (ICPP'24 eq. (1), Algorithm 1): the linear map runs first
    on owned rows, then the SpMM ``algorithm`` fetches the rows of other ranks
    that the block row needs.  Forward, input gradients and parameter gradients
    equal single-process ``GCNConv`` on the whole graph.

    The constructor takes ``GCNConv``'s arguments with the same meaning and
    defaults, and the parameters carry the same names, so state dicts move
    between the two layers.  Extra arguments:

    Args:
        algorithm: ``"1d"`` (sparsity-aware, one all-to-allv per SpMM),
            ``"1d_overlap"`` (the same, overlapped with the owned-column SpMM),
            ``"1d_overlap_p2p"`` (overlapped, posted as point-to-point messages to
            the peers that have rows only), ``"oblivious"`` (CAGNET's block-row
            broadcasts, for comparison), ``"rdma"`` (the one-sided stationary-C
            engine of :mod:`pyg_sparsecomm.rdma`, under ``mpiexec``),
            ``"1.5d"`` / ``"1.5d_oblivious"`` (replicated block rows on a
            :math:`(P/c) \times c` grid, ICPP'24 Algorithm 2; need
            ``replication=c`` and ``shard(data, grid=ProcessGrid(c))`` of a
            partition into ``P / c`` parts), or ``"auto"``: at the first call
            the α-β model of ``cost_model`` predicts, from this layer's width
            and every rank's plan, the communication time of the algorithms
            that fit the shard's layout (1D: ``"1d"``/``"oblivious"``; 1.5D:
            ``"1.5d"``/``"1.5d_oblivious"``) and the cheapest is used for good
            (see :meth:`explain_algorithm`; to also choose ``c``, use
            :func:`pyg_sparsecomm.layout.predict_layouts` before partitioning).
        replication: ``c``, the number of replicas of each block row (1: 1D).
        cost_model: α and β for ``"auto"`` (default: :class:`~pyg_sparsecomm.cost.CostModel`
            defaults; ``CostModel.calibrate()`` measures the running backend).
        group: process group of the 1D algorithms (default: the default group;
            1.5D algorithms run on the grid of the default group).
        halo_precision: wire format of the halo rows: ``None`` (exact, the default),
            ``"bf16"``, ``"fp16"``, ``"int8"`` or ``"int4"`` (see
            :class:`~pyg_sparsecomm.comm.halo_options.HaloOptions`).
        halo_grad_precision: wire format of the backward's halo gradients (``"same"``:
            ``halo_precision``; ``None``: exact).
        staleness: ``0`` (exact) or ``1``: use the previous training step's halo rows and
            halo gradients, exchanged while this step computes (PipeGCN).
        stale_smoothing: ``γ`` of the exponential smoothing of stale halos (``None``: off).

    Called with a :class:`~pyg_sparsecomm.adj.HaloAdj` it runs distributed;
    called with a plain ``edge_index``/sparse tensor it behaves exactly like
    ``GCNConv`` when no process group with more than one rank is active, and
    raises otherwise (the graph must be partitioned and sharded first).
    """

    # PyG compiles ``propagate`` per class from a template (no explain mode, no
    # ``decomposed_layers``) and keeps the class's previous ``propagate`` as the generic
    # fallback those modes switch to.  Inherited, that previous one would be GCNConv's
    # compiled version once a GCNConv exists: start from MessagePassing's generic one.
    propagate = MessagePassing.propagate

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False,
                 cached: bool = False, add_self_loops: bool | None = None, normalize: bool = True,
                 bias: bool = True, algorithm: str = "1d", group: dist.ProcessGroup | None = None,
                 replication: int = 1, cost_model: CostModel | None = None,
                 halo_precision: str | None = None, halo_grad_precision: str | None = "same",
                 staleness: int = 0, stale_smoothing: float | None = None, **kwargs) -> None:
        self.halo_options = HaloOptions.from_arguments(halo_precision, halo_grad_precision, staleness,
                                                       stale_smoothing)
        # compression refused now rather than at the first forward; a 1.5D algorithm may run on c = 1
        self.replicated = check_settings(algorithm, replication, group, self.halo_options.compression_only,
                                         unit_grid=True)
        self.algorithm, self.group, self.replication = algorithm, group, replication
        self.exchange_slots = ExchangeSlots()
        self.cost_model = cost_model or CostModel()
        self.chosen_algorithm: str | None = None if algorithm == "auto" else algorithm
        self.cost_report: list[tuple[str, float, int]] = []
        self.exact_cost_report: list[tuple[str, float, int]] = []  # the same with exact halos
        self.sync_cost_report: list[tuple[str, float, int]] = []  # the same bytes, not pipelined
        self._element_size = 4  # of the rows exchanged (set by each forward; for explain_algorithm)
        self._checked_plan = CheckedPlan()  # the shard the first-use check passed on (nn.first_use)
        self._cached_key: tuple | None = None  # the shard _cached_spmm was built on
        super().__init__(in_channels, out_channels, improved=improved, cached=cached,
                         add_self_loops=add_self_loops, normalize=normalize, bias=bias, **kwargs)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self._cached_spmm: SpMMAlgorithm | None = None
        if hasattr(self, "exchange_slots"):  # a reset starts a new pipeline of stale halos
            self.exchange_slots.clear()

    def _apply(self, fn, recurse: bool = True):
        # a move (.to, .cuda, .double, ...) leaves the cached SpMM (built on the old device's
        # adjacency) and the stale halos (old device and dtype) behind: the next forward rebuilds them
        self._cached_spmm = None
        if hasattr(self, "exchange_slots"):
            self.exchange_slots.clear()
        return super()._apply(fn, recurse)

    def forward(self, x: Tensor, edge_index, edge_weight: Tensor | None = None) -> Tensor:
        if not isinstance(edge_index, HaloAdj):
            if world_size(self.group) > 1:
                raise ValueError(
                    f"{self.__class__.__name__} got a plain edge_index under a world size of "
                    f"{world_size(self.group)}: partition the graph with SparsityAwarePartitioner("
                    f"num_parts=world_size), call shard(data) and pass local.x, local.adj")
            return super().forward(x, edge_index, edge_weight)
        out = self._propagate_shard(x, edge_index, edge_weight)
        if self.bias is not None:
            out = out + self.bias
        return out

    @torch.compiler.disable  # the exchange and the CSR SpMM run eagerly (see distributed_layer)
    def _propagate_shard(self, x: Tensor, adj: HaloAdj, edge_weight: Tensor | None) -> Tensor:
        r"""This rank's rows of :math:`\hat A X \Theta` by the SpMM algorithm (without the bias)."""
        if not adj.is_minibatch and not self._checked_plan.is_(adj.plan):  # one all-gather (nn.first_use)
            self._cached_key = check_first_call(self, (x, adj, edge_weight), {}, adj, self._cached_key, self.group,
                                                not self.replicated)
            self._checked_plan.set(adj.plan)
        check_not_cached(self, adj)
        check_full_graph(self.halo_options, adj)
        if self.explain:
            raise ValueError(
                f"{self.__class__.__name__} is in explain mode (set by PyG's Explainer), which masks the "
                f"edges of the whole graph; the distributed SpMM of a shard cannot apply that mask: "
                f"explain on one process with the plain edge_index (or adj_t) of the whole graph")
        grid = process_grid(self.replication) if self.replicated else None
        exchanger = HaloExchanger(adj.plan, exchange_group(adj, grid, self.group), self.halo_options,
                                  self.exchange_slots)
        if x.dim() != 2 or x.size(0) != adj.num_owned:
            raise ValueError(f"x has shape {list(x.shape)} but this rank owns {adj.num_owned} rows: "
                             f"pass the shard's own x (local.x)")
        if not x.is_floating_point():
            raise ValueError(f"x must be a floating point tensor, got dtype {x.dtype}")
        self._element_size = x.element_size()
        self.exchange_slots.begin_call(self.training)
        spmm = self._cached_spmm
        if spmm is None:
            if self.chosen_algorithm is None:
                self.chosen_algorithm = self._choose(adj, exchanger, grid, x.dtype, edge_weight)
            spmm = make_algorithm(self.chosen_algorithm, self._adjacency(adj, edge_weight, x, exchanger.group),
                                  exchanger, grid)
            if self.cached:
                self._cached_spmm = spmm
        return spmm(self.lin(x))

    def _adjacency(self, adj: HaloAdj, edge_weight: Tensor | None, x: Tensor,
                   group: dist.ProcessGroup | None) -> HaloAdj:
        if self.normalize:
            return distributed_gcn_norm(adj, edge_weight, self.improved, self.add_self_loops, x.dtype, group)
        return adj if edge_weight is None else adj.with_value(edge_weight)

    def _choose(self, adj: HaloAdj, exchanger: HaloExchanger, grid: ProcessGrid | None, dtype: torch.dtype,
                edge_weight: Tensor | None = None) -> str:
        """``algorithm="auto"``: the candidate with the lowest predicted time, max over ranks."""
        element_size = torch.empty((), dtype=dtype).element_size()
        learnable = (edge_weight is not None and edge_weight.requires_grad) or \
            (adj.value is not None and adj.value.requires_grad)
        name, self.cost_report, self.exact_cost_report, self.sync_cost_report = choose_algorithm(
            adj, exchanger, grid, self.out_channels, element_size, learnable, self.cost_model)
        return name

    def explain_algorithm(self) -> str:
        """Why ``algorithm="auto"`` chose what it chose (available after the first call).

        Not named ``explain``: that is :class:`~torch_geometric.nn.conv.MessagePassing`'s
        explainability flag, set by PyG's :class:`~torch_geometric.explain.Explainer`.
        """
        note = compression_note(self.out_channels, self._element_size, self.halo_options)
        if not self.cost_report:
            return "\n".join(filter(None, [f"algorithm={self.algorithm!r} (nothing was chosen automatically)",
                                            note]))
        header = (f"this layer's SpMM (width {self.out_channels}), forward + backward, i.e. its communication "
                  f"per training step; slowest rank:")
        table = explain_table(self.cost_report, self.chosen_algorithm, header, self.cost_model,
                              self.exact_cost_report, self.sync_cost_report if self.halo_options.staleness else None)
        return "\n".join(filter(None, [table, note]))

    def __repr__(self) -> str:
        extra = f", replication={self.replication}" if self.replication > 1 else ""
        if not self.halo_options.exact:
            extra += f", {self.halo_options.describe()}"
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"algorithm={self.algorithm!r}{extra})")
