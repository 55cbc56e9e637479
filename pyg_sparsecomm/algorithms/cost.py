r"""The α-β cost model of the distributed SpMM algorithms (ICPP'24 §4, Table 1).

A message of ``b`` bytes costs :math:`\alpha + \beta b`.  Per SpMM (forward and
backward), the model charges each rank for

* an all-to-allv over a group of ``g`` ranks: :math:`(g - 1)\alpha + \beta \max(s, r)`
  (``s``/``r``: bytes it sends/receives; gloo and NCCL post a transfer to every
  peer, so latency grows with ``g`` even for empty messages);
* a broadcast or reduce of ``b`` bytes over ``g`` ranks (binomial tree):
  :math:`\lceil \log_2 g \rceil (\alpha + \beta b)`;
* an all-reduce of ``b`` bytes over ``g`` ranks (ring):
  :math:`2 (g - 1) \alpha + \beta \cdot 2 \frac{g - 1}{g} b`;
* a one-sided get of ``b`` bytes: :math:`\alpha + \beta b`, and a barrier over ``g``
  ranks (dissemination): :math:`\lceil \log_2 g \rceil \alpha`;
* a local CSR SpMM of ``nnz`` stored entries times ``f`` columns: :math:`\gamma \cdot nnz \cdot f`.

With ``staleness=1`` (:mod:`~pyg_sparsecomm.comm.stale`) a layer's halo exchange is posted at
step :math:`t` and waited for at step :math:`t + 1`, so at least the layer's own local SpMMs of
the step (forward and backward, the window :math:`w = 2 \gamma \, nnz \, f`) run while it
travels; what is left is the *exposed* time (:meth:`Prediction.exposed`)

.. math:: t_{exposed} = t - t_{pipelined} + \max(0, t_{pipelined} - w),

:math:`t_{pipelined}` the part of :math:`t` the pipeline moves off the critical path (the halo
exchanges; 1.5D's row all-reduce stays synchronous).  The rest of the epoch hides the exchange
too, so this is an upper bound; the cost of posting the messages is not modelled.

Collectives are bulk synchronous, so the predicted time of a layout is the
*maximum* over ranks.  Each algorithm class states its own formula in
``SpMMAlgorithm.predict`` (adding an algorithm touches one file); this module
holds the model, what the formulas need to know about a rank
(:class:`RankVolumes`) and the calibration micro-benchmark.
"""
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from ..comm.collectives import all_reduce_value, ring_allreduce_nbytes
from ..comm.device_check import check_devices
from ..comm.grid import stage_blocks
from ..comm.group import collective_device, is_distributed
from ..comm.halo_options import HaloOptions
from ..comm.quantize import payload_row_bytes
from ..plan.halo_adj import make_csr
from ..plan.homogeneous import restrict_counts


@dataclass
class Prediction:
    """Predicted seconds and bytes sent by one rank for one SpMM (forward + backward).

    ``pipelined``: the part of ``seconds`` spent in exchanges that ``staleness=1`` pipelines
    (posted at one step, waited for at the next); 0 for communication that stays synchronous.
    """
    seconds: float
    bytes_sent: int
    pipelined: float = field(default=0.0, compare=False)

    def __add__(self, other: "Prediction") -> "Prediction":
        return Prediction(self.seconds + other.seconds, self.bytes_sent + other.bytes_sent,
                          self.pipelined + other.pipelined)

    def exposed(self, window: float) -> "Prediction":
        r"""This prediction under ``staleness=1``: the pipelined exchanges hide behind ``window``
        seconds of computation, :math:`t - t_{pipelined} + \max(0, t_{pipelined} - w)` (same bytes)."""
        hidden = min(self.pipelined, max(float(window), 0.0))
        return Prediction(self.seconds - hidden, self.bytes_sent, self.pipelined - hidden)


@dataclass(frozen=True)
class RowBytes:
    r"""Bytes of one row of an SpMM's dense operand on the wire, when halo rows are compressed.

    ``exact``: the row in its dtype (what non-halo messages such as 1.5D's all-reduce move);
    ``forward`` / ``backward``: a halo row and a halo-gradient row as the compressed exchange
    sends them (:func:`~pyg_sparsecomm.comm.quantize.payload_row_bytes`, scale and offset
    included).  Exact layers price with a plain ``int`` (all three equal).
    """
    exact: int
    forward: int
    backward: int

    @classmethod
    def of(cls, row_bytes: "int | RowBytes") -> "RowBytes":
        """``row_bytes`` as a :class:`RowBytes` (an ``int``: the same bytes everywhere)."""
        return row_bytes if isinstance(row_bytes, RowBytes) else cls(row_bytes, row_bytes, row_bytes)


def wire_row_bytes(width: int, element_size: int, options: HaloOptions | None = None) -> "int | RowBytes":
    """The ``row_bytes`` an SpMM of ``width`` columns of ``element_size`` bytes is priced with:
    ``width * element_size`` when exact, else the :class:`RowBytes` of ``options``' precisions."""
    exact = int(width) * int(element_size)
    if options is None or not options.compressed:
        return exact
    return RowBytes(exact, payload_row_bytes(width, options.precision, element_size),
                    payload_row_bytes(width, options.grad_precision, element_size))


@dataclass
class CostModel:
    """``alpha``: seconds per message; ``beta``: seconds per byte; ``gamma``: seconds per stored
    nonzero and column of a local CSR SpMM (what ``staleness=1`` hides exchanges behind).

    The defaults are gloo over loopback on the 2-core development machine at P = 2
    (about 0.06 ms per message and 2.5 GB/s) and torch's CPU CSR SpMM there (1M nonzeros
    times 64 columns in about 33 ms); with more processes than cores the latency grows
    tenfold, so for absolute predictions :meth:`calibrate` on the running job (the ranking
    of algorithms is usually the same).

    Args:
        alpha (float, optional): seconds per message. (default: :obj:`6e-5`)
        beta (float, optional): seconds per byte. (default: :obj:`4e-10`)
        source (str, optional): where the constants come from (shown in reports, not compared).
            (default: :obj:`"default (gloo loopback, 2-core dev machine)"`)
        gamma (float, optional): seconds per stored nonzero and column of a local CSR SpMM.
            (default: :obj:`5e-10`)
    """
    alpha: float = 6e-5
    beta: float = 4e-10
    source: str = field(default="default (gloo loopback, 2-core dev machine)", compare=False)
    gamma: float = 5e-10

    def all_to_all(self, send_bytes: int, recv_bytes: int, group_size: int) -> float:
        if group_size <= 1:
            return 0.0
        return (group_size - 1) * self.alpha + self.beta * max(send_bytes, recv_bytes)

    def broadcast(self, nbytes: int, group_size: int) -> float:
        """Also the cost of a reduce (the same tree, reversed)."""
        if group_size <= 1:
            return 0.0
        return math.ceil(math.log2(group_size)) * (self.alpha + self.beta * nbytes)

    def all_reduce(self, nbytes: int, group_size: int) -> float:
        if group_size <= 1:
            return 0.0
        return 2 * (group_size - 1) * self.alpha + self.beta * ring_allreduce_nbytes(nbytes, group_size)

    def get(self, nbytes: int) -> float:
        """One one-sided read of ``nbytes`` (the target takes no part)."""
        return self.alpha + self.beta * nbytes

    def barrier(self, group_size: int) -> float:
        if group_size <= 1:
            return 0.0
        return math.ceil(math.log2(group_size)) * self.alpha

    def local_spmm(self, nnz: int, width: int) -> float:
        """One local CSR SpMM of ``nnz`` stored entries times ``width`` columns."""
        return self.gamma * int(nnz) * int(width)

    def stale_window(self, nnz: int | None, width: int) -> float:
        """What a layer's ``staleness=1`` exchange hides behind at least: its local SpMMs of one
        step, forward and backward (``nnz=None``, unknown: nothing, so the exchange stays exposed)."""
        return 0.0 if nnz is None else 2 * self.local_spmm(nnz, width)

    @classmethod
    def calibrate(cls, group: dist.ProcessGroup | None = None, large_bytes: int = 1 << 24,
                  repeats: int = 10, spmm_nnz: int = 1 << 18) -> "CostModel":
        """Measures α, β and γ on the running backend (collective: every rank must call it).

        Times an all-to-all of 4-byte and of ``large_bytes`` messages to every peer
        (medians of ``repeats``, maximum over ranks); α is the small-message time per
        peer, β the extra time per byte of the large one.  γ is the median time of a local
        CSR SpMM of ``spmm_nnz`` random entries times 64 columns per entry and column, the
        *minimum* over ranks (the fastest rank hides the least behind its computation, so
        the exposed times of ``staleness=1`` stay upper bounds).
        """
        if not is_distributed(group) or dist.get_world_size(group) == 1:
            raise RuntimeError("CostModel.calibrate needs an initialised process group with more than one rank")
        P = dist.get_world_size(group)
        device = collective_device(group) or torch.device("cpu")

        def timed(elements_per_peer: int) -> float:
            send = torch.zeros(P * elements_per_peer, device=device)
            recv = torch.empty_like(send)
            samples = []
            for _ in range(repeats + 1):  # the first call sets up connections
                dist.barrier(group)
                start = time.perf_counter()
                check_devices("CostModel.calibrate", group, recv, send)
                dist.all_to_all_single(recv, send, group=group)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                samples.append(time.perf_counter() - start)
            return _agreed(float(np.median(samples[1:])), dist.ReduceOp.MAX, group, device)

        small = timed(1)
        large = timed(max(large_bytes // 4 // P, 1))
        alpha = small / (P - 1)
        beta = max(large - small, 1e-12) / (large_bytes * (P - 1) / P)
        gamma = _agreed(spmm_seconds_per_entry(spmm_nnz, repeats, device), dist.ReduceOp.MIN, group, device)
        return cls(alpha, beta, source=f"calibrated: {dist.get_backend(group)}, P={P}", gamma=gamma)

    def describe_gamma(self) -> str:
        """γ in words (``str(model)`` leaves it out: it only matters under ``staleness=1``)."""
        return f"γ = {self.gamma * 1e9:.3f} ns per stored nonzero and column of the local SpMM"

    def __str__(self) -> str:
        return f"α = {self.alpha * 1e6:.1f} µs, β = {self.beta * 1e9:.3f} ns/B ({1 / self.beta / 1e9:.2f} GB/s), " \
               f"{self.source}"


def _agreed(value: float, op: "dist.ReduceOp.RedOpType", group: dist.ProcessGroup | None,
            device: torch.device) -> float:
    """``value`` reduced with ``op`` over ``group``: one number for every rank."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    return float(all_reduce_value(t, op, group, "CostModel.calibrate"))


def spmm_seconds_per_entry(nnz: int = 1 << 18, repeats: int = 10, device: torch.device | None = None,
                           width: int = 64, degree: int = 16) -> float:
    """γ of this process: the median time of a CSR SpMM (the kernel of
    :func:`~pyg_sparsecomm.plan.halo_adj.spmm`) of ``nnz`` entries, ``degree`` per row at random columns of a
    square matrix, times ``width`` columns, divided by ``nnz * width``.  The matrix is seeded, so
    every rank times the same product."""
    if nnz < degree or repeats < 1:
        raise ValueError(f"spmm_seconds_per_entry needs nnz >= degree ({degree}) and repeats >= 1, "
                         f"got nnz={nnz}, repeats={repeats}")
    device = device or torch.device("cpu")
    rows = nnz // degree
    generator = torch.Generator().manual_seed(0)
    col = torch.randint(0, rows, (rows * degree,), generator=generator)
    rowptr = torch.arange(0, rows * degree + 1, degree)
    a = make_csr(rowptr, col, torch.rand(rows * degree, generator=generator), (rows, rows)).to(device)
    x = torch.randn(rows, width, generator=generator).to(device)
    samples = []
    for _ in range(repeats + 1):  # the first call warms up
        start = time.perf_counter()
        torch.sparse.mm(a, x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples[1:])) / (rows * degree * width)


@dataclass
class RankVolumes:
    """What the cost formulas need about one rank ``(row, col)`` of a ``(P/c) × c`` grid.

    ``send_rows[k]`` / ``recv_rows[k]``: rows this rank sends to / receives from block
    row ``k`` in one exchange, already restricted to the block columns it
    multiplies (``stage_blocks``); ``block_rows[k]``: rows of block row ``k``.
    For 1D (``replication == 1``) the grid is ``P × 1`` and every block is a stage.

    One-sided (``algorithm="rdma"``, 1D) volumes, known only from the whole edge list
    (:attr:`~pyg_sparsecomm.plan.homogeneous.CommPattern.spans`): ``fetch_rows[d, k]`` rows this rank
    gets from block row ``k`` in the forward (``d = 0``) and backward (``d = 1``) product,
    ``serve_rows[d, k]`` rows block row ``k`` gets from this rank; ``None`` when unknown.

    ``nnz``: stored entries of the rank's local SpMM (1.5D: of its stage blocks), the work a
    ``staleness=1`` exchange hides behind (:meth:`CostModel.stale_window`); ``None`` when unknown.
    """
    row: int
    col: int
    replication: int
    send_rows: np.ndarray
    recv_rows: np.ndarray
    block_rows: np.ndarray
    stage_blocks: list[int]
    fetch_rows: np.ndarray | None = None
    serve_rows: np.ndarray | None = None
    nnz: int | None = None

    @property
    def num_block_rows(self) -> int:
        return int(self.block_rows.size)

    @property
    def num_owned(self) -> int:
        return int(self.block_rows[self.row])

    @classmethod
    def from_counts(cls, send_counts: Sequence[int] | np.ndarray, recv_counts: Sequence[int] | np.ndarray,
                    block_rows: Sequence[int] | np.ndarray, row: int, col: int = 0, replication: int = 1,
                    fetch_rows: np.ndarray | None = None, serve_rows: np.ndarray | None = None,
                    nnz: int | None = None) -> "RankVolumes":
        """From a rank's *unrestricted* 1D counts (a ``RankPlan`` or a row/column of the
        volume matrix of the partition into ``P / c`` parts) and, optionally, its one-sided volumes
        and the nonzeros of its local SpMM."""
        blocks = stage_blocks(len(block_rows), replication, col)
        send, recv = restrict_counts(list(send_counts), list(recv_counts), row, blocks)
        return cls(row, col, replication, np.asarray(send, dtype=np.int64), np.asarray(recv, dtype=np.int64),
                   np.asarray(block_rows, dtype=np.int64), blocks, fetch_rows, serve_rows,
                   None if nnz is None else int(nnz))


def volumes_of_all_ranks(volume_matrix: np.ndarray, block_rows: Sequence[int] | np.ndarray, replication: int,
                         spans: np.ndarray | None = None, block_nnz: np.ndarray | None = None) -> list[RankVolumes]:
    r"""``RankVolumes`` of all ``P = Q c`` ranks of a partition into ``Q`` parts, in rank order.

    Args:
        volume_matrix (np.ndarray): ``[Q, Q]``, ``V[s, d]`` rows ``s`` sends to ``d`` per 1D exchange.
        block_rows (Sequence[int] or np.ndarray): ``[Q]`` rows of every block row.
        replication (int): ``c``.
        spans (np.ndarray, optional): optional ``[2, Q, Q]`` one-sided volumes, ``S[d, r, k]`` rows block row ``r`` gets
            from ``k`` in direction ``d`` (:attr:`~pyg_sparsecomm.plan.homogeneous.CommPattern.spans`); rank
            :math:`(i, j)` then has ``fetch_rows = S[:, i, :]`` and ``serve_rows = S[:, :, i]``. (default: :obj:`None`)
        block_nnz (np.ndarray, optional): optional ``[Q, Q]``, ``B[i, k]`` stored entries of block :math:`A_{ik}`
            (:attr:`~pyg_sparsecomm.plan.homogeneous.CommPattern.block_nnz`); rank :math:`(i, j)` then has
            ``nnz`` :math:`= \sum_{k \in \mathcal S_j} B[i, k]`. (default: :obj:`None`)
    """
    Q = volume_matrix.shape[0]
    return [RankVolumes.from_counts(volume_matrix[i], volume_matrix[:, i], block_rows, i, j, replication,
                                    None if spans is None else spans[:, i, :],
                                    None if spans is None else spans[:, :, i],
                                    None if block_nnz is None else
                                    int(block_nnz[i, stage_blocks(Q, replication, j)].sum()))
            for i in range(Q) for j in range(replication)]
