"""Communication statistics of a partition, predicted from its plan.

All numbers are per SpMM (one forward halo exchange); the backward exchange of
the same layer moves the same rows in the opposite direction.  Computable for
any ``P`` without launching processes.  Rows become bytes with a feature width:
:meth:`CommStats.bytes_per_spmm` or ``as_dict(width=...)``; what they cost each algorithm per epoch
is priced with the algorithms (:func:`pyg_sparsecomm.algorithms.epoch.bytes_per_epoch`).
"""
from dataclasses import dataclass, field

import numpy as np

from .homogeneous import CommPattern


def _max_avg(values: np.ndarray) -> tuple:
    values = np.asarray(values, dtype=np.float64)
    return float(values.max()) if values.size else 0.0, float(values.mean()) if values.size else 0.0


def _row_bytes(width: int, element_size: int) -> int:
    # A negative or fractional width would silently give meaningless byte counts.
    for name, value in (("width", width), ("element_size", element_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(width) * int(element_size)


@dataclass
class CommStats:
    """Per-SpMM volumes of the sparsity-aware 1D exchange and of the oblivious baseline.

    ``volume[s, d]`` is the number of rows rank ``s`` sends to rank ``d``.  The
    oblivious (CAGNET 1D) baseline broadcasts every block row to every other
    rank: rank ``s`` sends ``n_s (P - 1)`` rows.  ``nnz`` counts the edges whose
    target each rank owns plus one self-loop per owned node (the nonzeros of its
    block row of the GCN matrix), the compute load of the SpMM.  ``spans`` are the
    rows of the one-sided gets of ``algorithm="rdma"`` (:attr:`CommPattern.spans`).

    Args:
        num_parts (int): the number of ranks :math:`P`.
        volume (numpy.ndarray): ``[P, P]`` rows rank ``s`` sends to rank ``d`` per SpMM.
        part_sizes (numpy.ndarray): ``[P]`` owned nodes per rank.
        nnz (numpy.ndarray): ``[P]`` nonzeros of each rank's block row of the GCN matrix (edges plus
            self-loops).
        spans (numpy.ndarray, optional): ``[2, P, P]`` rows of the one-sided gets of ``algorithm="rdma"``.
            (default: :obj:`None`)
    """
    num_parts: int
    volume: np.ndarray = field(repr=False)
    part_sizes: np.ndarray = field(repr=False)
    nnz: np.ndarray = field(repr=False)
    spans: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def from_pattern(cls, pattern: CommPattern) -> "CommStats":
        return cls(pattern.num_parts, pattern.volume_matrix(), pattern.part_sizes.copy(),
                   pattern.edge_nnz + pattern.part_sizes, pattern.spans.copy())

    def __getstate__(self) -> dict:
        # the pattern a partitioner's statistics carry for shard() (plan/known_pattern.py) stays in this process
        return {k: v for k, v in self.__dict__.items() if k != "_known_pattern"}

    # rows ---------------------------------------------------------------
    @property
    def rows_sent(self) -> np.ndarray:
        return self.volume.sum(axis=1)

    @property
    def rows_received(self) -> np.ndarray:
        return self.volume.sum(axis=0)

    @property
    def total_rows(self) -> int:
        """Rows moved per SpMM over all ranks: the connectivity-1 metric of the partition."""
        return int(self.volume.sum())

    @property
    def oblivious_rows_sent(self) -> np.ndarray:
        return self.part_sizes * (self.num_parts - 1)

    @property
    def messages_sent(self) -> np.ndarray:
        return (self.volume > 0).sum(axis=1)

    @property
    def messages_received(self) -> np.ndarray:
        return (self.volume > 0).sum(axis=0)


    def bytes_per_spmm(self, width: int, element_size: int = 4) -> dict[str, float]:
        """Payload bytes of one SpMM whose dense operand has ``width`` columns.

        Every row on the wire carries ``width * element_size`` bytes (4 for
        float32), so each figure is the matching row figure times that: keys
        ``total_bytes``, ``max_bytes_sent``/``avg_bytes_sent``,
        ``max_bytes_received``/``avg_bytes_received`` and ``oblivious_total_bytes``.
        """
        row_bytes = _row_bytes(width, element_size)
        s_max, s_avg = _max_avg(self.rows_sent)
        r_max, r_avg = _max_avg(self.rows_received)
        return {
            "total_bytes": self.total_rows * row_bytes,
            "max_bytes_sent": s_max * row_bytes, "avg_bytes_sent": s_avg * row_bytes,
            "max_bytes_received": r_max * row_bytes, "avg_bytes_received": r_avg * row_bytes,
            "oblivious_total_bytes": int(self.oblivious_rows_sent.sum()) * row_bytes,
        }

    def as_dict(self, width: int | None = None, element_size: int = 4) -> dict[str, float]:
        """All figures per SpMM, in rows; with ``width`` also :meth:`bytes_per_spmm`'s byte keys.

        ``max_messages``/``avg_messages`` count messages *sent* (kept under their
        original names; ``*_messages_sent`` are the same numbers named explicitly).
        ``max_nnz``/``avg_nnz`` are the nonzeros of the ranks' block rows, whose
        ratio is ``compute_imbalance``.
        """
        s_max, s_avg = _max_avg(self.rows_sent)
        r_max, r_avg = _max_avg(self.rows_received)
        m_max, m_avg = _max_avg(self.messages_sent)
        mr_max, mr_avg = _max_avg(self.messages_received)
        c_max, c_avg = _max_avg(self.nnz)
        n_max, n_avg = _max_avg(self.part_sizes)
        out = {
            "num_parts": self.num_parts,
            "total_rows": self.total_rows,
            "max_rows_sent": s_max, "avg_rows_sent": s_avg,
            "max_rows_received": r_max, "avg_rows_received": r_avg,
            "max_messages": m_max, "avg_messages": m_avg,
            "oblivious_total_rows": int(self.oblivious_rows_sent.sum()),
            "compute_imbalance": c_max / c_avg if c_avg > 0 else 1.0,
            "node_imbalance": n_max / n_avg if n_avg > 0 else 1.0,
            "empty_parts": int((self.part_sizes == 0).sum()),
            "max_messages_sent": m_max, "avg_messages_sent": m_avg,
            "max_messages_received": mr_max, "avg_messages_received": mr_avg,
            "max_nnz": c_max, "avg_nnz": c_avg,
        }
        if width is not None:
            out.update(self.bytes_per_spmm(width, element_size))
        return out

    def __str__(self) -> str:
        d = self.as_dict()
        return (f"CommStats(P={d['num_parts']}, rows/SpMM total={d['total_rows']} "
                f"(oblivious {d['oblivious_total_rows']}), send max/avg={d['max_rows_sent']:.0f}/"
                f"{d['avg_rows_sent']:.1f}, recv max/avg={d['max_rows_received']:.0f}/"
                f"{d['avg_rows_received']:.1f}, messages max/avg={d['max_messages']:.0f}/"
                f"{d['avg_messages']:.1f}, compute imbalance={d['compute_imbalance']:.3f})")
