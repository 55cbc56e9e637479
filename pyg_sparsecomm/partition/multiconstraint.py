"""Send-volume-aware restarts: multi-constraint METIS with a send-volume weight, then refinement.

Single-vertex refinement (:func:`~.balance.refine_max_send`) stops in a local
minimum when the busiest parts' volume comes from many medium boundary
vertices.  Graph-VB (Acer et al. 2016, used in ICPP'24 §5) instead balances
the send volume *during* partitioning, as a second balance constraint.  We do
the same with METIS's multi-constraint k-way partitioner:

1. constraint 0 = row nonzeros (compute), constraint 1 = each vertex's send
   contribution ``λ_v - 1`` under the best partition so far (the rows it will
   send if its neighbourhood stays spread the same way);
2. METIS balances both (``ubvec = (1 + ε_compute, 1 + ε_send)``) while
   minimising its total communication volume objective (or the edge cut, see
   ``objective`` of :func:`balance_max_send`), so no part gathers many
   high-``λ`` vertices;
3. the result is refined (max, receive and volume phases; the volume phase
   pays back the volume the second constraint costs) and kept only if it lowers
   the maximum send volume (or, at an equal maximum, the maximum receive volume)
   within every bound of the refinement relative to the input: compute
   imbalance, maximum receive volume and total volume.

Each restart reweights with the current best partition and uses another
seed / send tolerance.  Cost per restart: one METIS k-way call, O(E log P)
with the cut objective (the volume objective's refinement costs more on graphs
with hubs, see :func:`restart_objective`), plus one refinement.  METIS is
called through ``ctypes`` in the library that ``pymetis`` ships (it exports
``METIS_PartGraphKway``; ``pymetis`` itself exposes a single constraint only).
The option slots come from ``pymetis`` (compiled from the ``metis.h`` it was
built with: METIS 5.1 and 5.2 number them differently), and the library is
checked once against the ABI the calls assume (:func:`_check_abi`).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from .balance import _refine
from .volume_model import _state, column_net_incidence
from .methods import symmetric_csr

# the ABI of the METIS pymetis builds (64-bit idx_t, 32-bit real_t); checked by _check_abi on first use
_IDX, _REAL = np.int64, np.float32
_METIS_NOPTIONS, _METIS_OK = 40, 1
# send-constraint tolerances tried in turn: tight ones cut the maximum most, loose ones cost
# less total volume (so fit a small volume budget)
_SEND_TOLERANCES = (1.05, 1.5, 2.0, 1.1)
_COMPUTE_SHARE = 0.4  # METIS gets this share of the compute slack, the refinement the rest
_NEAR_AVERAGE_GAIN = 0.05  # total-volume gain a restart's start must offer when the max is near the average
# "auto" objective: METIS's volume refinement updates the gains of a moved vertex's neighbours'
# neighbours, so its cost grows with sum(deg^2) and with P on graphs with hubs (measured, one
# multi-constraint call, volume vs cut objective: R-MAT 14 P = 256 61 s vs 1.3 s, R-MAT 18 P = 64
# 38 s vs 6.7 s, P = 256 > 12 min vs 11.5 s), while on meshes and citation graphs both cost the
# same.  Above this mean endpoint degree sum(deg^2) / sum(deg) the restarts use the cut objective.
_VOLUME_OBJECTIVE_MAX_ENDPOINT_DEGREE = 32
RESTART_OBJECTIVES = ("auto", "vol", "cut")  # values of balance_max_send's objective
_LIB = None
# ABI probe: two triangles {0, 1, 2} and {3, 4, 5} joined by the edge 2-3; the only 2-way split
# with edge cut 1 separates the triangles
_PROBE_XADJ = (0, 2, 4, 7, 10, 12, 14)
_PROBE_ADJNCY = (1, 2, 0, 2, 0, 1, 3, 2, 4, 5, 3, 5, 3, 4)


def _metis():
    """The METIS in ``pymetis``'s extension module, loaded and ABI-checked once (the result is cached)."""
    global _LIB
    if _LIB is None:
        try:
            import pymetis._internal as internal
        except ImportError as e:  # pragma: no cover - pymetis is a core dependency
            raise ImportError("multi-constraint METIS needs pymetis: pip install pymetis") from e
        lib = ctypes.CDLL(internal.__file__)
        lib.METIS_PartGraphKway.restype = ctypes.c_int
        _check_abi(lib, internal.__file__, getattr(internal, "_idx_type_width", None))
        _LIB = lib
    return _LIB


def _option_slot(name: str) -> int:
    from pymetis._internal import options_indices
    return int(getattr(options_indices, name))


def _part_graph_kway(lib, xadj, adjncy, vwgt, ncon: int, nparts: int, ubvec, options):
    """``METIS_PartGraphKway`` on arrays already in the ABI's dtypes; returns ``(status, edge cut/volume, part)``."""
    n = len(xadj) - 1
    part, objval = np.full(n, -1, dtype=_IDX), np.zeros(1, dtype=_IDX)
    scalars = [np.array([x], dtype=_IDX) for x in (n, ncon, nparts)]

    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    status = lib.METIS_PartGraphKway(ptr(scalars[0]), ptr(scalars[1]), ptr(xadj), ptr(adjncy), ptr(vwgt),
                                     None, None, ptr(scalars[2]), None, ptr(ubvec), ptr(options),
                                     ptr(objval), ptr(part))
    return status, int(objval[0]), part


def _check_abi(lib, path: str, idx_type_width=None) -> None:
    """Raise ``RuntimeError`` unless ``lib`` takes 64-bit ``idx_t`` and 32-bit ``real_t``.

    pymetis >= 2025.2.1 reports its ``idx_t`` width; with any pymetis, a 2-way
    partition of a 6-vertex probe graph must come back as the known split.  The
    probe's buffers are built so that a mismatched METIS rejects them in its
    parameter check, before it reads the graph or writes the output:

    * 32-bit ``idx_t``: METIS reads each 64-bit option as two 32-bit ones, so the
      high half of slot 0 (``PTYPE``, unread by ``METIS_PartGraphKway``; ``PTYPE``
      and ``OBJTYPE`` are the first two slots in every METIS 5) becomes the
      objective type; we put 7 there, not a valid objective -> ``METIS_ERROR_INPUT``.
    * 64-bit ``real_t``: METIS reads the two float32 ``1.5`` as one double
      (0.125), an imbalance tolerance below 1 -> ``METIS_ERROR_INPUT``; the
      second entry keeps that 8-byte read inside the buffer.
    """
    expected = f"64-bit idx_t and 32-bit real_t (as the pymetis wheels build METIS), the ABI {__name__} calls it with"
    if idx_type_width is not None and idx_type_width() != 8 * np.dtype(_IDX).itemsize:
        raise RuntimeError(f"METIS in {path} was built with {idx_type_width()}-bit idx_t, not the {expected}; "
                           f"multi-constraint METIS ('+vb' balancing) cannot use this pymetis build")
    options = np.full(_METIS_NOPTIONS, -1, dtype=_IDX)
    options[0] = (7 << 32) | 0xFFFFFFFF  # low half -1 (PTYPE default), high half 7 (bad OBJTYPE if 32-bit)
    xadj, adjncy = np.array(_PROBE_XADJ, dtype=_IDX), np.array(_PROBE_ADJNCY, dtype=_IDX)
    status, cut, part = _part_graph_kway(lib, xadj, adjncy, np.ones(6, dtype=_IDX), 1, 2,
                                         np.full(2, 1.5, dtype=_REAL), options)
    sides = sorted([tuple(part[:3].tolist()), tuple(part[3:].tolist())])
    if status != _METIS_OK or cut != 1 or sides != [(0, 0, 0), (1, 1, 1)]:
        raise RuntimeError(f"METIS in {path} does not take the {expected}: a 2-way partition of a 6-vertex "
                           f"probe graph returned status {status}, edge cut {cut}, parts {part.tolist()} "
                           f"(expected status 1, cut 1, two triangles); multi-constraint METIS ('+vb' "
                           f"balancing) cannot use this pymetis build")


def metis_multiconstraint(xadj: np.ndarray, adjncy: np.ndarray, vertex_weights: np.ndarray, num_parts: int,
                          tolerances: Sequence[float], seed: int = 0, objective: str = "cut") -> np.ndarray | None:
    """METIS k-way partition balancing every column of ``vertex_weights`` (``[N, ncon]``).

    ``tolerances[c]`` is the allowed max/avg of constraint ``c``.  ``seed`` 0
    leaves METIS's default seed (so it reproduces earlier releases' output, and
    differs from seed 1: METIS seeds libc's ``srand``, where glibc treats 0 as
    1); any other value is passed as ``METIS_OPTION_SEED``.  Equal seeds give
    equal partitions.  Returns ``None`` when METIS reports an error (the caller
    keeps its partition).
    """
    lib = _metis()
    ncon = vertex_weights.shape[1]
    arrays = [np.ascontiguousarray(a, dtype=_IDX) for a in (xadj, adjncy, vertex_weights.reshape(-1))]
    options = np.full(_METIS_NOPTIONS, -1, dtype=_IDX)
    if seed != 0:
        options[_option_slot("SEED")] = seed
    options[_option_slot("OBJTYPE")] = {"cut": 0, "vol": 1}[objective]
    status, _, part = _part_graph_kway(lib, *arrays, ncon, num_parts, np.asarray(tolerances, dtype=_REAL), options)
    return part.astype(np.int64) if status == _METIS_OK else None


def _check_objective(objective: str) -> str:
    if objective not in RESTART_OBJECTIVES:
        raise ValueError(f"unknown restart objective {objective!r}; choose 'auto', 'vol' or 'cut'")
    return objective


def restart_objective(xadj: np.ndarray, objective: str = "auto") -> str:
    """METIS objective of the send-balanced restarts: ``"vol"``, ``"cut"``, or for ``"auto"``
    ``"vol"`` unless the graph (CSR row pointer ``xadj``) has hubs: mean endpoint degree
    ``Σ deg² / Σ deg`` above 32 (meshes and citation graphs: 4-14, R-MAT: 120-320)."""
    if _check_objective(objective) != "auto":
        return objective
    deg = np.diff(xadj).astype(np.float64)
    endpoint_degree = (deg * deg).sum() / max(deg.sum(), 1.0)
    return "vol" if endpoint_degree <= _VOLUME_OBJECTIVE_MAX_ENDPOINT_DEGREE else "cut"


def balance_max_send(edge_index: Tensor, num_nodes: int, part: Tensor, num_parts: int,
                     epsilon: float = 0.03, max_total_increase: float = 0.1, restarts: int = 4,
                     seed: int = 0, restart_above: float = 1.15, receive: bool = True,
                     objective: str = "auto") -> Tensor:
    """Lowest maximum send volume found by refining ``part`` and ``restarts`` send-balanced restarts.

    Bounds relative to the input ``part``: max send and max receive never
    increase, compute imbalance stays ``<= max(1 + epsilon, input's)``, total
    volume ``<= (1 + max_total_increase)`` times the input's.  Ties in max send
    go to the lower max receive (with ``receive``, which also runs the refinement's
    receive phase), then to the lower total volume.  Deterministic for a fixed ``seed``.
    If the refined maximum is within ``restart_above`` times the average send volume,
    only a lower *total* can lower it: a restart is then refined only if its METIS
    start has a total volume at least 5 % below the best's, and the first that has not
    ends the restarts (each refinement costs about as much as the first).
    ``objective`` is the restarts' METIS objective (:func:`restart_objective`).
    Measured at P = 64 (max send / METIS's, 4 restarts): the volume objective
    gave the lower maximum on CiteSeer (0.702 vs 0.860) and 4elt with 12
    restarts (0.818 vs 0.883), the cut objective on Cora (0.600 vs 0.614); on
    R-MAT 14/16 both are within 1.3 % of each other while the cut objective's
    METIS calls cost a fraction of the time and, unlike the volume objective's,
    still finish in seconds at P = 256.
    """
    P, N = int(num_parts), int(num_nodes)
    _check_objective(objective)  # before the refinement, which may take a while
    part = part.numpy().astype(np.int64)
    if P == 1 or N == 0:
        return torch.from_numpy(part.copy())
    nets = column_net_incidence(edge_index, N)
    best = _refine(nets, part.copy(), P, epsilon=epsilon, max_total_increase=max_total_increase, receive=receive)
    if restarts <= 0:
        return torch.from_numpy(best)
    base = _state(nets, part, P)
    w_limit = max((1 + epsilon) * nets.weights.sum() / P, base.W.max())
    km1_limit = base.km1 * (1 + max_total_increase)
    xadj, adjncy = symmetric_csr(edge_index, N)
    if adjncy.size == 0:
        return torch.from_numpy(best)
    best_state = _state(nets, best, P)
    # near the average only a lower total volume can lower the maximum: then a restart is refined
    # only if its METIS start has a clearly lower total (a poor input such as contiguous ids on a
    # mesh), and the first that has not ends the restarts (for a METIS or hypergraph input that
    # costs one METIS call)
    near_average = best_state.S.max() <= restart_above * best_state.km1 / P
    metis_objective = restart_objective(xadj, objective)
    compute_tolerance = 1 + _COMPUTE_SHARE * epsilon  # METIS overshoots it at times

    def rank(s):  # the order of priority: max send, (max receive,) total volume
        return (s.S.max(), s.R.max() if receive else 0, s.km1)
    for r in range(restarts):
        send = best_state.lam - 1
        weights = np.stack([nets.weights, send], axis=1)
        start = metis_multiconstraint(xadj, adjncy, weights, P,
                                      (compute_tolerance, _SEND_TOLERANCES[r % len(_SEND_TOLERANCES)]),
                                      seed=seed + r, objective=metis_objective)
        if start is None:
            continue
        if near_average and _state(nets, start, P).km1 > (1 - _NEAR_AVERAGE_GAIN) * best_state.km1:
            break
        cand = _refine(nets, start, P, epsilon=epsilon, max_total_increase=max_total_increase, receive=receive)
        s = _state(nets, cand, P)
        if (s.W.max() <= w_limit and s.R.max() <= base.R.max() and s.km1 <= km1_limit
                and rank(s) < rank(best_state)):
            best, best_state = cand, s
    return torch.from_numpy(best)
