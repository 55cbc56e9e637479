"""A graph's edge list as the plan's passes read it: node ids as numpy arrays without copies, in
chunks of at most :data:`EDGE_CHUNK` edges (in memory, or from the out-of-core writer's files)."""
from collections.abc import Callable, Iterable

import numpy as np
from torch import Tensor


def numpy_long(t) -> np.ndarray:
    if isinstance(t, Tensor):
        return t.detach().cpu().numpy().astype(np.int64, copy=False)
    return np.asarray(t, dtype=np.int64)


def numpy_ids(t) -> np.ndarray:
    """The ids of ``t`` as a numpy array without a copy when they are ``int32`` or ``int64`` (an
    ``int32`` graph, a block of an edge file), so callers widen one chunk at a time; any other
    dtype or byte order becomes native ``int64``."""
    out = t.detach().cpu().numpy() if isinstance(t, Tensor) else np.asarray(t)
    return out if out.dtype in (np.int32, np.int64) else out.astype(np.int64)


#: ``chunks(step)``: ``(edge ids, sources, targets)`` of every run of at most ``step`` edges of a
#: graph, in edge order: ``int64`` positions in the graph's edge list, node ids as ``int32`` or
#: ``int64``; what the passes over the edges read (:func:`edge_chunks` of a graph in memory, the
#: out-of-core writer's edge files, or a part's in-edges grouped in a scratch file)
EdgeChunks = Callable[[int], Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]]


def edge_chunks(edge_index) -> EdgeChunks:
    """The :data:`EdgeChunks` of a ``[2, E]`` ``edge_index`` in memory (node ids as views)."""
    src, dst = numpy_ids(edge_index)

    def chunks(step: int) -> Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for a in range(0, src.size, step):
            yield np.arange(a, min(a + step, src.size), dtype=np.int64), src[a:a + step], dst[a:a + step]
    return chunks


#: edges per step of :func:`~pyg_sparsecomm.plan.homogeneous.comm_pattern`'s and
#: :func:`~pyg_sparsecomm.plan.homogeneous.local_edges`' passes: their working arrays are
#: about 80 bytes per edge of a step (40 MB) (plus the pairs found), not per edge of the graph
EDGE_CHUNK = 1 << 19
