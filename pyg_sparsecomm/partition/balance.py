"""Max-send-volume balancing: refine any partition so that no rank sends (or receives) too much.

Graph and hypergraph partitioners minimise the *total* volume; the time of the
all-to-allv is set by the busiest rank (ICPP'24 §5, "Graph-VB").  This
refinement moves single vertices, vectorised in rounds, on the column-net
model (net ``j = {j} ∪ {i : j -> i}``, owned by the part of row ``j``):

1. From the pins of every net per part compute each part's send volume
   ``S_p = Σ_{j owned by p} (λ_j - 1)``, receive volume ``R_p`` and compute
   weight ``W_p`` (row nonzeros).
2. Candidates (``v`` moves from ``a`` to ``b``) are generated for the *focus*
   parts: *out-moves* of every vertex of a focus part to a part that holds
   pins of its net, and *pull-moves* of the lone pin ``u`` that a net owned
   by a focus part has in another part (pulling ``u`` in removes that part
   from the net).  Per focus part only the ``4 × batch`` with the best cheap
   score (the most its send could drop) go on.
3. The exact effect of each move alone on every part's ``S``, on ``R_a``,
   ``R_b`` and on km1 is computed from pin counts (net ``v`` changes owner and
   maybe ``λ``; every net that has ``v`` as a pin may lose part ``a`` and gain
   ``b``).
4. A greedy pass takes the best admissible moves that share no net one of
   them changes (so their effects add up exactly; nets left unchanged may be
   shared, which hubs' nets need), while checking the accumulated ``S``,
   ``R``, ``W``, km1 and hot excess of the parts they touch.  The batch is
   applied and re-verified from scratch (a failing batch is undone and
   retried at half the size).

Two phases alternate (``cycles`` times, until neither makes progress), after a
first **compute phase** if the input exceeds the compute limit (focus = the
overloaded parts; out-moves to parts with room that raise no ``S`` above the
maximum, fewest km1 first, until no part is over or no move is left):

* **max phase** (minimises ``max_p S_p``): focus = *hot* parts,
  ``S_p >= (1 - slack) max S``.  A move is admissible if the largest ``S``
  among the parts it changes goes down (``max(S + ΔS) < max S`` over those
  parts) and that is at least the hot threshold; best = hottest part first,
  then smallest km1 increase.  A batch must lower the hot excess
  ``Σ_p max(0, S_p - (1 - slack) max S)``.
* **volume phase** (minimises km1 = total volume under the max cap): focus =
  every part; admissible moves lower km1 and raise no ``S`` above the current
  maximum; the phase ends once a round gains less than 0.05 % of km1.  It
  pays back volume spent by the max phase (or by a multi-constraint start,
  see :mod:`.multiconstraint`) and frees room.

Guarantees (checked on every batch): the maximum send volume never increases,
nor the maximum receive volume; compute stays within ``(1 + ε) avg W`` (or the
input's maximum, if that was already larger); km1 stays within
``(1 + max_total_increase)`` times its initial value; the result is
deterministic.  Cost per round: one sort of all pins (the state, O(pins log
pins)) plus O(pins of the candidates' nets) lookups — a dense (net, part)
table when ``N × P`` fits in 128 MB, else O(log pins) binary searches — in
numpy, and a Python pass over the admissible moves (at most ``4 × batch`` per
focus part are evaluated); rounds are bounded by ``max_rounds`` per max phase and
``side_rounds`` per volume or compute phase, and a max phase ends early once
the maximum stalls (``patience``).  Memory: O(pins) plus that table.
"""
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from ._sorting import lexsort, run_starts, stable_sort, unique_inverse
from .methods import row_nnz


class _Nets(NamedTuple):
    net_of_pin: np.ndarray  # pins as (net, vertex) pairs, sorted by net
    pins: np.ndarray
    net_ptr: np.ndarray     # CSR over nets
    in_ptr: np.ndarray      # CSR over vertices: the nets each vertex is a pin of (incl. its own)
    in_net: np.ndarray
    weights: np.ndarray     # row nonzeros = compute per vertex


class _State(NamedTuple):
    S: np.ndarray       # send volume per part
    R: np.ndarray       # receive volume per part
    W: np.ndarray       # compute weight per part
    km1: int
    lam: np.ndarray     # parts spanned by every net
    keys: np.ndarray    # sorted unique net * P + part (a part holding pins of the net)
    counts: np.ndarray  # pins of the net in that part
    first_pin: np.ndarray  # a pin of the net in that part (the only one where counts == 1)
    net: np.ndarray     # keys // P and keys % P, kept because every round reads them
    holder: np.ndarray
    owner: np.ndarray   # part of the net's own row (the part that sends it)


def column_net_pins(edge_index: Tensor, num_nodes: int) -> _Nets:
    """The column-net hypergraph as pin lists (self-loops folded into the ``{j}`` pin)."""
    N = int(num_nodes)
    src, dst = edge_index.numpy()
    keep = src != dst
    nodes = np.arange(N, dtype=np.int64)
    pairs = np.unique(np.concatenate([src[keep] * N + dst[keep], nodes * N + nodes]))
    net_of_pin, pins = pairs // N, pairs % N
    net_ptr = np.concatenate([[0], np.cumsum(np.bincount(net_of_pin, minlength=N))])
    in_ptr = np.concatenate([[0], np.cumsum(np.bincount(pins, minlength=N))])
    in_net = net_of_pin[np.argsort(pins, kind="stable")]
    return _Nets(net_of_pin, pins, net_ptr, in_ptr, in_net, row_nnz(edge_index, N))


def _state(nets: _Nets, part: np.ndarray, P: int) -> _State:
    N = part.size
    sorted_keys, order = stable_sort(nets.net_of_pin * P + part[nets.pins])
    start = run_starts(sorted_keys)
    keys, counts = sorted_keys[start], np.diff(np.append(start, sorted_keys.size))
    net, holder = keys // P, keys % P
    owner = part[net]
    lam = np.bincount(net, minlength=N)
    S = np.bincount(part, weights=lam - 1, minlength=P).astype(np.int64)  # net j is owned by j
    R = np.bincount(holder[holder != owner], minlength=P).astype(np.int64)
    W = np.bincount(part, weights=nets.weights, minlength=P).astype(np.int64)
    return _State(S, R, W, int((lam - 1).sum()), lam, keys, counts, nets.pins[order[start]], net, holder, owner)


_DENSE_COUNT_ENTRIES = 1 << 25  # a (net, part) table up to 128 MB of int32, else binary search


def _pin_counter(state: _State, num_nodes: int, P: int):
    """``count(net, p)``: pins of each ``net`` in part ``p`` (0 where none).

    A move's evaluation asks this for every net of every candidate (millions
    of queries per round on power-law graphs); a dense table answers them
    several times faster than a binary search in ``state.keys`` when
    ``N × P`` is small enough to allocate.
    """
    if num_nodes * P <= _DENSE_COUNT_ENTRIES:
        table = np.zeros(num_nodes * P, dtype=np.int32)
        table[state.keys] = state.counts
        return lambda net, p: table[net * P + p]

    def count(net, p):
        key = net * P + p
        idx = np.minimum(np.searchsorted(state.keys, key), state.keys.size - 1)
        return np.where(state.keys[idx] == key, state.counts[idx], 0)
    return count


def _expand(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray):
    """CSR slices ``values[ptr[r]:ptr[r + 1]]`` of ``rows`` concatenated, with the index into ``rows``."""
    deg = ptr[rows + 1] - ptr[rows]
    which = np.repeat(np.arange(rows.size), deg)
    first = np.concatenate([[0], np.cumsum(deg)[:-1]]).astype(np.int64)
    return which, values[np.repeat(ptr[rows] - first, deg) + np.arange(int(deg.sum()))]


def _candidates(nets: _Nets, state: _State, part: np.ndarray, focus: np.ndarray, P: int, pulls: bool = True):
    """Moves ``(v, b)`` for the focus parts with the part they serve (``lead``) and a cheap score.

    Out-moves of a focus part's vertex ``v`` score ``λ_v - 1`` (the most its owner's
    send can drop); pull-moves of ``u`` into focus part ``b`` score the number of
    ``b``-owned nets in which ``u`` is the lone pin of its part.
    """
    net, holder = state.net, state.holder
    sel = focus[state.owner] & (holder != state.owner)
    # the lone pin u of a focus-owned net in another part: pulling u in drops that part
    lone = sel & (state.counts == 1) & pulls
    pull_key, pull_score = np.unique(state.first_pin[lone] * P + state.owner[lone], return_counts=True)
    out_v = net[sel]  # move net v's own row to a part holding pins of the net
    v = np.concatenate([out_v, pull_key // P])
    b = np.concatenate([holder[sel], pull_key % P])
    lead = np.concatenate([state.owner[sel], pull_key % P])
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


def _evaluate(nets: _Nets, state: _State, part: np.ndarray, v: np.ndarray, b: np.ndarray, P: int):
    """Exact effect of each move alone: sparse ``(candidate, part, ΔS)``, ``ΔR_a``, ``ΔR_b``, ``Δkm1``,
    and the candidate's other nets with a flag for those whose ``λ`` it changes."""
    a = part[v]
    count = _pin_counter(state, part.size, P)
    cnt_a, cnt_b = count(v, a), count(v, b)
    lam_v = state.lam[v]
    lam_new = lam_v - (cnt_a == 1) + (cnt_b == 0)
    dR_a = (cnt_a >= 2).astype(np.int64)   # a keeps pins of net v: it now receives row v
    dR_b = -(cnt_b > 0).astype(np.int64)   # b owns v, no longer receives it
    c_idx, j = _expand(nets.in_ptr, nets.in_net, v)
    other = j != v[c_idx]
    c_idx, j = c_idx[other], j[other]
    owner = part[j]
    leave = (count(j, a[c_idx]) == 1) & (owner != a[c_idx])  # net j loses part a
    join = count(j, b[c_idx]) == 0                           # net j gains part b
    d_lam = join.astype(np.int64) - leave
    m = v.size
    dkm1 = np.bincount(c_idx, weights=d_lam, minlength=m).astype(np.int64) + (lam_new - lam_v)
    dR_a = dR_a - np.bincount(c_idx, weights=leave, minlength=m).astype(np.int64)
    dR_b = dR_b + np.bincount(c_idx, weights=join, minlength=m).astype(np.int64)
    ar = np.arange(m)
    key, inv = unique_inverse(np.concatenate([c_idx * P + owner, ar * P + a, ar * P + b]))
    d = np.bincount(inv, weights=np.concatenate([d_lam, -(lam_v - 1), lam_new - 1])).astype(np.int64)
    nz = d != 0
    moved_nets = (c_idx, j, leave | join)  # per candidate: its other nets, and which ones change λ
    return key[nz] // P, key[nz] % P, d[nz], dR_a, dR_b, dkm1, moved_nets


def _round(nets, state, part, P, phase, limits, batch, slack):
    """One batch of moves of ``phase`` (``"max"``, ``"volume"`` or ``"compute"``); the new part or None."""
    w_limit, r_limit, km1_limit, w_target = limits
    max_s = state.S.max()
    tau = (1 - slack) * max_s if phase == "max" else -1
    focus = state.W > w_target if phase == "compute" else state.S >= tau
    # with every part in focus, pulls mostly repeat out-moves (all of them, on symmetric graphs)
    v, b, lead, score = _candidates(nets, state, part, focus, P, pulls=phase == "max")
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
    if phase == "max":
        adm &= (before >= tau) & (after < before)
        idx = np.flatnonzero(adm)
        idx = idx[lexsort((after[idx] - before[idx], dkm1[idx], -before[idx]))]
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
    # ascending per candidate), else its source part
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
    w_l, dra_l, drb_l, dkm1_l, before_l = (nets.weights[v].tolist(), dR_a.tolist(), dR_b.tolist(),
                                           dkm1.tolist(), before.tolist())
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
        if (rises[c_ptr[k]:c_ptr[k + 1]] & (after_k > (before_l[k] - 1 if phase == "max" else max_s))).any():
            continue
        if phase == "max" and np.maximum(after_k - tau, 0).sum() >= np.maximum(now - tau, 0).sum():
            continue  # together with the moves taken so far, this one must still lower the hot excess
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
    if phase == "compute":
        return np.maximum(new.W - w_target, 0).sum() < np.maximum(old.W - w_target, 0).sum()
    return new.km1 < old.km1


def refine_max_send(edge_index: Tensor, num_nodes: int, part: Tensor, num_parts: int,
                    epsilon: float = 0.03, max_total_increase: float = 0.1, slack: float = 0.02,
                    max_rounds: int = 200, moves_per_part: int = 64, cycles: int = 3,
                    patience: int = 5, side_rounds: int = 20) -> Tensor:
    """Returns a refined copy of ``part`` with a lower (never higher) maximum send volume.

    Args:
        epsilon: compute imbalance ``max W / avg W - 1`` moves may reach.
        max_total_increase: km1 (total volume) may grow at most by this fraction of its input value.
        slack: parts within this fraction of the maximum send volume are refined together.
        max_rounds: bound on the batches of each max phase.
        side_rounds: bound on the batches of each volume and compute phase.
        moves_per_part: largest batch of moves led by one part.
        cycles: alternations of the max phase and the volume phase.
        patience: a max phase stops when the maximum fell by less than 0.5 % in this many rounds.
    """
    P, N = int(num_parts), int(num_nodes)
    part = part.numpy().astype(np.int64).copy()
    if P == 1 or N == 0:
        return torch.from_numpy(part)
    return torch.from_numpy(_refine(column_net_pins(edge_index, N), part, P, epsilon, max_total_increase, slack,
                                    max_rounds, moves_per_part, cycles, patience, side_rounds))


def _refine(nets: _Nets, part: np.ndarray, P: int, epsilon: float = 0.03, max_total_increase: float = 0.1,
            slack: float = 0.02, max_rounds: int = 200, moves_per_part: int = 64, cycles: int = 3,
            patience: int = 5, side_rounds: int = 20) -> np.ndarray:
    """:func:`refine_max_send` on prebuilt nets (the restarts share them); returns the new part."""
    state = _state(nets, part, P)
    w_target = (1 + epsilon) * nets.weights.sum() / P
    limits = (max(w_target, state.W.max()), state.R.max(), state.km1 * (1 + max_total_increase), w_target)
    for cycle in range(cycles):
        progress = False
        for phase in ("compute", "max", "volume") if cycle == 0 else ("max", "volume"):
            if phase == "compute" and state.W.max() <= w_target:
                continue
            batch, history = moves_per_part, []
            for _ in range(max_rounds if phase == "max" else side_rounds):
                if state.S.max() == 0:
                    break
                history.append(state.S.max())
                if phase == "max" and len(history) > patience and \
                        history[-patience - 1] - history[-1] < 5e-3 * history[-1]:
                    break  # the maximum stalled: hot parts only trade load among themselves
                out = _round(nets, state, part, P, phase, limits, batch, slack)
                if out is None:
                    break
                trial, tau = out
                new_state = _state(nets, trial, P)
                if not _accept(phase, state, new_state, tau, limits):
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
