"""Choosing the algorithm *and* the replication before partitioning (issue #4, ``"auto"``).

For every admissible ``c`` (``c² | P``) the graph is partitioned into ``P / c``
parts, the volumes of every rank of the ``(P/c) × c`` grid are computed from the
partition's volume matrix (no process is launched, so any ``P`` can be
simulated), and the α-β model of each algorithm (``SpMMAlgorithm.predict``)
gives the per-epoch communication time of the slowest rank::

    report = predict_layouts(data, world_size=8, widths=[16, 7], method="metis")
    print(report.explain())
    algorithm, c = report.best.algorithm, report.best.replication
"""
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import Tensor
from torch_geometric.data import Data

from ..comm.grid import check_grid
from ..comm.halo_options import HaloOptions
from ..plan.homogeneous import comm_pattern
from .base import algorithm_class, auto_candidates
from .cost import CostModel, volumes_of_all_ranks


@dataclass
class LayoutPrediction:
    algorithm: str
    replication: int
    num_parts: int
    seconds: float          # per epoch, slowest rank
    max_bytes_sent: int     # per epoch, busiest rank
    total_bytes_sent: int   # per epoch, all ranks


@dataclass
class LayoutReport:
    world_size: int
    widths: list[int]
    model: CostModel
    rows: list[LayoutPrediction]

    @property
    def best(self) -> LayoutPrediction:
        return min(self.rows, key=lambda r: (r.seconds, r.total_bytes_sent))

    def explain(self) -> str:
        best = self.best
        lines = [f"P = {self.world_size}, SpMM widths {self.widths} (forward + backward per epoch); {self.model}",
                 f"{'algorithm':<16}{'c':>3}{'parts':>7}{'predicted ms':>14}{'max MB sent':>13}{'total MB':>10}"]
        for r in sorted(self.rows, key=lambda r: r.seconds):
            mark = "  <- chosen" if r is best else ""
            lines.append(f"{r.algorithm:<16}{r.replication:>3}{r.num_parts:>7}{r.seconds * 1e3:>14.3f}"
                         f"{r.max_bytes_sent / 1e6:>13.3f}{r.total_bytes_sent / 1e6:>10.3f}{mark}")
        return "\n".join(lines)


def admissible_replications(world_size: int) -> list[int]:
    """Every ``c`` with ``c² | P``."""
    out = []
    for c in range(1, world_size + 1):
        try:
            check_grid(world_size, c)
            out.append(c)
        except ValueError:
            pass
    return out


def predict_from_partition(edge_index: Tensor, num_nodes: int, part, world_size: int, replication: int,
                           widths: Sequence[int], model: CostModel | None = None,
                           algorithms: Sequence[str] | None = None,
                           element_size: int = 4, options: HaloOptions | None = None) -> list[LayoutPrediction]:
    """Per-epoch predictions of the algorithms for one partition into ``P / c`` parts (with
    compressed halos when ``options`` says so, and with ``staleness=1`` the exposed time behind each
    rank's local SpMMs of ``edge_index``'s edges; then only the algorithms that honour them)."""
    model = model or CostModel()
    Q = world_size // replication
    pattern = comm_pattern(edge_index, part, num_nodes, Q)
    ranks = volumes_of_all_ranks(pattern.volume_matrix(), pattern.part_sizes, replication, pattern.spans,
                                 pattern.block_nnz)
    names = algorithms or auto_candidates(replication > 1, options)
    rows = []
    for name in names:
        seconds, sent = algorithm_class(name).predict_epoch(ranks, widths, model, element_size, options)
        rows.append(LayoutPrediction(name, replication, Q, float(seconds.max()), int(sent.max()), int(sent.sum())))
    return rows


def predict_layouts(data: Data, world_size: int, widths: Sequence[int], method: str = "metis",
                    replications: Sequence[int] | None = None, model: CostModel | None = None,
                    seed: int = 0, partition: Callable[[Data, int], Tensor] | None = None,
                    element_size: int = 4, options: HaloOptions | None = None) -> LayoutReport:
    """Predicts every (algorithm, ``c``) for ``world_size`` ranks; see the module docstring.

    Args:
        data (torch_geometric.data.Data): the whole graph (``edge_index``, ``num_nodes``).
        world_size (int): the number of ranks :math:`P` (each layout splits them as ``P / c`` parts times
            ``c`` replicas).
        widths (Sequence[int]): the SpMM width of every layer (for GCNConv: each layer's ``out_channels``).
        method (str, optional): partitioning method of :class:`~pyg_sparsecomm.SparsityAwarePartitioner`
            used for the ``P / c`` parts (or pass ``partition(data, num_parts) -> part``). (default: :obj:`"metis"`)
        replications (Sequence[int], optional): the ``c`` to consider. (default: :obj:`None`, every
            admissible one)
        model (CostModel, optional): the machine's costs. (default: :obj:`None`, :class:`CostModel`'s
            defaults)
        seed (int, optional): the partitioner's seed. (default: :obj:`0`)
        partition (Callable[[Data, int], Tensor], optional): ``partition(data, num_parts) -> part``
            instead of ``method``. (default: :obj:`None`)
        element_size (int, optional): bytes per feature element on the wire. (default: :obj:`4`)
        options (HaloOptions, optional): the layers' :class:`~pyg_sparsecomm.comm.halo_options.HaloOptions` (compressed
            halos are priced at their payload bytes). (default: :obj:`None`)
    """
    from ..partition import SparsityAwarePartitioner

    model = model or CostModel()
    cs = list(replications) if replications is not None else admissible_replications(world_size)
    for c in cs:
        check_grid(world_size, c)
    parts: dict[int, Tensor] = {}
    rows: list[LayoutPrediction] = []
    for c in cs:
        Q = world_size // c
        if Q not in parts:
            parts[Q] = partition(data, Q) if partition is not None else \
                SparsityAwarePartitioner(Q, method=method, seed=seed)(
                Data(edge_index=data.edge_index, num_nodes=data.num_nodes)).part
        rows += predict_from_partition(data.edge_index, data.num_nodes, parts[Q], world_size, c, widths, model,
                                       element_size=element_size, options=options)
    return LayoutReport(world_size, list(widths), model, rows)
