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
   minimising its total communication volume objective, so no part gathers
   many high-``λ`` vertices;
3. the result is refined (max phase, then volume phase, which pays back the
   volume the second constraint costs) and kept only if it lowers the maximum
   send volume within every bound of the refinement relative to the input:
   compute imbalance, maximum receive volume and total volume.

Each restart reweights with the current best partition and uses another
seed / send tolerance.  Cost per restart: one METIS k-way call, O(E log P),
plus one refinement.  METIS is called through ``ctypes`` in the library that
``pymetis`` ships (it exports ``METIS_PartGraphKway``; ``pymetis`` itself
exposes a single constraint only).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from .balance import _state, column_net_pins, refine_max_send
from .methods import symmetric_csr

# option slots of METIS 5.2 (pymetis bundles 5.2: slot 6 is NIPARTS, so the seed is slot 9)
_METIS_NOPTIONS, _OPTION_OBJTYPE, _OPTION_SEED = 40, 1, 9
# send-constraint tolerances tried in turn: tight ones cut the maximum most, loose ones cost
# less total volume (so fit a small volume budget)
_SEND_TOLERANCES = (1.05, 1.5, 2.0, 1.1)
_COMPUTE_SHARE = 0.4  # METIS gets this share of the compute slack, the refinement the rest
_LIB = None


def _metis():
    global _LIB
    if _LIB is None:
        try:
            import pymetis._internal as internal
        except ImportError as e:  # pragma: no cover - pymetis is a core dependency
            raise ImportError("multi-constraint METIS needs pymetis: pip install pymetis") from e
        lib = ctypes.CDLL(internal.__file__)
        lib.METIS_PartGraphKway.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def metis_multiconstraint(xadj: np.ndarray, adjncy: np.ndarray, vertex_weights: np.ndarray, num_parts: int,
                          tolerances: Sequence[float], seed: int = 0, objective: str = "cut") -> np.ndarray | None:
    """METIS k-way partition balancing every column of ``vertex_weights`` (``[N, ncon]``).

    ``tolerances[c]`` is the allowed max/avg of constraint ``c``.  Returns ``None``
    when METIS reports an error (the caller keeps its partition).
    """
    lib = _metis()
    idx = np.int64  # pymetis builds METIS with 64-bit idx_t and 32-bit real_t
    n, ncon = vertex_weights.shape
    arrays = [np.ascontiguousarray(a, dtype=idx) for a in (xadj, adjncy, vertex_weights.reshape(-1))]
    options = np.full(_METIS_NOPTIONS, -1, dtype=idx)
    options[_OPTION_SEED] = seed
    options[_OPTION_OBJTYPE] = {"cut": 0, "vol": 1}[objective]
    ubvec = np.asarray(tolerances, dtype=np.float32)
    part = np.zeros(n, dtype=idx)
    objval = np.zeros(1, dtype=idx)
    scalars = [np.array([x], dtype=idx) for x in (n, ncon, num_parts)]
    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    status = lib.METIS_PartGraphKway(ptr(scalars[0]), ptr(scalars[1]), ptr(arrays[0]), ptr(arrays[1]),
                                     ptr(arrays[2]), None, None, ptr(scalars[2]), None, ptr(ubvec),
                                     ptr(options), ptr(objval), ptr(part))
    return part.astype(np.int64) if status == 1 else None  # METIS_OK == 1


def balance_max_send(edge_index: Tensor, num_nodes: int, part: Tensor, num_parts: int,
                     epsilon: float = 0.03, max_total_increase: float = 0.1, restarts: int = 4,
                     seed: int = 0, restart_above: float = 1.15) -> Tensor:
    """Lowest maximum send volume found by refining ``part`` and ``restarts`` send-balanced restarts.

    Bounds relative to the input ``part``: max send and max receive never
    increase, compute imbalance stays ``<= max(1 + epsilon, input's)``, total
    volume ``<= (1 + max_total_increase)`` times the input's.  Ties in max send
    go to the lower total volume.  Deterministic for a fixed ``seed``.  The restarts
    run only if the refined maximum exceeds ``restart_above`` times the average send
    volume: closer to the average only a lower *total* could help, which the
    restarts do not give (they cost a METIS call and a refinement each).
    """
    P, N = int(num_parts), int(num_nodes)
    best = refine_max_send(edge_index, N, part, P, epsilon=epsilon, max_total_increase=max_total_increase)
    if restarts <= 0 or P == 1 or N == 0:
        return best
    nets = column_net_pins(edge_index, N)
    base = _state(nets, part.numpy().astype(np.int64), P)
    w_limit = max((1 + epsilon) * nets.weights.sum() / P, base.W.max())
    km1_limit = base.km1 * (1 + max_total_increase)
    xadj, adjncy = symmetric_csr(edge_index, N)
    if adjncy.size == 0:
        return best
    best_state = _state(nets, best.numpy(), P)
    if best_state.S.max() <= restart_above * best_state.km1 / P:
        return best
    compute_tolerance = 1 + _COMPUTE_SHARE * epsilon  # METIS overshoots it at times
    for r in range(restarts):
        send = best_state.lam - 1
        weights = np.stack([nets.weights, send], axis=1)
        start = metis_multiconstraint(xadj, adjncy, weights, P,
                                      (compute_tolerance, _SEND_TOLERANCES[r % len(_SEND_TOLERANCES)]),
                                      seed=seed + r, objective="vol")
        if start is None:
            continue
        cand = refine_max_send(edge_index, N, torch.from_numpy(start), P, epsilon=epsilon,
                               max_total_increase=max_total_increase)
        s = _state(nets, cand.numpy(), P)
        if (s.W.max() <= w_limit and s.R.max() <= base.R.max() and s.km1 <= km1_limit
                and (s.S.max(), s.km1) < (best_state.S.max(), best_state.km1)):
            best, best_state = cand, s
    return best
