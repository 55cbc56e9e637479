"""Multi-constraint METIS: ``METIS_PartGraphKway`` with several vertex weights, through ``ctypes``.

``pymetis`` exposes a single balance constraint only; the send-balanced
restarts of the balancing (:func:`.balance.balance_max_send`) need two
(compute and send volume).  :func:`metis_multiconstraint` therefore calls
``METIS_PartGraphKway`` in the library that ``pymetis`` ships (its extension
module exports it).  The option slots come from ``pymetis`` (compiled from the
``metis.h`` it was built with: METIS 5.1 and 5.2 number them differently), and
the library is checked once against the ABI the calls assume
(:func:`_check_abi`).  The private names of pymetis this reads are accessors of
:mod:`pyg_sparsecomm.compat`; without pymetis, the first call raises an
``ImportError`` naming the ``metis`` extra.
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from ..compat import metis_idx_type_width, metis_library_path, metis_option_slot
from .methods import METIS_INSTALL_HINT

# the ABI of the METIS pymetis builds (64-bit idx_t, 32-bit real_t); checked by _check_abi on first use
_IDX, _REAL = np.int64, np.float32
_METIS_NOPTIONS, _METIS_OK = 40, 1
_LIB = None
# ABI probe: two triangles {0, 1, 2} and {3, 4, 5} joined by the edge 2-3; the only 2-way split
# with edge cut 1 separates the triangles
_PROBE_XADJ = (0, 2, 4, 7, 10, 12, 14)
_PROBE_ADJNCY = (1, 2, 0, 2, 0, 1, 3, 2, 4, 5, 3, 5, 3, 4)


def _metis():
    """The METIS in ``pymetis``'s extension module, loaded and ABI-checked once (the result is cached)."""
    global _LIB
    if _LIB is None:
        try:
            path = metis_library_path()
        except ImportError as e:
            raise ImportError(f"multi-constraint METIS ('+vb' balancing) needs pymetis: {METIS_INSTALL_HINT}") from e
        lib = ctypes.CDLL(path)
        lib.METIS_PartGraphKway.restype = ctypes.c_int
        width = metis_idx_type_width()
        _check_abi(lib, path, None if width is None else lambda: width)
        _LIB = lib
    return _LIB


def _part_graph_kway(lib, xadj, adjncy, vwgt, ncon, nparts, ubvec, options):
    """``METIS_PartGraphKway`` on arrays already in the ABI's dtypes; returns ``(status, edge cut/volume, part)``."""
    n = len(xadj) - 1
    part, objval = np.full(n, -1, dtype=_IDX), np.zeros(1, dtype=_IDX)
    scalars = [np.array([x], dtype=_IDX) for x in (n, ncon, nparts)]

    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    status = lib.METIS_PartGraphKway(ptr(scalars[0]), ptr(scalars[1]), ptr(xadj), ptr(adjncy), ptr(vwgt),
                                     None, None, ptr(scalars[2]), None, ptr(ubvec), ptr(options),
                                     ptr(objval), ptr(part))
    return status, int(objval[0]), part


def _check_abi(lib, path: str, idx_type_width=None) -> None:
    """Raise ``RuntimeError`` unless ``lib`` takes 64-bit ``idx_t`` and 32-bit ``real_t``.

    pymetis >= 2025.2.1 reports its ``idx_t`` width; with any pymetis, a 2-way
    partition of a 6-vertex probe graph must come back as the known split.  The
    probe's buffers are built so that a mismatched METIS rejects them in its
    parameter check, before it reads the graph or writes the output:

    * 32-bit ``idx_t``: METIS reads each 64-bit option as two 32-bit ones, so the
      high half of slot 0 (``PTYPE``, unread by ``METIS_PartGraphKway``; ``PTYPE``
      and ``OBJTYPE`` are the first two slots in every METIS 5) becomes the
      objective type; we put 7 there, not a valid objective -> ``METIS_ERROR_INPUT``.
    * 64-bit ``real_t``: METIS reads the two float32 ``1.5`` as one double
      (0.125), an imbalance tolerance below 1 -> ``METIS_ERROR_INPUT``; the
      second entry keeps that 8-byte read inside the buffer.
    """
    expected = f"64-bit idx_t and 32-bit real_t (as the pymetis wheels build METIS), the ABI {__name__} calls it with"
    if idx_type_width is not None and idx_type_width() != 8 * np.dtype(_IDX).itemsize:
        raise RuntimeError(f"METIS in {path} was built with {idx_type_width()}-bit idx_t, not the {expected}; "
                           f"multi-constraint METIS ('+vb' balancing) cannot use this pymetis build")
    options = np.full(_METIS_NOPTIONS, -1, dtype=_IDX)
    options[0] = (7 << 32) | 0xFFFFFFFF  # low half -1 (PTYPE default), high half 7 (bad OBJTYPE if 32-bit)
    xadj, adjncy = np.array(_PROBE_XADJ, dtype=_IDX), np.array(_PROBE_ADJNCY, dtype=_IDX)
    status, cut, part = _part_graph_kway(lib, xadj, adjncy, np.ones(6, dtype=_IDX), 1, 2,
                                         np.full(2, 1.5, dtype=_REAL), options)
    sides = sorted([tuple(part[:3].tolist()), tuple(part[3:].tolist())])
    if status != _METIS_OK or cut != 1 or sides != [(0, 0, 0), (1, 1, 1)]:
        raise RuntimeError(f"METIS in {path} does not take the {expected}: a 2-way partition of a 6-vertex "
                           f"probe graph returned status {status}, edge cut {cut}, parts {part.tolist()} "
                           f"(expected status 1, cut 1, two triangles); multi-constraint METIS ('+vb' "
                           f"balancing) cannot use this pymetis build")


def metis_multiconstraint(xadj: np.ndarray, adjncy: np.ndarray, vertex_weights: np.ndarray, num_parts: int,
                          tolerances: Sequence[float], seed: int = 0, objective: str = "cut") -> np.ndarray | None:
    """METIS k-way partition balancing every column of ``vertex_weights`` (``[N, ncon]``).

    ``tolerances[c]`` is the allowed max/avg of constraint ``c``.  ``seed`` 0
    leaves METIS's default seed (so it reproduces earlier releases' output, and
    differs from seed 1: METIS seeds libc's ``srand``, where glibc treats 0 as
    1); any other value is passed as ``METIS_OPTION_SEED``.  Equal seeds give
    equal partitions.  Returns ``None`` when METIS reports an error (the caller
    keeps its partition).
    """
    lib = _metis()
    ncon = vertex_weights.shape[1]
    xadj_, adjncy_, vwgt_ = (np.ascontiguousarray(a, dtype=_IDX) for a in (xadj, adjncy, vertex_weights.reshape(-1)))
    options = np.full(_METIS_NOPTIONS, -1, dtype=_IDX)
    if seed != 0:
        options[metis_option_slot("SEED")] = seed
    options[metis_option_slot("OBJTYPE")] = {"cut": 0, "vol": 1}[objective]
    status, _, part = _part_graph_kway(lib, xadj_, adjncy_, vwgt_, ncon, num_parts, np.asarray(tolerances, dtype=_REAL),
                                       options)
    return part.astype(np.int64) if status == _METIS_OK else None
