"""Column-net hypergraph partitioning: its connectivity-1 metric *is* the exchange volume.

Model (Çatalyürek & Aykanat; VLDB'23 §4, ICPP'24 §5): one vertex per row ``i``
of ``A`` (the node whose output it computes), weighted by the row's nonzeros;
one net per column ``j`` holding ``j`` itself and every row ``i`` with an
edge ``j -> i``.  Under a partition, net ``j`` spans ``λ_j`` parts and the
owner of ``j`` must send ``H[j]`` to the other ``λ_j - 1`` of them, so
``km1 = Σ_j (λ_j - 1)`` equals the rows moved per SpMM exactly, also for
directed graphs (no symmetrisation: the nets follow the true columns).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import Tensor

from .methods import csr_ptr, register, row_nnz

_MTK = None  # Mt-KaHyPar's initializer: its thread pool is made once per process, at the first use
_MTK_THREADS: int | None = None  # set_hypergraph_threads' count, or None for torch.get_num_threads()


def set_hypergraph_threads(threads: int) -> None:
    """Sets the threads of Mt-KaHyPar (``method="hypergraph"`` and the methods built on it) in
    this process.

    Mt-KaHyPar makes its thread pool once per process, at its first partition, with
    :func:`torch.get_num_threads` threads unless this was called before.  Under ``torchrun``
    (``OMP_NUM_THREADS=1``) that is one thread; a rank that partitions while the others wait may
    take more.  The deterministic preset is meant to give the same partition for a seed whatever
    the count (the tests check one against two threads).

    Args:
        threads (int): the thread count, at least 1.

    Raises:
        ValueError: ``threads`` is not a positive integer.
        RuntimeError: Mt-KaHyPar already runs in this process with another count (call this
            before the process's first hypergraph partition).
    """
    global _MTK_THREADS
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if _MTK is not None and _MTK_THREADS != threads:
        raise RuntimeError(f"Mt-KaHyPar already runs with {_MTK_THREADS} thread(s) in this process (its thread "
                           f"pool is made once, at the first partition): call set_hypergraph_threads({threads}) "
                           "before the process's first hypergraph partition")
    _MTK_THREADS = threads


@contextmanager
def default_hypergraph_threads(threads: int) -> Iterator[None]:
    """Within the block, Mt-KaHyPar's thread pool, if made there, gets ``threads`` threads (its
    pool then keeps them for the process) unless this process chose a count
    (:func:`set_hypergraph_threads`) or made the pool already; otherwise nothing changes."""
    global _MTK_THREADS
    if _MTK is not None or _MTK_THREADS is not None:
        yield
        return
    _MTK_THREADS = max(1, int(threads))
    try:
        yield
    finally:
        if _MTK is None:  # the block made no pool: the count stays the default
            _MTK_THREADS = None


def _initializer(mtkahypar):
    global _MTK, _MTK_THREADS
    if _MTK is None:
        if _MTK_THREADS is None:
            _MTK_THREADS = max(1, torch.get_num_threads())
        _MTK = mtkahypar.initialize(_MTK_THREADS, False)
    return _MTK


def column_net_pins(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                    columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""The pins of the column-net hypergraph of the edges ``src -> dst``, one per (net, vertex).

    Net :math:`j` holds column :math:`j`'s own row and every row that reads it,

    .. math::
        n_j = \{j\} \cup \{i : (j \to i) \in E\},

    so under a partition its connectivity :math:`\lambda_j` (the parts it
    spans) gives the rows of :math:`H` its owner sends, :math:`\lambda_j - 1`.
    Duplicate edges and self-loops add no pin (a self-loop is the ``{j}`` pin).
    This is the one builder of the model: the km1 partitioners
    (:func:`column_nets`, the mini-batch nets of :mod:`.stochastic`) and the
    balancing's move model (:mod:`.volume_model`) all read its output.

    Args:
        src (np.ndarray): the edges' sources (``int64``).
        dst (np.ndarray): the edges' targets (``int64``).
        num_nodes (int): the number of rows/columns ``N``.
        columns (np.ndarray, optional): the columns whose own row is a pin, ``None`` = all ``N``;
            it must hold every ``src`` (a net is ``{j}`` plus its edges).  A
            mini-batch passes the sources of its sampled edges: the columns it
            does not read get no net. (default: :obj:`None`)

    Returns:
        ``(net_of_pin, pins)``: the pins sorted by net, then by vertex.
    """
    N = num_nodes
    if columns is None:
        columns = np.arange(N, dtype=np.int64)
    key = np.unique(np.concatenate([src * N + dst, columns * N + columns]))
    return key // N, key % N


def drop_single_pin_nets(net_ptr: np.ndarray, pins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nets of two or more pins, as CSR ``(net_ptr, pins)``.

    A net of one pin spans one part under every partition (``λ - 1 = 0``):
    it never costs volume and only slows the partitioner down.
    """
    size = np.diff(net_ptr)
    kept = size > 1
    return (np.concatenate([[0], np.cumsum(size[kept])]).astype(np.int64),
            pins[np.repeat(kept, size)].astype(np.int64))


def merge_identical_nets(net_ptr: np.ndarray, pins: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each set of identical nets as one net weighted by their number: CSR ``(net_ptr, pins)``
    and ``weights``, the first of each set in the input order (pins sorted within every net).

    The weighted km1 is the km1 of the input under every partition, and a merged stochastic
    hypergraph repeats many nets (a column read by the same rows in several batches).  Nets
    are grouped by size and a 64-bit hash of their pins, then compared pin by pin (a hash
    collision costs one more round, never a wrong merge).
    """
    size = np.diff(net_ptr)
    m = size.size
    if m == 0:
        return net_ptr, pins, np.zeros(0, dtype=np.int64)
    with np.errstate(over="ignore"):
        mixed = _mix64(pins.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1))
        # pins are sorted within a net, so the position-free sum is a hash of the set
        digest = np.zeros(m, dtype=np.uint64)
        nonempty = size > 0
        if pins.size:
            digest[nonempty] = np.add.reduceat(mixed, net_ptr[:-1][nonempty])
    rep = np.arange(m)
    pending = np.arange(m)  # nets not yet matched to their set's first net
    while pending.size:  # one round unless two different nets share (size, hash)
        order = pending[np.lexsort((pending, digest[pending], size[pending]))]
        same = np.zeros(order.size, dtype=bool)
        same[1:] = (size[order][1:] == size[order][:-1]) & (digest[order][1:] == digest[order][:-1])
        head = order[np.maximum.accumulate(np.where(same, 0, np.arange(order.size)))]
        # compare pin by pin with the head: a net that differs (a hash collision) waits for the next round
        k = size[order]
        offset = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
        differs = pins[np.repeat(net_ptr[order], k) + offset] != pins[np.repeat(net_ptr[head], k) + offset]
        bad = np.zeros(order.size, dtype=bool)
        bad[np.repeat(np.arange(order.size), k)[differs]] = True
        rep[order[~bad]] = head[~bad]
        pending = order[bad]
    keep = rep == np.arange(m)
    weights = np.bincount(rep, minlength=m)[keep]
    kept_size = size[keep]
    return (np.concatenate([[0], np.cumsum(kept_size)]).astype(np.int64),
            pins[np.repeat(keep, size)].astype(np.int64), weights.astype(np.int64))


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (wrapping ``uint64`` arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def column_nets(edge_index: Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The column nets of the whole graph as CSR ``(net_ptr, pins)``, without one-pin nets
    (a node no other node reads); the hypergraph :func:`hypergraph_partition` partitions."""
    src, dst = edge_index.numpy()
    net_of_pin, pins = column_net_pins(src, dst, num_nodes)
    return drop_single_pin_nets(csr_ptr(net_of_pin, num_nodes), pins)


def km1(net_ptr: np.ndarray, pins: np.ndarray, part: np.ndarray, net_weights: np.ndarray | None = None) -> int:
    """Connectivity-1 metric of ``part`` on the nets (vectorised), each net counted
    ``net_weights`` times (default once)."""
    if pins.size == 0:
        return 0
    size = np.diff(net_ptr)
    net_of_pin = np.repeat(np.arange(net_ptr.size - 1), size)
    P = int(part.max()) + 1
    if net_weights is None:
        distinct = np.unique(net_of_pin * P + part[pins]).size
        return int(distinct - np.count_nonzero(size))
    lam = np.bincount(np.unique(net_of_pin * P + part[pins]) // P, minlength=size.size)
    return int((net_weights * np.maximum(lam - 1, 0)).sum())


def _mtkahypar(net_ptr, pins, weights, num_nodes, num_parts, epsilon, seed, preset, net_weights=None):
    try:
        import mtkahypar
    except ImportError as e:
        raise ImportError("method='hypergraph' with backend='mtkahypar' needs Mt-KaHyPar: "
                          "pip install 'pyg_sparsecomm[hypergraph]' (or pip install mtkahypar)") from e
    initializer = _initializer(mtkahypar)
    presets = {"deterministic": mtkahypar.PresetType.DETERMINISTIC, "default": mtkahypar.PresetType.DEFAULT,
               "quality": mtkahypar.PresetType.QUALITY}
    if preset not in presets:
        raise ValueError(f"unknown Mt-KaHyPar preset {preset!r}; choose one of {sorted(presets)}")
    ctx = initializer.context_from_preset(presets[preset])
    ctx.set_partitioning_parameters(num_parts, epsilon, mtkahypar.Objective.KM1)
    ctx.logging = False
    mtkahypar.set_seed(seed)
    nets = [pins[a:b].tolist() for a, b in zip(net_ptr[:-1], net_ptr[1:], strict=False)]
    net_w = [1] * len(nets) if net_weights is None else net_weights.tolist()
    hg = initializer.create_hypergraph(ctx, num_nodes, len(nets), nets, weights.tolist(), net_w)
    return np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)


@register("hypergraph")
def hypergraph_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int,
                         epsilon: float = 0.03, backend: str = "mtkahypar",
                         preset: str = "deterministic") -> Tensor:
    """Minimises the exact exchange volume (km1 of the column-net model).

    Args:
        epsilon (float, optional): allowed imbalance of the vertex weights (row nonzeros) per part.
            (default: :obj:`0.03`)
        backend (str, optional): ``"mtkahypar"`` (MIT) or ``"kahypar"`` (GPLv3, the project's own
            km1 configuration, run in a child process). (default: :obj:`"mtkahypar"`)
        preset (str, optional): Mt-KaHyPar preset; ``"deterministic"`` gives the same partition for a seed.
            (default: :obj:`"deterministic"`)
    """
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    net_ptr, pins = column_nets(edge_index, num_nodes)
    part = run_backend(net_ptr, pins, row_nnz(edge_index, num_nodes), num_nodes, num_parts, epsilon, seed,
                       backend, preset)
    return torch.from_numpy(part)


def run_backend(net_ptr: np.ndarray, pins: np.ndarray, weights: np.ndarray, num_nodes: int, num_parts: int,
                epsilon: float, seed: int, backend: str = "mtkahypar", preset: str = "deterministic",
                net_weights: np.ndarray | None = None) -> np.ndarray:
    """Partitions the hypergraph ``(net_ptr, pins)`` (vertex ``weights``, optional ``net_weights``,
    default 1) for km1 with the chosen backend."""
    if backend == "mtkahypar":
        return _mtkahypar(net_ptr, pins, weights, num_nodes, num_parts, epsilon, seed, preset, net_weights)
    if backend == "kahypar":
        from .kahypar_backend import kahypar_partition
        return kahypar_partition(net_ptr, pins, weights, num_nodes, num_parts, epsilon, seed,
                                 net_weights=net_weights)
    raise ValueError(f"unknown hypergraph backend {backend!r}; available: 'mtkahypar', 'kahypar'")
