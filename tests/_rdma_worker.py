"""Checks of :mod:`pyg_sparsecomm.rdma` run under ``mpiexec -n P`` by tests/rdma/test_rdma.py.

``python _rdma_worker.py [--store STORE] RESULTS [check ...]``: every check asserts on every
rank and returns what it reports; once all of them held on all ranks, rank 0 writes
``{"passed": [names], "info": {...}}`` as JSON to ``RESULTS`` and the job exits 0.
Any failure prints the traceback and aborts the whole MPI job with exit code 1 (so
no peer hangs and the parent sees a failed job, not a missing line).

With ``--store``, the same job then initialises torch.distributed (gloo, file store ``STORE``)
with the MPI ranks and checks ``DistributedGCNConv(algorithm="rdma")`` against PyG's
``GCNConv`` (``tests/_rdma_gcn_checks.py``):

* ``gcn_rdma_equivalence`` — output, input, weight and bias gradients for every graph
  case (including edge weights) and GCNConv option;
* ``gcn_rdma_many_adjacencies`` — more adjacencies alive than the engine cache keeps
  idle (cached=True layers with different edge weights), forward and backward on all
  of them twice, then collective release and eviction.

One job per ``P`` runs both (each MPI process pays the interpreter's start-up, about as much
as all the checks of a small ``P``).
"""
import faulthandler
import json
import os
import sys
import traceback
from datetime import timedelta

import numpy as np
import scipy.sparse as sp
from _rdma_checks import (  # tests/ is sys.path[0] when this file runs as a script
    check_queue_concurrent_pushes,
    check_spmm_and_spgemm,
    check_work_stealing_claims,
    ragged,
)
from mpi4py import MPI
from rdma_measure import measure_get_bandwidth  # benchmarks/ is on PYTHONPATH (tests/rdma/test_rdma.py)

from pyg_sparsecomm.rdma import DenseTiledMatrix, SparseTiledMatrix, TileProcessGrid, spgemm, spmm
from pyg_sparsecomm.rdma.mpi_backend import MPIBackend

be = MPIBackend()
P, RANK = be.world_size, be.rank


def check_spmm() -> dict:
    check_spmm_and_spgemm(be)
    return {"spmm_equals_torch": None, "spgemm_equals_torch": None}


def check_stealing() -> dict:
    return {"work_stealing_each_product_once": {"stolen": check_work_stealing_claims(be)}}


def check_queue() -> dict:
    check_queue_concurrent_pushes(be)
    return {"queue_loses_no_update": None}


def check_errors_and_measure() -> dict:
    X = np.ones((10, 10))
    try:
        DenseTiledMatrix.from_global(be, X, (3, 3), pgrid=TileProcessGrid(P + 1, 1))
        raise AssertionError("a process grid larger than the world must be rejected")
    except ValueError as exc:
        assert "process grid" in str(exc)
    for bad in ((0, 3), (3, -1)):
        try:
            SparseTiledMatrix.from_global(be, sp.eye(10, format="csr"), bad)
            raise AssertionError(f"tile shape {bad} must be rejected")
        except ValueError as exc:
            assert "tile shape" in str(exc)
    A = SparseTiledMatrix.from_global(be, sp.eye(10, format="csr"), (5, 5))
    B = DenseTiledMatrix.from_global(be, X, (5, 5))
    for alg, bad in (("summa", {"prefetch": False}), ("stationary_c", {"combine": True}),
                     ("ws_random", {"victim": "locality"})):
        try:
            spmm(A, B, alg, **bad)
            raise AssertionError(f"{alg} must reject {bad}")
        except ValueError as exc:
            assert f"algorithm {alg!r} does not take option(s) {sorted(bad)}" in str(exc), str(exc)
    for m in (A, B):
        m.free()
    bandwidth = measure_get_bandwidth(be, sizes=(256, 4096), repeats=2)
    assert all(bw > 0 for _, bw in bandwidth)
    return {"errors_and_measure": None}


def check_heap_fallback() -> dict:
    """A tiny symmetric heap: small regions in the heap, large ones in dedicated windows, results unchanged."""
    small = MPIBackend(heap_bytes=256)
    S, (tile, bcols, gcols) = ragged(), ((8, 7), 4, 6)
    X = np.random.default_rng(2).standard_normal((S.shape[1], 5))
    A = SparseTiledMatrix.from_global(small, S, tile)
    B = DenseTiledMatrix.from_global(small, X, (tile[1], bcols))
    Bs = SparseTiledMatrix.from_global(small, sp.csr_matrix(S.T), (tile[1], gcols))
    for name in ("stationary_a", "ws_locality", "summa"):
        res = spmm(A, B, name)
        assert np.allclose(res.C.to_global().numpy(), S @ X, atol=1e-12), name
        res.C.free()
    res = spgemm(A, Bs, "stationary_a")
    assert np.allclose(res.C.to_global().to_dense().numpy(), (S @ S.T).toarray(), atol=1e-12)
    assert small._dedicated and small._heap.high_water > 0, "both allocation paths must be exercised"
    res.C.free()
    for m in (A, B, Bs):
        m.free()
    small.close()
    return {"heap_fallback": None}


CHECKS = {"spmm": check_spmm, "stealing": check_stealing,
          "queue": check_queue, "errors": check_errors_and_measure,
          "heap": check_heap_fallback}

def check_gcn_conv(store: str) -> dict:
    """``DistributedGCNConv(algorithm="rdma")`` == ``GCNConv`` over a gloo group of the MPI ranks."""
    import torch
    import torch.distributed as dist
    from _rdma_gcn_checks import check, check_many_adjacencies

    import pyg_sparsecomm.algorithms.rdma as rdma_algorithm
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=P,
                            timeout=timedelta(seconds=60))
    check(RANK, P)
    check_many_adjacencies(RANK, P)
    rdma_algorithm.free_engines()
    dist.barrier()
    dist.destroy_process_group()
    return {"gcn_rdma_equivalence": None, "gcn_rdma_many_adjacencies": None}


if __name__ == "__main__":
    # a hung rank prints where it hangs before the test's subprocess timeout kills the job
    faulthandler.dump_traceback_later(float(os.environ.get("RDMA_TEST_DUMP_AFTER", "140")), exit=True)
    try:
        args = sys.argv[1:]
        store, args = (args[1], args[2:]) if args[:1] == ["--store"] else (None, args)
        results = {}
        for name in args[1:] or CHECKS:
            results.update(CHECKS[name]())
            be.barrier()  # the check held on every rank
        be.close()  # collective: no window left in use when MPI finalises
        if store is not None:
            results.update(check_gcn_conv(store))
        if RANK == 0:
            with open(args[0], "w") as fh:
                json.dump({"passed": list(results), "info": {k: v for k, v in results.items() if v}}, fh)
    except BaseException:  # noqa: BLE001 -- any failure must abort every rank, or peers hang
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
