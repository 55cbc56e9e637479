"""Partitioning methods: each maps a graph to a ``part`` vector in ``[0, num_parts)``.

A method is a function ``(edge_index, num_nodes, num_parts, seed, **options) -> LongTensor``
registered in :data:`METHODS` with ``@register(name)``; adding a method touches
one file (and its import in ``partition/__init__.py``).  All
methods but ``"kaminpar"`` are deterministic for a fixed seed, so every rank of a job computing
the partition independently gets the same answer.
"""
import inspect
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

PartitionMethod = Callable[..., Tensor]
METHODS: dict[str, PartitionMethod] = {}
#: what to install for METIS (``method="metis"`` and the multi-constraint balancing)
METIS_INSTALL_HINT = 'pip install "pyg_sparsecomm[metis]"'
# Arguments every method takes; the rest of a method's signature are its options.
_FIXED_PARAMS = ("edge_index", "num_nodes", "num_parts", "seed")


def base_method(name: str) -> str:
    """The partitioning method of ``name``: ``"metis"`` for ``"metis+vb"`` (balanced) and ``"metis"``."""
    return name[:-3] if name.endswith("+vb") else name


def method_options(name: str) -> list[str]:
    """Option names of method ``name`` (or of its ``"+vb"`` form); ``[]`` for unknown names."""
    fn = METHODS.get(base_method(name))
    return [] if fn is None else [p for p in inspect.signature(fn).parameters if p not in _FIXED_PARAMS]


#: methods that never read ``edge_index`` (the out-of-core writer then never reads the edges whole, and
#: ``SparsityAwarePartitioner.assign`` does not widen ``int32`` ids for them)
EDGE_FREE_METHODS: set[str] = set()


#: methods that read ``int32`` ids as they are (``SparsityAwarePartitioner.assign`` widens them to
#: ``int64`` for the others): ``partition_files`` reads the edges as ``int32`` below :math:`2^{31}` nodes
INT32_METHODS: set[str] = set()


def register(name: str, reads_edges: bool = True, int32_ids: bool = False):
    """A decorator that registers a partitioning method ``fn(edge_index, num_nodes, num_parts, seed)
    -> part`` under ``name`` in :data:`METHODS` (``SparsityAwarePartitioner(method=name)``).

    Args:
        name (str): the method's name.
        reads_edges (bool, optional): the method reads the edges (``False``: ``"random"``,
            ``"contiguous"``; they are then never loaded for it). (default: :obj:`True`)
        int32_ids (bool, optional): the method takes ``int32`` ids as they are (:data:`INT32_METHODS`).
            (default: :obj:`False`)
    """
    def wrap(fn: PartitionMethod) -> PartitionMethod:
        METHODS[name] = fn
        if not reads_edges:
            EDGE_FREE_METHODS.add(name)
        if int32_ids:
            INT32_METHODS.add(name)
        return fn
    return wrap


@register("random", reads_edges=False)
def random_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int) -> Tensor:
    """Balanced random assignment: a seeded permutation dealt round-robin."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_nodes, generator=gen)
    part = torch.empty(num_nodes, dtype=torch.long)
    part[perm] = torch.arange(num_nodes) % num_parts
    return part


@register("contiguous", reads_edges=False)
def contiguous_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int) -> Tensor:
    """Consecutive id ranges of (almost) equal size, the layout of CAGNET's 1D."""
    return torch.arange(num_nodes) * num_parts // max(num_nodes, 1)


def row_nnz(edge_index: Tensor, num_nodes: int) -> np.ndarray:
    """Nonzeros of every row of the GCN matrix (in-edges plus the self-loop)."""
    return np.bincount(edge_index[1].numpy(), minlength=num_nodes) + 1


def csr_ptr(index: np.ndarray, size: int) -> np.ndarray:
    """CSR pointer over ``size`` rows, ``index`` holding the row of every entry: row ``k`` has
    ``ptr[k + 1] - ptr[k]`` entries (``index`` sorted: they are ``ptr[k]:ptr[k + 1]``)."""
    return np.concatenate([[0], np.cumsum(np.bincount(index, minlength=size))]).astype(np.int64)


def symmetric_csr(edge_index: Tensor, num_nodes: int):
    """Symmetrised adjacency without self-loops or duplicates, as METIS requires."""
    src, dst = edge_index.numpy()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = np.unique(np.concatenate([src * num_nodes + dst, dst * num_nodes + src]))
    rows, cols = key // num_nodes, key % num_nodes
    return csr_ptr(rows, num_nodes), cols.astype(np.int64)


@register("metis")
def metis_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int,
                    objective: str = "cut") -> Tensor:
    """METIS k-way partition of the symmetrised graph (self-loops and duplicates removed).

    Vertex weight = nonzeros of the row (the SpMM's work for that row), as in
    the VLDB'23 and ICPP'24 papers, so parts get balanced compute rather than
    balanced node counts.  ``objective="cut"`` minimises the edge cut (METIS's
    default), ``"vol"`` METIS's total communication volume objective.

    ``seed`` is METIS's random seed (``METIS_OPTION_SEED``; ``pymetis`` puts it
    in the slot of the ``metis.h`` it was built with).  Equal seeds give equal
    partitions.  The METIS that ``pymetis`` builds seeds libc's ``srand``, and
    glibc treats seed 0 as 1, so on Linux seeds 0 and 1 give the same partition:
    use seeds 1, 2, ... for independent runs.
    """
    try:
        import pymetis
    except ImportError as e:
        raise ImportError(f"method='metis' needs pymetis: {METIS_INSTALL_HINT}") from e
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    xadj, adjncy = symmetric_csr(edge_index, num_nodes)
    objectives = {"cut": pymetis.ObjType.CUT, "vol": pymetis.ObjType.VOL}
    if objective not in objectives:
        raise ValueError(f"unknown METIS objective {objective!r}; choose 'cut' or 'vol'")
    opts = pymetis.Options(seed=seed, objtype=int(objectives[objective]))
    # pymetis bisects recursively below 8 parts, which has no volume objective: use k-way there.
    _, membership = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy),
                                       vweights=row_nnz(edge_index, num_nodes), options=opts,
                                       recursive=False if objective == "vol" else None)
    return torch.as_tensor(np.asarray(membership), dtype=torch.long)
