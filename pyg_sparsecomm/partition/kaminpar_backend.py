"""``method="kaminpar"``: KaMinPar (MIT, shared-memory multilevel graph partitioning).

Unlike the other methods it is not guaranteed deterministic (see ``threads`` of
:func:`kaminpar_partition_csr`): partition once and share the partition.

KaMinPar partitions graphs of billions of edges on one machine in minutes
(Sanders & Seemaier, ESA'21; TeraPart, 2024); on R-MAT scale 21 (32M edges)
into 64 parts it took 8x less CPU time and 6x less memory than METIS at 0.99x
its total volume (``benchmarks/partition_scale.py``).  Its Python binding reads a
graph only from a file, so the graph goes through a ParHiP binary file written
from numpy (:mod:`.parhip`), never through text.
"""
from __future__ import annotations

import ctypes
import glob
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import numpy as np
import torch
from torch import Tensor

from ..memory import release_free_heap
from . import reductions, sparsify
from ._threads import usable_cores
from .kaminpar_defaults import AUTO, PLAIN_OPTIONS, automatic_options
from .methods import register, row_nnz
from .parhip import write_parhip
from .rebalance import enforce_balance
from .two_level import check_split, max_block_weights, two_level_partition

KAMINPAR_INSTALL_HINT = 'pip install "pyg_sparsecomm[kaminpar]"'
#: TBB's scalable malloc of the kaminpar wheel (``False``: not found), loaded at the first call
_TBBMALLOC: ctypes.CDLL | bool | None = None
#: KaMinPar's threads for a call that names none, set in a block by :func:`default_kaminpar_threads`
#: (``None`` outside: 1 thread, or the cores chosen for a large graph)
_DEFAULT_THREADS: int | None = None


@contextmanager
def default_kaminpar_threads(threads: int) -> Iterator[None]:
    """Within the block, ``method="kaminpar"`` calls that name no ``threads`` run with ``threads``
    (``partition_on_rank_zero`` gives rank 0 the cores the waiting ranks leave); outside, 1 thread
    (:func:`automatic_threads` for a large graph)."""
    global _DEFAULT_THREADS
    before, _DEFAULT_THREADS = _DEFAULT_THREADS, max(1, int(threads))
    try:
        yield
    finally:
        _DEFAULT_THREADS = before


def import_kaminpar():
    """The ``kaminpar`` module, or an ``ImportError`` naming the extra to install."""
    try:
        import kaminpar
    except ImportError as e:
        raise ImportError(f"method='kaminpar' needs KaMinPar (MIT): {KAMINPAR_INSTALL_HINT}") from e
    return kaminpar


def kaminpar_available() -> bool:
    """Whether ``method="kaminpar"`` can run (the ``kaminpar`` package imports)."""
    try:
        import_kaminpar()
    except ImportError:
        return False
    return True


def kaminpar_partition_csr(ptr: np.ndarray, col: np.ndarray, num_nodes: int, num_parts: int, seed: int = 0,
                           vertex_weights: np.ndarray | None = None, preset: str = "default",
                           epsilon: float = 0.03, threads: int | None = None,
                           compress: bool | None = None) -> np.ndarray:
    r"""KaMinPar k-way partition of the symmetrised graph of a CSR topology.

    Minimises the edge cut of the symmetrised graph (self-loops and duplicates removed)
    subject to :math:`\max_k w(V_k) \le \lceil (1 + \epsilon) \lceil w(V) / k \rceil \rceil`: KaMinPar's
    balance is a heuristic's (a part a few nodes over it was seen with two threads), so the bound
    is enforced afterwards by moving nodes out of any part above it (:mod:`.rebalance`).

    Args:
        ptr (np.ndarray): ``[num_nodes + 1]`` CSR row pointers of the graph (either orientation).
        col (np.ndarray): ``[nnz]`` CSR column ids.
        num_nodes (int): :math:`n`.
        num_parts (int): :math:`k`.
        seed (int, optional): KaMinPar's random seed (``kaminpar.reseed``). (default: :obj:`0`)
        vertex_weights (np.ndarray, optional): ``[n]`` positive integers (``None``: unit weights); for balanced compute
            the row nonzeros, ``np.diff(ptr) + 1`` for a CSR of in-edges (rows = targets). (default: :obj:`None`)
        preset (str, optional): KaMinPar's configuration: ``"default"``, ``"fast"``, ``"strong"``, ``"terapart"``
            (memory-efficient: with ``compress=True``), ... (``kaminpar.context_names()``).
            (default: :obj:`"default"`)
        epsilon (float, optional): allowed imbalance :math:`\epsilon` of the vertex weights. (default: :obj:`0.03`)
        threads (int, optional): KaMinPar's threads (``None``: 1, or what :func:`default_kaminpar_threads` set, e.g.
            rank 0's usable cores under ``partition_on_rank_zero``).  With one thread equal seeds gave
            equal partitions in 25 of 26 test processes (one unexplained mismatch); with more, its
            parallel label propagation and refinement depend on the threads' timing.  Partition once
            and share the result (``partition_and_shard`` does, on rank 0) rather than on every rank.
            (default: :obj:`None`)
        compress (bool, optional): let KaMinPar compress the graph while loading it (TeraPart's graph compression:
            less memory, somewhat slower).  ``None``: only for the ``"terapart*"`` presets, which
            need it (KaMinPar 3.7 crashes the process on an uncompressed graph with them). (default: :obj:`None`)

    Returns:
        ``int64[n]``, the part of every node.
    """
    threads, compress = _check_settings(import_kaminpar(), preset, epsilon, threads, compress)
    if num_parts == 1 or num_nodes == 0:
        return np.zeros(num_nodes, dtype=np.int64)
    rows = np.repeat(np.arange(num_nodes, dtype=np.asarray(col).dtype), np.diff(ptr))
    part = _partition_edges([rows, col], num_nodes, num_parts, vertex_weights, seed, preset, epsilon, threads,
                            compress)
    return enforce_balance(rows, col, part, vertex_weights, num_parts, epsilon)


def partition_parhip_file(path: str, num_parts: int, seed: int, preset: str, epsilon: float, threads: int,
                          compress: bool, max_block_weights: np.ndarray | None = None) -> np.ndarray:
    """KaMinPar's partition (``int64[n]``) of the graph in the ParHiP file ``path`` (settings checked):
    into ``num_parts`` blocks of imbalance ``epsilon``, or, given ``max_block_weights`` (``[num_parts]``),
    of at most those weights."""
    kaminpar = import_kaminpar()
    release_free_heap()  # the freed pages of the file's writing, before KaMinPar allocates
    graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP, compress=compress)
    kaminpar.reseed(int(seed))
    solver = kaminpar.KaMinPar(int(threads), kaminpar.context_by_name(preset))
    if max_block_weights is None:
        part = solver.compute_partition(graph, int(num_parts), float(epsilon))
    else:
        part = solver.compute_partition(graph, [int(w) for w in max_block_weights])
    del graph, solver
    _release_tbb_buffers()
    return np.asarray(part, dtype=np.int64)


def _release_tbb_buffers() -> None:
    """Returns the memory KaMinPar's allocator (TBB's scalable malloc, bundled with its wheel) keeps
    in its buffers after a call (20-30 MB of R-MAT scale 21), so that the next steps of a two-level
    partition do not start above it; a no-op where that library is not found."""
    global _TBBMALLOC
    if _TBBMALLOC is None:
        import kaminpar
        found = glob.glob(os.path.join(os.path.dirname(os.path.dirname(kaminpar.__file__)), "kaminpar.libs",
                                       "libtbbmalloc-*.so*"))
        _TBBMALLOC = ctypes.CDLL(found[0]) if found else False
    if isinstance(_TBBMALLOC, ctypes.CDLL):
        _TBBMALLOC.scalable_allocation_command(0, None)  # TBBMALLOC_CLEAN_ALL_BUFFERS


def _check_settings(kaminpar, preset: str, epsilon: float, threads: int | None,
                    compress: bool | None) -> tuple[int, bool]:
    """Raises on settings KaMinPar would reject or crash on; returns ``threads`` and ``compress``
    resolved."""
    threads = (_DEFAULT_THREADS or 1) if threads is None else threads
    names = kaminpar.context_names()
    if preset not in names:
        raise ValueError(f"unknown KaMinPar preset {preset!r}; choose one of {sorted(names)}")
    if preset.startswith("terapart") and compress is False:
        raise ValueError(f"KaMinPar preset {preset!r} partitions compressed graphs only (on an "
                         f"uncompressed one KaMinPar crashes the process): pass compress=True or leave "
                         f"compress unset")
    if compress is not None and not isinstance(compress, bool):
        raise ValueError(f"compress must be True, False, None or 'auto', got {compress!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0 (allowed imbalance), got {epsilon!r}")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return threads, preset.startswith("terapart") if compress is None else bool(compress)


@register("kaminpar", int32_ids=True)  # partition_files' int32 edges: no int64 copy
def kaminpar_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int,
                       preset: str = "default", epsilon: float = 0.03, threads: int | None | str = AUTO,
                       compress: bool | None | str = AUTO, split: int | list[int] | None | str = AUTO,
                       fold_leaves: bool | str = AUTO, sample_degree: int | None | str = AUTO) -> Tensor:
    r"""KaMinPar k-way partition of the symmetrised graph, vertex weight = nonzeros of the row
    (in-degree + 1, as METIS gets), so parts get balanced compute; see :func:`kaminpar_partition_csr`
    for the options (and for how far equal seeds give equal partitions).

    ``threads``, ``compress``, ``split``, ``fold_leaves`` and ``sample_degree`` not named (or
    ``"auto"``) are chosen from the graph's size and degrees (:mod:`.kaminpar_defaults`): below 1M
    edges they keep the values they had before (1 thread, ``compress`` only for the ``"terapart"``
    presets, ``split=None``, ``fold_leaves=False``, ``sample_degree=None``: ``**PLAIN_OPTIONS``), so
    the partitions are the same; from 1M edges ``fold_leaves`` and ``sample_degree`` switch on where
    the graph has many low-degree nodes and hubs, from 8M ``threads`` (:func:`automatic_threads`),
    ``compress`` and ``split``; an :class:`~.kaminpar_defaults.AutomaticOptionsWarning` says what was
    chosen and why.  A named option, ``None`` or ``False`` included, is kept.

    ``split``: partition into ``split`` groups first, then each group's induced subgraph into its
    share of the parts (:mod:`.two_level`): KaMinPar's memory grows with the parts of a call, so this
    bounds the peak when a partition into ``num_parts`` at once does not fit in memory (e.g. 1024
    parts of a 263M-edge graph on 24 GB: ``split=64``).  A list ``[g1, g2, ...]`` splits every group
    again by ``[g2, ...]`` before the last level (:func:`.two_level.two_level_partition`): KaMinPar's
    calls then get fewer parts and smaller graphs (R-MAT scale 21 into 64 parts with
    ``compress=True, fold_leaves=True, split=[2, 2]``: 1.6x the CSR topology).  ``None``: all parts
    at once.

    ``fold_leaves``: KaMinPar gets the graph with its leaves (one neighbour) folded into their
    neighbour and its isolated nodes of weight 1 left out, placed afterwards where the parts have
    room (:mod:`.reductions`: no cut edge is lost by either).  Less memory and time for large graphs
    with many such nodes (R-MAT scale 21: 54 % of the nodes, at the same volume); on small ones
    (Cora, CiteSeer) KaMinPar's partitions of the folded graph had 1-10 % more volume.

    ``sample_degree`` :math:`\tau`: KaMinPar gets a sample of the edges, each :math:`\{u, v\}` kept with
    probability :math:`\min(1, \tau / d_u) \min(1, \tau / d_v)` (:mod:`.sparsify`, seeded by ``seed``): a
    hub keeps about :math:`\tau` edges, a graph without nodes of degree above :math:`\tau` all of them.
    A hub's row is read by nearly every part anyway, so its edges guide the partition little while
    they are most of a power-law graph's edges.  The nodes the sample leaves without an edge are then
    moved to the part holding most of their neighbours, within the parts' bounds.  R-MAT scale 21
    into 64 parts with ``compress=True, split=2, fold_leaves=True, sample_degree=384`` (10M of 32.4M
    edges kept): 27-33 s on 2 cores, 1.7-1.9x the CSR topology, 0.996-0.999x METIS's total volume
    (``benchmarks/RESULTS.md``).  On small graphs it only costs volume (Cora, :math:`\tau` = 64:
    0.5-9 % more).  :math:`d` counts edge ends: an edge list with both directions of every edge (PyG's
    undirected graphs) counts each neighbour twice.  With ``split`` every call samples its own
    subgraph.  ``None``: all edges."""
    kaminpar = import_kaminpar()
    src, dst = edge_index.numpy()
    options, degree = _chosen_options(src, dst, num_nodes, num_parts, preset, {
        "threads": threads, "compress": compress, "split": split, "fold_leaves": fold_leaves,
        "sample_degree": sample_degree})
    threads, compress = _check_settings(kaminpar, preset, epsilon, options["threads"], options["compress"])
    groups = check_split(options["split"], num_parts)
    fold = options["fold_leaves"]
    if not isinstance(fold, bool):
        raise ValueError(f"fold_leaves must be True, False or 'auto', got {fold!r}")
    tau = options["sample_degree"]
    tau = None if tau is None else sparsify.check_max_degree(tau, "sample_degree")
    if num_parts == 1 or num_nodes == 0:
        return torch.zeros(num_nodes, dtype=torch.long)
    weights = row_nnz(edge_index, num_nodes)
    # the first call partitions the whole graph (also with split: its first level) and takes the degrees
    block_partition = partial(_partition_edges, seed=seed, preset=preset, epsilon=epsilon, threads=threads,
                              compress=compress, fold=fold, sample_degree=tau,
                              known_degree=[] if degree is None else [degree])
    del degree  # the sample drops it once used: not held through KaMinPar's calls
    if groups is None:
        part = block_partition([src, dst], num_nodes, num_parts, weights)
    else:
        part = two_level_partition(src, dst, num_nodes, num_parts, list(groups), weights, epsilon, block_partition)
    # KaMinPar's balance is a heuristic's and the levels round: the bound documented is enforced here
    return torch.from_numpy(enforce_balance(src, dst, part, weights, num_parts, epsilon))


def _chosen_options(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int, preset: str,
                    options: dict) -> tuple[dict, np.ndarray | None]:
    """``options`` with every ``"auto"`` one chosen from the graph (:mod:`.kaminpar_defaults`; the
    plain value where nothing is partitioned), and the edge degrees computed for the choice."""
    if num_parts == 1 or num_nodes == 0 or not any(_is_auto(v) for v in options.values()):
        return {k: PLAIN_OPTIONS[k] if _is_auto(v) else v for k, v in options.items()}, None
    degree = sparsify.edge_degrees(src, dst, num_nodes)
    chosen = automatic_options(degree, len(src), num_parts, {**options, "preset": preset}, *automatic_threads())
    return {k: chosen[k] for k in options}, degree


def _is_auto(value: object) -> bool:
    return isinstance(value, str) and value == AUTO


def automatic_threads() -> tuple[int, str]:
    """KaMinPar's threads on a large graph whose caller names no ``threads``, and why: the count of
    a :func:`default_kaminpar_threads` block (rank 0's cores under ``partition_on_rank_zero``); 1 in
    a job of several ranks, which may each partition the graph (with more threads KaMinPar's
    partitions differ from run to run); else the cores this process may use."""
    if _DEFAULT_THREADS is not None:
        return _DEFAULT_THREADS, (f"{_DEFAULT_THREADS} thread(s), the count set for this block "
                                  f"(partition_on_rank_zero: rank 0's cores)")
    import torch.distributed as dist
    ranks = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if ranks > 1:
        return 1, f"1 thread: this process is one of {ranks} ranks, which may each partition the graph, and " \
                  f"KaMinPar's partitions with more threads differ from run to run (partition_on_rank_zero " \
                  f"partitions on rank 0 with its cores)"
    cores = usable_cores()
    return cores, f"{cores} thread(s), the cores this process may use"


def _partition_edges(edges: list[np.ndarray], num_nodes: int, blocks: int | np.ndarray,
                     vertex_weights: np.ndarray | None, seed: int, preset: str, epsilon: float, threads: int,
                     compress: bool, fold: bool = False, sample_degree: int | None = None,
                     known_degree: list[np.ndarray] | None = None) -> np.ndarray:
    """KaMinPar's partition of the edges ``[src, dst]`` (through a ParHiP file; the list emptied, so
    that edges nobody else holds are freed once sampled or written): into ``blocks``
    parts of imbalance ``epsilon``, or, ``blocks`` an array, into parts of at most those weights;
    ``fold``: of the graph with its leaves folded and its isolated nodes placed afterwards
    (:mod:`.reductions`); ``sample_degree``: of the degree-capped sample of the edges, the nodes it
    strands then placed by their neighbours (:mod:`.sparsify`; ``known_degree``: a list holding the
    edges' :func:`~.sparsify.edge_degrees` if the caller has them, emptied here, so that they are
    not held while KaMinPar runs).  Drops its references to the edges once the file is written."""
    src, dst = edges
    edges.clear()
    stranded = None
    degree = known_degree.pop() if known_degree else None
    if sample_degree is not None:
        src, dst, stranded = sparsify.sample_graph(src, dst, num_nodes, sample_degree, seed, degree)
    del degree
    total = num_nodes if vertex_weights is None else int(np.sum(vertex_weights, dtype=np.int64))
    bounds = max_block_weights(total, np.ones(blocks, dtype=np.int64), blocks, epsilon) \
        if isinstance(blocks, int) else blocks  # what folding and stranded nodes are placed within
    num_blocks, caps = (blocks, None) if isinstance(blocks, int) and not fold else (len(bounds), bounds)
    folding = reductions.fold_leaves(src, dst, num_nodes, vertex_weights) if fold else None
    n, weights, node_map = ((num_nodes, vertex_weights, None) if folding is None
                            else (folding.num_nodes, folding.weights, folding.node_map))
    part = np.zeros(0, dtype=np.int64)
    with tempfile.TemporaryDirectory(prefix="pyg_sparsecomm_kaminpar_") as tmp:
        path = os.path.join(tmp, "graph.parhip")
        release_free_heap()  # the sample's and the fold's freed pages, before the writer allocates
        write_parhip(path, src, dst, n, weights, node_map=node_map)
        del src, dst
        if n:  # a folded graph can be empty: isolated nodes only
            part = partition_parhip_file(path, num_blocks, seed, preset, epsilon, threads, compress, caps)
    if folding is not None:
        part = folding.unfold(part, bounds, vertex_weights)
    return part if stranded is None else stranded.place(part, vertex_weights, bounds)
