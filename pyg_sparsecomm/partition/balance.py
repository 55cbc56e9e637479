"""Max-send-volume balancing: refine any partition so that no rank sends (or receives) too much.

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
  see :mod:`.multiconstraint`) and frees room.

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
"""
import numpy as np
import torch
from torch import Tensor

from ._sorting import lexsort, run_starts
from .volume_model import _evaluate, _Nets, _State, _state, column_net_incidence

__all__ = ["refine_max_send", "column_net_incidence"]


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


def _round(nets, state, part, P, phase, limits, batch, slack):
    """One batch of moves of ``phase`` (``"max"``, ``"recv"``, ``"volume"`` or ``"compute"``);
    ``(new part, hot threshold)`` or None."""
    w_limit, r_limit, km1_limit, w_target = limits
    max_s, receive = state.S.max(), phase == "recv"
    tau = (1 - slack) * (state.R.max() if receive else max_s) if phase in ("max", "recv") else -1
    focus = state.W > w_target if phase == "compute" else (state.R if receive else state.S) >= tau
    # with every part in focus, pulls mostly repeat out-moves (all of them, on symmetric graphs)
    v, b, lead, score = _candidates(nets, state, part, focus, P, pulls=phase in ("max", "recv"), receive=receive)
    room = w_target if phase == "compute" else w_limit
    ok = state.W[b] + nets.weights[v] <= room
    if phase == "compute":
        ok &= focus[part[v]]  # out of the overloaded parts only
    ok = np.flatnonzero(ok)
    # exact evaluation costs the candidate's nets: only the most promising per lead part
    ok = ok[_best_per_lead(lead[ok], score[ok], nets.in_ptr[v[ok] + 1] - nets.in_ptr[v[ok]], 4 * batch)]
    v, b = v[ok], b[ok]
    if v.size == 0:
        return None
    c, p, d, dR_a, dR_b, dkm1, (n_idx, n_net, n_changes) = _evaluate(nets, state, part, v, b, P)
    a = part[v]
    before, after = np.full(v.size, -1), np.full(v.size, -1)
    np.maximum.at(before, c, state.S[p])
    np.maximum.at(after, c, state.S[p] + d)
    adm = ((state.R[a] + dR_a <= r_limit) & (state.R[b] + dR_b <= r_limit)
           & (state.km1 + dkm1 <= km1_limit))
    gate = before  # the maximum a move must stay below in the greedy pass (max and receive phases)
    if phase == "max":
        adm &= (before >= tau) & (after < before)
        idx = np.flatnonzero(adm)
        idx = idx[lexsort((after[idx] - before[idx], dkm1[idx], -before[idx]))]
    elif receive:  # the larger receive volume of a and b goes down; no send volume above the max
        gate = r_before = np.maximum(state.R[a], state.R[b])
        r_after = np.maximum(state.R[a] + dR_a, state.R[b] + dR_b)
        adm &= (r_before >= tau) & (r_after < r_before) & (after <= max_s)
        idx = np.flatnonzero(adm)
        idx = idx[lexsort((r_after[idx] - r_before[idx], dkm1[idx], -r_before[idx]))]
    else:
        adm &= (after <= max_s)
        if phase == "volume":
            adm &= dkm1 < 0
        idx = np.flatnonzero(adm)
        idx = idx[lexsort((after[idx], dkm1[idx]))]
    if idx.size == 0:
        return None
    # Greedy.  Moves add up exactly unless they share a net that one of them changes (its λ, or
    # its owner: the move's own net); nets a move leaves unchanged (a keeps pins, b already has
    # some) may be shared, combined such moves can only do better.  Track what they add per part.
    c_ptr = np.concatenate([[0], np.cumsum(np.bincount(c, minlength=v.size))]).tolist()
    n_ptr = np.concatenate([[0], np.cumsum(np.bincount(n_idx, minlength=v.size))]).tolist()
    # the part a move serves: its hottest changed part (the first one on ties; c is sorted, p
    # ascending per candidate), else its source part; receive side: the one of a and b that
    # receives more
    if receive:
        leads = np.where(state.R[b] > state.R[a], b, a)
    else:
        at_max = np.flatnonzero(state.S[p] == before[c])
        served, first = np.unique(c[at_max], return_index=True)
        leads = a.copy()
        leads[served] = p[at_max[first]]
    # the loop below runs once per admissible move: it reads Python lists and does a few numpy
    # calls on the move's short slices only
    mark = np.zeros(part.size, dtype=np.int8)  # 0 free, 1 pins moved but net unchanged, 2 changed
    changes = n_changes.astype(np.int8)
    rises = d > 0
    s_now = state.S.copy()
    w_now, r_now = state.W.tolist(), state.R.tolist()
    km1_now, per_focus = state.km1, [0] * P
    v_l, a_l, b_l, lead_l = v.tolist(), a.tolist(), b.tolist(), leads.tolist()
    w_l, dra_l, drb_l, dkm1_l, gate_l = (nets.weights[v].tolist(), dR_a.tolist(), dR_b.tolist(),
                                         dkm1.tolist(), gate.tolist())
    chosen = []
    for k in idx.tolist():
        lead = lead_l[k]
        if per_focus[lead] >= batch:
            continue
        vk, ak, bk = v_l[k], a_l[k], b_l[k]
        nk, ck = n_net[n_ptr[k]:n_ptr[k + 1]], changes[n_ptr[k]:n_ptr[k + 1]]
        # a net this move changes must be free; a net it leaves unchanged must not be changed
        if mark[vk] or (nk.size and (mark[nk] + ck).max() >= 2):
            continue
        pk, dk = p[c_ptr[k]:c_ptr[k + 1]], d[c_ptr[k]:c_ptr[k + 1]]
        now = s_now[pk]
        after_k = now + dk
        if (rises[c_ptr[k]:c_ptr[k + 1]] & (after_k > (gate_l[k] - 1 if phase == "max" else max_s))).any():
            continue
        if phase == "max" and np.maximum(after_k - tau, 0).sum() >= np.maximum(now - tau, 0).sum():
            continue  # together with the moves taken so far, this one must still lower the hot excess
        if receive:  # the same on the receive side, for the two parts a receive move changes
            ra, rb = r_now[ak] + dra_l[k], r_now[bk] + drb_l[k]
            if max(ra, rb) >= gate_l[k] or (max(ra - tau, 0) + max(rb - tau, 0)
                                              >= max(r_now[ak] - tau, 0) + max(r_now[bk] - tau, 0)):
                continue
        wk = w_l[k]
        if (w_now[bk] + wk > room or r_now[ak] + dra_l[k] > r_limit or r_now[bk] + drb_l[k] > r_limit
                or km1_now + dkm1_l[k] > km1_limit):
            continue
        mark[nk] = 1 + ck
        mark[vk] = 2
        s_now[pk] = after_k
        r_now[ak] += dra_l[k]
        r_now[bk] += drb_l[k]
        w_now[bk] += wk
        w_now[ak] -= wk
        km1_now += dkm1_l[k]
        per_focus[lead] += 1
        chosen.append(k)
    if not chosen:
        return None
    trial = part.copy()
    trial[v[chosen]] = b[chosen]
    return trial, tau



def _accept(phase, old: _State, new: _State, tau, limits) -> bool:
    w_limit, r_limit, km1_limit, w_target = limits
    if new.S.max() > old.S.max() or new.R.max() > r_limit or new.km1 > km1_limit or new.W.max() > w_limit:
        return False
    if phase == "max":
        return np.maximum(new.S - tau, 0).sum() < np.maximum(old.S - tau, 0).sum()
    if phase == "recv":
        return np.maximum(new.R - tau, 0).sum() < np.maximum(old.R - tau, 0).sum()
    if phase == "compute":
        return np.maximum(new.W - w_target, 0).sum() < np.maximum(old.W - w_target, 0).sum()
    return new.km1 < old.km1


def refine_max_send(edge_index: Tensor, num_nodes: int, part: Tensor, num_parts: int,
                    epsilon: float = 0.03, max_total_increase: float = 0.1, slack: float = 0.02,
                    max_rounds: int = 200, moves_per_part: int = 64, cycles: int = 3,
                    patience: int = 5, side_rounds: int = 20, receive: bool = True) -> Tensor:
    """Returns a refined copy of ``part`` with a lower (never higher) maximum send volume, then
    (with ``receive``) a lower (never higher) maximum receive volume.

    Args:
        epsilon: compute imbalance ``max W / avg W - 1`` moves may reach.
        max_total_increase: km1 (total volume) may grow at most by this fraction of its input value.
        slack: parts within this fraction of the maximum send (receive) volume are refined together.
        max_rounds: bound on the batches of each max (and receive) phase.
        side_rounds: bound on the batches of each volume and compute phase.
        moves_per_part: largest batch of moves led by one part.
        cycles: alternations of the max, receive and volume phases.
        patience: a max (or receive) phase stops when its maximum fell by less than 0.5 % in
            this many rounds.
        receive: run the receive phase (lower the maximum receive volume without raising the
            maximum send volume); ``False`` only guards the maximum receive volume.
    """
    P, N = int(num_parts), int(num_nodes)
    part = part.numpy().astype(np.int64).copy()
    if P == 1 or N == 0:
        return torch.from_numpy(part)
    return torch.from_numpy(_refine(column_net_incidence(edge_index, N), part, P, epsilon, max_total_increase, slack,
                                    max_rounds, moves_per_part, cycles, patience, side_rounds, receive))


def _refine(nets: _Nets, part: np.ndarray, P: int, epsilon: float = 0.03, max_total_increase: float = 0.1,
            slack: float = 0.02, max_rounds: int = 200, moves_per_part: int = 64, cycles: int = 3,
            patience: int = 5, side_rounds: int = 20, receive: bool = True) -> np.ndarray:
    """:func:`refine_max_send` on prebuilt nets (the restarts share them); returns the new part."""
    state = _state(nets, part, P)
    w_target = (1 + epsilon) * nets.weights.sum() / P
    # (compute limit, receive limit, km1 limit, compute target); the max phase may raise the
    # maximum receive volume up to the input's, the receive and volume phases (with `receive`)
    # never raise it: the order of priority is max send, max receive, total
    limits = (max(w_target, state.W.max()), state.R.max(), state.km1 * (1 + max_total_increase), w_target)
    phases = ("max", "recv", "volume") if receive else ("max", "volume")
    for cycle in range(cycles):
        progress = False
        for phase in ("compute",) + phases if cycle == 0 else phases:
            if phase == "compute" and state.W.max() <= w_target:
                continue
            phase_limits = limits if phase in ("compute", "max") or not receive else \
                (limits[0], min(limits[1], state.R.max())) + limits[2:]
            batch, history = moves_per_part, []
            for _ in range(max_rounds if phase in ("max", "recv") else side_rounds):
                if state.S.max() == 0:
                    break
                history.append(state.R.max() if phase == "recv" else state.S.max())
                if phase in ("max", "recv") and len(history) > patience and \
                        history[-patience - 1] - history[-1] < 5e-3 * history[-1]:
                    break  # the maximum stalled: hot parts only trade load among themselves
                out = _round(nets, state, part, P, phase, phase_limits, batch, slack)
                if out is None:
                    break
                trial, tau = out
                new_state = _state(nets, trial, P)
                if not _accept(phase, state, new_state, tau, phase_limits):
                    batch //= 2   # moves pile onto the same part: retry smaller
                    if batch == 0:
                        break
                    continue
                batch = min(2 * batch, moves_per_part)
                gain = state.km1 - new_state.km1
                part, state, progress = trial, new_state, True
                if phase == "volume" and gain < 5e-4 * state.km1:
                    break  # the tail of tiny volume gains is not worth a round each
            if phase == "compute":  # what was repaired stays repaired
                limits = (max(w_target, state.W.max()),) + limits[1:]
        if not progress:
            break
    return part
