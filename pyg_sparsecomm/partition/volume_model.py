"""The exact volume model of the balancing: the column-net hypergraph, the per-part send,
receive and compute volumes of a partition, and the effect of single moves on them.

Net ``j = {j} ∪ {i : j -> i}`` (row ``j`` of ``H`` and the rows that need it), owned by
the part of row ``j``; the part sends it to every other part holding a pin, so
``S_p = Σ_{j owned by p} (λ_j - 1)``, and ``R_p`` counts the nets with a pin in ``p``
owned elsewhere.  :func:`_evaluate` gives a move's effect on every ``S``, on the two
``R`` it changes and on km1, from pin counts (tested against recomputing the state).
"""
from typing import NamedTuple

import numpy as np
from torch import Tensor

from ._sorting import run_starts, stable_sort, unique_inverse
from .hypergraph import column_net_pins
from .methods import csr_ptr, row_nnz


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


class _TouchedNets(NamedTuple):
    """The nets a move has as pins besides its own, one entry per (candidate, net)."""
    cand: np.ndarray     # index of the candidate move
    net: np.ndarray
    changes: np.ndarray  # the move changes the net's λ (it loses part a or gains part b)


class _MoveEffects(NamedTuple):
    """Exact effect of each candidate move alone (:func:`_evaluate`).

    ``ΔS`` is sparse: candidate ``cand[k]`` changes ``S[part[k]]`` by ``d_send[k]``
    (sorted by candidate, then part); a move changes no ``R`` but ``R_a`` and ``R_b``.
    """
    cand: np.ndarray
    part: np.ndarray
    d_send: np.ndarray
    d_recv_a: np.ndarray  # per candidate: change of R of its source part a
    d_recv_b: np.ndarray  # ... of its target part b
    d_km1: np.ndarray
    touched: _TouchedNets


def column_net_incidence(edge_index: Tensor, num_nodes: int) -> _Nets:
    """The column-net hypergraph (:func:`.hypergraph.column_net_pins`) of the whole graph both
    ways: the pins of every net, one-pin nets included, and the nets every vertex is a pin of."""
    N = int(num_nodes)
    src, dst = edge_index.numpy()
    net_of_pin, pins = column_net_pins(src, dst, N)
    in_net = net_of_pin[np.argsort(pins, kind="stable")]
    return _Nets(net_of_pin, pins, csr_ptr(net_of_pin, N), csr_ptr(pins, N), in_net, row_nnz(edge_index, N))


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


_DENSE_COUNT_BYTES = 1 << 27  # a (net, part) count table up to 128 MB, else binary search


def _pin_counter(state: _State, num_nodes: int, P: int):
    """``count(net, p)``: pins of each ``net`` in part ``p`` (0 where none).

    A move's evaluation asks this for every net of every candidate (millions
    of queries per round on power-law graphs); a dense table answers them
    several times faster than a binary search in ``state.keys`` when
    ``N × P`` is small enough to allocate.  Its entries take the narrowest
    unsigned type that holds the largest count (``uint16`` up to 65535 pins of
    one net in one part), so R-MAT 18 at P = 256 (2^26 entries) still fits.
    """
    dtype = np.min_scalar_type(int(state.counts.max(initial=0)))
    if num_nodes * P * dtype.itemsize <= _DENSE_COUNT_BYTES:
        table = np.zeros(num_nodes * P, dtype=dtype)
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


def _evaluate(nets: _Nets, state: _State, part: np.ndarray, v: np.ndarray, b: np.ndarray,
              P: int) -> _MoveEffects:
    """Exact effect of each move ``v[k]: part[v[k]] -> b[k]`` alone: sparse ``ΔS``, ``ΔR_a``,
    ``ΔR_b``, ``Δkm1``, and the candidate's other nets with a flag for those whose ``λ`` it changes."""
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
    return _MoveEffects(key[nz] // P, key[nz] % P, d[nz], dR_a, dR_b, dkm1, _TouchedNets(c_idx, j, leave | join))
