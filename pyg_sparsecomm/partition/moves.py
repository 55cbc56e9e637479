"""One round of the max-send balancing (:mod:`.balance`): a batch of single-vertex moves.

A round of a phase (``"max"``, ``"recv"``, ``"volume"`` or ``"compute"``)

1. shortlists candidate moves ``v: a -> b`` of the parts in focus
   (:func:`_candidates`, :func:`_shortlist`),
2. evaluates each exactly on the volume model (:func:`.volume_model._evaluate`),
3. ranks the moves the phase admits (:func:`_rank`), and
4. takes them greedily while their effects add up and every bound holds
   (:class:`_Batch`).

:func:`propose_moves` runs the four steps; :func:`accept_moves` verifies the
resulting partition on its recomputed state, since the batch's effects add up
exactly only up to the interactions the greedy pass rules out.
"""
from typing import NamedTuple

import numpy as np

from ._sorting import lexsort, run_starts
from .methods import csr_ptr
from .volume_model import _evaluate, _MoveEffects, _Nets, _State


class Limits(NamedTuple):
    """The bounds every accepted batch keeps: the refinement's guarantees."""
    compute: float         # largest compute weight W_p: (1 + ε) avg W, or the input's maximum if larger
    receive: int           # largest receive volume R_p
    km1: float             # largest total volume: (1 + max_total_increase) × the input's km1
    compute_target: float  # (1 + ε) avg W: the compute phase moves load out of the parts above it

    @classmethod
    def of_input(cls, nets: _Nets, state: _State, P: int, epsilon: float, max_total_increase: float) -> "Limits":
        """The bounds relative to the input partition, whose volumes are ``state``."""
        target = (1 + epsilon) * nets.weights.sum() / P
        return cls(max(target, state.W.max()), state.R.max(), state.km1 * (1 + max_total_increase), target)

    def hold(self, state: _State) -> bool:
        return state.W.max() <= self.compute and state.R.max() <= self.receive and state.km1 <= self.km1


class _Moves(NamedTuple):
    """The shortlisted candidate moves: vertex ``v`` from part ``a`` to part ``b``."""
    v: np.ndarray
    a: np.ndarray
    b: np.ndarray


def _candidates(nets: _Nets, state: _State, part: np.ndarray, focus: np.ndarray, P: int, pulls: bool = True,
                receive: bool = False):
    """Moves ``(v, b)`` for the focus parts with the part they serve (``lead``) and a cheap score.

    Send side (``receive=False``, focus parts *send* the nets): out-moves of a focus
    part's vertex ``v`` to a part holding pins of its net score ``λ_v - 1`` (the most
    its owner's send can drop); pull-moves of ``u`` into focus part ``b`` score the
    number of ``b``-owned nets in which ``u`` is the lone pin of its part.

    Receive side (focus parts *receive* the nets): the lone pin ``u`` of a received
    net moves to the net's owner (its part stops receiving the net; score = such nets
    of ``u``), and a received net's own row moves into the focus part (score 1).
    """
    net, holder, owner = state.net, state.holder, state.owner
    sel = focus[holder if receive else owner] & (holder != owner)
    # the lone pin u of a selected net in a part other than the owner: moving u to the owner
    # drops that part from the net (send side: the owner sends one row less; receive side: u's
    # part receives one row less)
    lone = sel & (state.counts == 1) & pulls
    pull_key, pull_score = np.unique(state.first_pin[lone] * P + owner[lone], return_counts=True)
    pull_v, pull_b = pull_key // P, pull_key % P
    out_v = net[sel]  # move net v's own row to a part holding pins of the net
    v = np.concatenate([out_v, pull_v])
    b = np.concatenate([holder[sel], pull_b])
    if receive:
        lead = np.concatenate([holder[sel], part[pull_v]])
        score = np.concatenate([np.ones(out_v.size, dtype=np.int64), pull_score])
    else:
        lead = np.concatenate([owner[sel], pull_b])
        score = np.concatenate([state.lam[out_v] - 1, pull_score])
    keep = b != part[v]
    return v[keep], b[keep], lead[keep], score[keep]


def _best_per_lead(lead: np.ndarray, score: np.ndarray, cost: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best-scored candidates of every lead part (ties: lowest cost)."""
    order = lexsort((cost, -score, lead))
    sorted_lead = lead[order]
    starts = run_starts(sorted_lead)
    first = np.repeat(starts, np.diff(np.append(starts, order.size)))  # where each lead's run begins
    return np.sort(order[np.arange(order.size) - first < k])


def _hot_threshold(state: _State, phase: str, slack: float):
    """``τ = (1 - slack) max S`` in the max phase, ``(1 - slack) max R`` in the receive phase:
    the parts at or above it are hot.  ``-1`` in the volume and compute phases."""
    if phase == "max":
        return (1 - slack) * state.S.max()
    if phase == "recv":
        return (1 - slack) * state.R.max()
    return -1


def _room(phase: str, limits: Limits) -> float:
    """The compute weight a target part may reach (the compute phase fills parts up to the target only)."""
    return limits.compute_target if phase == "compute" else limits.compute


def _shortlist(nets: _Nets, state: _State, part: np.ndarray, P: int, phase: str, tau, limits: Limits,
               per_lead: int) -> _Moves:
    """The candidates worth an exact evaluation: moves of the focus parts (hot, or in the compute
    phase overloaded; every part in the volume phase) to a part with room, the ``per_lead`` best
    per part they serve."""
    receive = phase == "recv"
    if phase == "compute":
        focus = state.W > limits.compute_target
    else:
        focus = (state.R if receive else state.S) >= tau
    # with every part in focus, pulls mostly repeat out-moves (all of them, on symmetric graphs)
    v, b, lead, score = _candidates(nets, state, part, focus, P, pulls=phase in ("max", "recv"), receive=receive)
    ok = state.W[b] + nets.weights[v] <= _room(phase, limits)
    if phase == "compute":
        ok &= focus[part[v]]  # out of the overloaded parts only
    ok = np.flatnonzero(ok)
    # exact evaluation costs the candidate's nets: only the most promising per lead part
    ok = ok[_best_per_lead(lead[ok], score[ok], nets.in_ptr[v[ok] + 1] - nets.in_ptr[v[ok]], per_lead)]
    return _Moves(v[ok], part[v[ok]], b[ok])


def _max_send_before_after(state: _State, effects: _MoveEffects, num_moves: int):
    """Per move, the largest ``S`` among the parts it changes, before and after it alone (-1: none)."""
    before, after = np.full(num_moves, -1), np.full(num_moves, -1)
    np.maximum.at(before, effects.cand, state.S[effects.part])
    np.maximum.at(after, effects.cand, state.S[effects.part] + effects.d_send)
    return before, after


def _rank(phase: str, state: _State, moves: _Moves, effects: _MoveEffects, before: np.ndarray,
          after: np.ndarray, tau, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
    """The moves ``phase`` admits, best first, and per move the maximum it must stay below in the
    greedy pass (``gate``: the largest ``S``, receive phase ``R``, it changes)."""
    a, b, dkm1 = moves.a, moves.b, effects.d_km1
    r_a, r_b = state.R[a] + effects.d_recv_a, state.R[b] + effects.d_recv_b
    admitted = (r_a <= limits.receive) & (r_b <= limits.receive) & (state.km1 + dkm1 <= limits.km1)
    keys: tuple[np.ndarray, ...]
    max_s = state.S.max()
    if phase == "max":  # the hottest part the move changes cools down; hottest first, then least km1
        admitted &= (before >= tau) & (after < before)
        keys, gate = (after - before, dkm1, -before), before
    elif phase == "recv":  # the larger receive volume of a and b goes down; no send volume above the max
        r_before, r_after = np.maximum(state.R[a], state.R[b]), np.maximum(r_a, r_b)
        admitted &= (r_before >= tau) & (r_after < r_before) & (after <= max_s)
        keys, gate = (r_after - r_before, dkm1, -r_before), r_before
    else:  # volume and compute: no send volume above the max
        admitted &= after <= max_s
        if phase == "volume":
            admitted &= dkm1 < 0
        keys, gate = (after, dkm1), before
    idx = np.flatnonzero(admitted)
    return idx[lexsort(tuple(key[idx] for key in keys))], gate


def _leads(phase: str, state: _State, moves: _Moves, effects: _MoveEffects, before: np.ndarray) -> np.ndarray:
    """The part each move serves, whose share of the batch it takes: its hottest changed part
    (the first one on ties; ``effects`` is sorted by candidate, then part), else its source part;
    in the receive phase the one of ``a`` and ``b`` that receives more."""
    if phase == "recv":
        return np.where(state.R[moves.b] > state.R[moves.a], moves.b, moves.a)
    at_max = np.flatnonzero(state.S[effects.part] == before[effects.cand])
    served, first = np.unique(effects.cand[at_max], return_index=True)
    leads = moves.a.copy()
    leads[served] = effects.part[at_max[first]]
    return leads


class _Batch:
    """The greedy pass of a round: takes moves in ranked order while they stay admissible together.

    Moves add up exactly unless they share a net that one of them changes (its ``λ``, or its
    owner: the move's own net); nets a move leaves unchanged (``a`` keeps pins, ``b`` already
    has some) may be shared, combined such moves can only do better.  The pass tracks what the
    taken moves add per part.  :meth:`offer` runs once per admissible move: it reads Python
    lists and does a few numpy calls on the move's short slices only.
    """

    def __init__(self, phase: str, state: _State, nets: _Nets, moves: _Moves, effects: _MoveEffects,
                 gate: np.ndarray, leads: np.ndarray, tau, limits: Limits, batch: int):
        m, P = moves.v.size, state.S.size
        self.phase, self.tau, self.limits, self.batch = phase, tau, limits, batch
        self.room, self.max_s = _room(phase, limits), state.S.max()
        self.part_ptr, self.net_ptr = csr_ptr(effects.cand, m).tolist(), csr_ptr(effects.touched.cand, m).tolist()
        self.parts, self.d_send, self.rises = effects.part, effects.d_send, effects.d_send > 0
        self.nets, self.changes = effects.touched.net, effects.touched.changes.astype(np.int8)
        # per net (= vertex): 0 free, 1 pins moved but net unchanged, 2 changed
        self.mark = np.zeros(nets.weights.size, dtype=np.int8)
        self.v, self.a, self.b, self.lead = moves.v.tolist(), moves.a.tolist(), moves.b.tolist(), leads.tolist()
        self.weight, self.gate = nets.weights[moves.v].tolist(), gate.tolist()
        self.d_recv_a, self.d_recv_b = effects.d_recv_a.tolist(), effects.d_recv_b.tolist()
        self.d_km1 = effects.d_km1.tolist()
        # what the taken moves add up to
        self.s_now, self.w_now, self.r_now = state.S.copy(), state.W.tolist(), state.R.tolist()
        self.km1_now, self.per_lead = state.km1, [0] * P
        self.chosen: list[int] = []

    def offer(self, k: int) -> None:
        """Takes move ``k`` if it is still admissible together with the moves taken so far."""
        if self.per_lead[self.lead[k]] >= self.batch:
            return
        touched = slice(self.net_ptr[k], self.net_ptr[k + 1])
        nets_k, changes_k = self.nets[touched], self.changes[touched]
        # a net this move changes must be free; a net it leaves unchanged must not be changed
        if self.mark[self.v[k]] or (nets_k.size and (self.mark[nets_k] + changes_k).max() >= 2):
            return
        changed = slice(self.part_ptr[k], self.part_ptr[k + 1])
        parts_k = self.parts[changed]
        s_before = self.s_now[parts_k]
        s_after = s_before + self.d_send[changed]
        if not (self._send_ok(k, changed, s_before, s_after) and self._receive_ok(k) and self._fits(k)):
            return
        self.mark[nets_k] = 1 + changes_k
        self.mark[self.v[k]] = 2
        self.s_now[parts_k] = s_after
        a, b, w = self.a[k], self.b[k], self.weight[k]
        self.r_now[a] += self.d_recv_a[k]
        self.r_now[b] += self.d_recv_b[k]
        self.w_now[b] += w
        self.w_now[a] -= w
        self.km1_now += self.d_km1[k]
        self.per_lead[self.lead[k]] += 1
        self.chosen.append(k)

    def _send_ok(self, k: int, changed: slice, s_before: np.ndarray, s_after: np.ndarray) -> bool:
        """No ``S`` the move raises passes the gate (max phase) or the maximum; in the max phase the
        move must still lower the hot excess ``Σ_p max(0, S_p - τ)`` together with the taken ones."""
        cap = self.gate[k] - 1 if self.phase == "max" else self.max_s
        if (self.rises[changed] & (s_after > cap)).any():
            return False
        tau = self.tau
        return self.phase != "max" or np.maximum(s_after - tau, 0).sum() < np.maximum(s_before - tau, 0).sum()

    def _receive_ok(self, k: int) -> bool:
        """Receive phase: the larger of ``R_a``, ``R_b`` stays below the gate and their hot excess falls."""
        if self.phase != "recv":
            return True
        a, b, tau, r_now = self.a[k], self.b[k], self.tau, self.r_now
        ra, rb = r_now[a] + self.d_recv_a[k], r_now[b] + self.d_recv_b[k]
        return not (max(ra, rb) >= self.gate[k]
                    or max(ra - tau, 0) + max(rb - tau, 0) >= max(r_now[a] - tau, 0) + max(r_now[b] - tau, 0))

    def _fits(self, k: int) -> bool:
        """The target's compute, both receive volumes and km1 stay within the limits."""
        a, b, limits = self.a[k], self.b[k], self.limits
        return not (self.w_now[b] + self.weight[k] > self.room or self.r_now[a] + self.d_recv_a[k] > limits.receive
                    or self.r_now[b] + self.d_recv_b[k] > limits.receive or self.km1_now + self.d_km1[k] > limits.km1)


def propose_moves(nets: _Nets, state: _State, part: np.ndarray, P: int, phase: str, limits: Limits,
                  batch: int, slack: float) -> tuple[np.ndarray, float] | None:
    """One batch of moves of ``phase``: ``(new part, hot threshold τ)``, or ``None`` if no move is left.

    Args:
        batch (int): the most moves one lead part may take (4 × as many are evaluated per lead).
        slack (float): parts within this fraction of the maximum send (receive) volume are hot.
    """
    tau = _hot_threshold(state, phase, slack)
    moves = _shortlist(nets, state, part, P, phase, tau, limits, 4 * batch)
    if moves.v.size == 0:
        return None
    effects = _evaluate(nets, state, part, moves.v, moves.b, P)
    before, after = _max_send_before_after(state, effects, moves.v.size)
    order, gate = _rank(phase, state, moves, effects, before, after, tau, limits)
    if order.size == 0:
        return None
    greedy = _Batch(phase, state, nets, moves, effects, gate, _leads(phase, state, moves, effects, before), tau,
                    limits, batch)
    for k in order.tolist():
        greedy.offer(k)
    if not greedy.chosen:
        return None
    trial = part.copy()
    trial[moves.v[greedy.chosen]] = moves.b[greedy.chosen]
    return trial, tau


def accept_moves(phase: str, old: _State, new: _State, tau, limits: Limits) -> bool:
    """Whether the batch's partition (volumes ``new``) keeps every bound and makes the phase's progress:
    lower hot excess of ``S`` (max phase) or ``R`` (receive phase), lower compute excess over the
    target (compute phase), lower km1 (volume phase)."""
    if new.S.max() > old.S.max() or not limits.hold(new):
        return False
    if phase == "max":
        return np.maximum(new.S - tau, 0).sum() < np.maximum(old.S - tau, 0).sum()
    if phase == "recv":
        return np.maximum(new.R - tau, 0).sum() < np.maximum(old.R - tau, 0).sum()
    if phase == "compute":
        target = limits.compute_target
        return np.maximum(new.W - target, 0).sum() < np.maximum(old.W - target, 0).sum()
    return new.km1 < old.km1
