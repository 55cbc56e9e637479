"""Max-send-volume balancing: refine any partition so that no rank sends (or receives) too much.

:func:`refine_max_send` refines a partition; :func:`balance_max_send` (what
``balance="max_send"`` and the ``"+vb"`` methods run) adds send-balanced
restarts.

Graph and hypergraph partitioners minimise the *total* volume; the time of the
all-to-allv is set by the busiest rank (ICPP'24 §5, "Graph-VB").  This
refinement moves single vertices, vectorised in rounds, on the column-net
model (net ``j = {j} ∪ {i : j -> i}``, owned by the part of row ``j``):

1. From the pins of every net per part compute each part's send volume
   ``S_p = Σ_{j owned by p} (λ_j - 1)``, receive volume ``R_p`` and compute
   weight ``W_p`` (row nonzeros) (:mod:`.volume_model`).
2. Candidates (``v`` moves from ``a`` to ``b``) are generated for the *focus*
   parts: *out-moves* of every vertex of a focus part to a part that holds
   pins of its net, and *pull-moves* of the lone pin ``u`` that a net owned
   by a focus part has in another part (pulling ``u`` in removes that part
   from the net); the receive phase uses the mirror images (a received net's
   row moves into the focus part, a focus part's lone pin moves to the net's
   owner).  Per focus part only the ``4 × batch`` with the best cheap score
   (the most its send, or receive, could drop) go on.
3. The exact effect of each move alone on every part's ``S``, on ``R_a``,
   ``R_b`` (no other ``R`` changes) and on km1 is computed from pin counts
   (net ``v`` changes owner and maybe ``λ``; every net that has ``v`` as a pin
   may lose part ``a`` and gain ``b``).
4. A greedy pass takes the best admissible moves that share no net one of
   them changes (so their effects add up exactly; nets left unchanged may be
   shared, which hubs' nets need), while checking the accumulated ``S``,
   ``R``, ``W``, km1 and hot excess of the parts they touch.  The batch is
   applied and re-verified from scratch (a failing batch is undone and
   retried at half the size).

Steps 2-4 are one round (:mod:`.moves`).

Three phases alternate (``cycles`` times, until none makes progress), after a
first **compute phase** if the input exceeds the compute limit (focus = the
overloaded parts; out-moves to parts with room that raise no ``S`` above the
maximum, fewest km1 first, until no part is over or no move is left):

* **max phase** (minimises ``max_p S_p``): focus = *hot* parts,
  ``S_p >= (1 - slack) max S``.  A move is admissible if the largest ``S``
  among the parts it changes goes down (``max(S + ΔS) < max S`` over those
  parts) and that is at least the hot threshold; best = hottest part first,
  then smallest km1 increase.  A batch must lower the hot excess
  ``Σ_p max(0, S_p - (1 - slack) max S)``.
* **receive phase** (minimises ``max_p R_p`` without raising ``max_p S_p``;
  ``receive=False`` skips it): the same on ``R`` — focus = parts with
  ``R_p >= (1 - slack) max R``, a move must lower ``max(R_a, R_b)`` and raise
  no ``S`` above the maximum, a batch must lower the receive hot excess.
* **volume phase** (minimises km1 = total volume under the max cap): focus =
  every part; admissible moves lower km1 and raise no ``S`` above the current
  maximum (nor, with the receive phase, any ``R`` above the current maximum);
  the phase ends once a round gains less than 0.05 % of km1.  It
  pays back volume spent by the max phase (or by a multi-constraint start,
  see below) and frees room.

The order of priority is max send, max receive, total volume.  Guarantees
(checked on every batch): the maximum send volume never increases, nor the
maximum receive volume; compute stays within ``(1 + ε) avg W`` (or the
input's maximum, if that was already larger); km1 stays within
``(1 + max_total_increase)`` times its initial value; the result is
deterministic.  Cost per round: one sort of all pins (the state, O(pins log
pins)) plus O(pins of the candidates' nets) lookups — a dense (net, part)
table when ``N × P`` counts fit in 128 MB, else O(log pins) binary searches — in
numpy, and a Python pass over the admissible moves (at most ``4 × batch`` per
focus part are evaluated); rounds are bounded by ``max_rounds`` per max or
receive phase and ``side_rounds`` per volume or compute phase, and a max or
receive phase ends early once its maximum stalls (``patience``).  Memory:
O(pins) plus that table.

**Send-balanced restarts.**  Single-vertex refinement stops in a local
minimum when the busiest parts' volume comes from many medium boundary
vertices.  Graph-VB (Acer et al. 2016, used in ICPP'24 §5) instead balances
the send volume *during* partitioning, as a second balance constraint.
:func:`balance_max_send` does the same with METIS's multi-constraint k-way
partitioner (:func:`.multiconstraint.metis_multiconstraint`):

1. constraint 0 = row nonzeros (compute), constraint 1 = each vertex's send
   contribution ``λ_v - 1`` under the best partition so far (the rows it will
   send if its neighbourhood stays spread the same way);
2. METIS balances both (``ubvec = (1 + ε_compute, 1 + ε_send)``) while
   minimising its total communication volume objective (or the edge cut, see
   :func:`restart_objective`), so no part gathers many high-``λ`` vertices;
3. the result is refined (max, receive and volume phases; the volume phase
   pays back the volume the second constraint costs) and kept only if it lowers
   the maximum send volume (or, at an equal maximum, the maximum receive volume)
   within every bound of the refinement relative to the input: compute
   imbalance, maximum receive volume and total volume.

Each restart reweights with the current best partition and uses another
seed / send tolerance.  Cost per restart: one METIS k-way call, O(E log P)
with the cut objective (the volume objective's refinement costs more on graphs
with hubs, see :func:`restart_objective`), plus one refinement.
"""
from functools import partial
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .methods import symmetric_csr
from .moves import Limits, accept_moves, propose_moves
from .multiconstraint import metis_multiconstraint
from .volume_model import _Nets, _State, _state, column_net_incidence

__all__ = ["refine_max_send", "balance_max_send", "restart_objective", "column_net_incidence"]

# send-constraint tolerances the restarts try in turn: tight ones cut the maximum most, loose ones
# cost less total volume (so fit a small volume budget)
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


class _Schedule(NamedTuple):
    """How long the refinement's phases run (the arguments of :func:`refine_max_send`)."""
    slack: float
    max_rounds: int      # rounds per max or receive phase
    side_rounds: int     # rounds per volume or compute phase
    moves_per_part: int  # largest batch of moves one part leads
    patience: int        # a max or receive phase stops once its maximum stalled this many rounds


def refine_max_send(edge_index: Tensor, num_nodes: int, part: Tensor, num_parts: int,
                    epsilon: float = 0.03, max_total_increase: float = 0.1, slack: float = 0.02,
                    max_rounds: int = 200, moves_per_part: int = 64, cycles: int = 3,
                    patience: int = 5, side_rounds: int = 20, receive: bool = True) -> Tensor:
    """Returns a refined copy of ``part`` with a lower (never higher) maximum send volume, then
    (with ``receive``) a lower (never higher) maximum receive volume.

    Args:
        epsilon (float, optional): compute imbalance ``max W / avg W - 1`` moves may reach. (default: :obj:`0.03`)
        max_total_increase (float, optional): km1 (total volume) may grow at most by this fraction of its input value.
            (default: :obj:`0.1`)
        slack (float, optional): parts within this fraction of the maximum send (receive) volume are refined together.
            (default: :obj:`0.02`)
        max_rounds (int, optional): bound on the batches of each max (and receive) phase. (default: :obj:`200`)
        side_rounds (int, optional): bound on the batches of each volume and compute phase. (default: :obj:`20`)
        moves_per_part (int, optional): largest batch of moves led by one part. (default: :obj:`64`)
        cycles (int, optional): alternations of the max, receive and volume phases. (default: :obj:`3`)
        patience (int, optional): a max (or receive) phase stops when its maximum fell by less than 0.5 % in
            this many rounds. (default: :obj:`5`)
        receive (bool, optional): run the receive phase (lower the maximum receive volume without raising the
            maximum send volume); ``False`` only guards the maximum receive volume. (default: :obj:`True`)
    """
    P, N = int(num_parts), int(num_nodes)
    start = part.numpy().astype(np.int64).copy()
    if P == 1 or N == 0:
        return torch.from_numpy(start)
    return torch.from_numpy(_refine(column_net_incidence(edge_index, N), start, P, epsilon, max_total_increase, slack,
                                    max_rounds, moves_per_part, cycles, patience, side_rounds, receive))


def _refine(nets: _Nets, part: np.ndarray, P: int, epsilon: float = 0.03, max_total_increase: float = 0.1,
            slack: float = 0.02, max_rounds: int = 200, moves_per_part: int = 64, cycles: int = 3,
            patience: int = 5, side_rounds: int = 20, receive: bool = True) -> np.ndarray:
    """:func:`refine_max_send` on prebuilt nets (the restarts share them); returns the new part."""
    state = _state(nets, part, P)
    # the max phase may raise the maximum receive volume up to the input's, the receive and volume
    # phases (with `receive`) never raise it: the order of priority is max send, max receive, total
    limits = Limits.of_input(nets, state, P, epsilon, max_total_increase)
    schedule = _Schedule(slack, max_rounds, side_rounds, moves_per_part, patience)
    phases = ("max", "recv", "volume") if receive else ("max", "volume")
    for cycle in range(cycles):
        progress = False
        for phase in ("compute",) + phases if cycle == 0 else phases:
            if phase == "compute" and state.W.max() <= limits.compute_target:
                continue
            phase_limits = limits if phase in ("compute", "max") or not receive else \
                limits._replace(receive=min(limits.receive, state.R.max()))
            part, state, moved = _run_phase(nets, part, state, P, phase, phase_limits, schedule)
            progress = progress or moved
            if phase == "compute":  # what was repaired stays repaired
                limits = limits._replace(compute=max(limits.compute_target, state.W.max()))
        if not progress:
            break
    return part


def _run_phase(nets: _Nets, part: np.ndarray, state: _State, P: int, phase: str, limits: Limits,
               schedule: _Schedule) -> tuple[np.ndarray, _State, bool]:
    """Rounds of ``phase`` until it stops paying; returns ``(part, state, whether a batch was taken)``."""
    hot_phase = phase in ("max", "recv")
    batch, history, progress = schedule.moves_per_part, [], False
    for _ in range(schedule.max_rounds if hot_phase else schedule.side_rounds):
        if state.S.max() == 0:
            break
        history.append(state.R.max() if phase == "recv" else state.S.max())
        if hot_phase and len(history) > schedule.patience and \
                history[-schedule.patience - 1] - history[-1] < 5e-3 * history[-1]:
            break  # the maximum stalled: hot parts only trade load among themselves
        proposal = propose_moves(nets, state, part, P, phase, limits, batch, schedule.slack)
        if proposal is None:
            break
        trial, tau = proposal
        new_state = _state(nets, trial, P)
        if not accept_moves(phase, state, new_state, tau, limits):
            batch //= 2  # moves pile onto the same part: retry smaller
            if batch == 0:
                break
            continue
        batch = min(2 * batch, schedule.moves_per_part)
        gain = state.km1 - new_state.km1
        part, state, progress = trial, new_state, True
        if phase == "volume" and gain < 5e-4 * state.km1:
            break  # the tail of tiny volume gains is not worth a round each
    return part, state, progress


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
    initial = part.numpy().astype(np.int64)
    if P == 1 or N == 0:
        return torch.from_numpy(initial.copy())
    nets = column_net_incidence(edge_index, N)
    refine = partial(_refine, nets, P=P, epsilon=epsilon, max_total_increase=max_total_increase, receive=receive)
    best = refine(initial.copy())
    if restarts <= 0:
        return torch.from_numpy(best)
    bounds = Limits.of_input(nets, _state(nets, initial, P), P, epsilon, max_total_increase)
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
    for r in range(restarts):
        start = _send_balanced_start(nets, best_state, xadj, adjncy, P, epsilon, r, seed + r, metis_objective)
        if start is None:
            continue
        if near_average and _state(nets, start, P).km1 > (1 - _NEAR_AVERAGE_GAIN) * best_state.km1:
            break
        cand = refine(start)
        s = _state(nets, cand, P)
        if bounds.hold(s) and _rank(s, receive) < _rank(best_state, receive):
            best, best_state = cand, s
    return torch.from_numpy(best)


def _send_balanced_start(nets: _Nets, best: _State, xadj: np.ndarray, adjncy: np.ndarray, P: int,
                         epsilon: float, restart: int, seed: int, objective: str):
    """METIS k-way partition balancing compute and each row's send volume ``λ_v - 1`` under the
    best partition so far; ``None`` if METIS fails."""
    weights = np.stack([nets.weights, best.lam - 1], axis=1)
    compute_tolerance = 1 + _COMPUTE_SHARE * epsilon  # METIS overshoots it at times
    tolerances = (compute_tolerance, _SEND_TOLERANCES[restart % len(_SEND_TOLERANCES)])
    return metis_multiconstraint(xadj, adjncy, weights, P, tolerances, seed=seed, objective=objective)


def _rank(state: _State, receive: bool):
    """The order of priority of the restarts: max send, (max receive,) total volume."""
    return state.S.max(), state.R.max() if receive else 0, state.km1
