"""Checks of :mod:`pyg_sparsecomm.rdma` run under ``mpiexec -n N`` by tests/rdma/test_rdma.py.

``python _rdma_worker.py [--store STORE] [--sizes 4,3,2,1] RESULTS [check ...]``: the ``N`` ranks
run every check at every world size ``P`` of ``--sizes`` (default: ``N`` only), each ``P`` on a
communicator of its own split from ``COMM_WORLD`` (:func:`phases`: sizes that fit side by side run
at the same time, e.g. P = 3 and P = 1 on 4 ranks; a rank without a group waits without polling).
Every check asserts on every rank of its group and returns what it reports; once all of them held
everywhere, rank 0 writes ``{"P": {"passed": [names], "info": {...}}}`` as JSON to ``RESULTS``
and the job exits 0.  Any failure prints the traceback and aborts the whole MPI job with exit
code 1 (so no peer hangs and the parent sees a failed job, not a missing line).

With ``--store``, each group then initialises torch.distributed (gloo, file store
``STORE-P<P>``) with its ranks, runs the engines on an ``MPIBackend`` of its communicator and
checks ``DistributedGCNConv(algorithm="rdma")`` against PyG's ``GCNConv``
(``tests/_rdma_gcn_checks.py``):

* ``gcn_rdma_equivalence`` — output, input, weight and bias gradients for every graph
  case (including edge weights) and GCNConv option;
* ``gcn_rdma_many_adjacencies`` — more adjacencies alive than the engine cache keeps
  idle (cached=True layers with different edge weights), forward and backward on all
  of them twice, then collective release and eviction.

One job runs every ``P``: each MPI process pays the interpreter's start-up (torch and PyG,
about as much as all the checks of a small ``P``) once, not once per ``P``.
"""
import faulthandler
import gc
import json
import os
import sys
import time
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


def check_spmm(be: MPIBackend) -> dict:
    check_spmm_and_spgemm(be)
    return {"spmm_equals_torch": None, "spgemm_equals_torch": None}


def check_stealing(be: MPIBackend) -> dict:
    return {"work_stealing_each_product_once": {"stolen": check_work_stealing_claims(be)}}


def check_queue(be: MPIBackend) -> dict:
    check_queue_concurrent_pushes(be)
    return {"queue_loses_no_update": None}


def check_errors_and_measure(be: MPIBackend) -> dict:
    X = np.ones((10, 10))
    try:
        DenseTiledMatrix.from_global(be, X, (3, 3), pgrid=TileProcessGrid(be.world_size + 1, 1))
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


def check_heap_fallback(be: MPIBackend) -> dict:
    """A tiny symmetric heap: small regions in the heap, large ones in dedicated windows, results unchanged."""
    small = MPIBackend(be.comm, heap_bytes=256)
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


def check_gcn_conv(comm, store: str) -> dict:
    """``DistributedGCNConv(algorithm="rdma")`` == ``GCNConv`` over a gloo group of ``comm``'s ranks,
    the engines on an ``MPIBackend`` of ``comm``."""
    import torch
    import torch.distributed as dist
    from _rdma_gcn_checks import check, check_many_adjacencies

    import pyg_sparsecomm.algorithms.rdma as rdma_algorithm
    from pyg_sparsecomm.rdma import engine_cache
    torch.set_num_threads(1)
    rank, world_size = comm.Get_rank(), comm.Get_size()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    rdma_algorithm.set_backend(MPIBackend(comm))
    check(rank, world_size)
    check_many_adjacencies(rank, world_size)
    rdma_algorithm.free_engines()
    engine_cache.backend().close()  # collective over comm: its windows go before the communicator does
    dist.barrier()
    dist.destroy_process_group()
    return {"gcn_rdma_equivalence": None, "gcn_rdma_many_adjacencies": None}


def run_checks(comm, names, store: str | None) -> dict:
    """Every check in ``names`` (then, with ``store``, the GCN checks) on the ranks of ``comm``."""
    be = MPIBackend(comm)
    results = {}
    for name in names:
        results.update(CHECKS[name](be))
        be.barrier()  # the check held on every rank
    be.close()  # collective: no window left in use when the communicator or MPI goes
    if store is not None:
        results.update(check_gcn_conv(comm, store))
    return results


def phases(world: int, sizes: list[int]) -> list[list[int]]:
    """World sizes packed into rounds that fit side by side on ``world`` ranks (largest first)."""
    rounds: list[list[int]] = []
    for P in sorted(sizes, reverse=True):
        if P > world:
            raise ValueError(f"world size {P} needs more than the job's {world} ranks")
        fits = next((r for r in rounds if sum(r) + P <= world), None)
        fits.append(P) if fits is not None else rounds.append([P])
    return rounds


def quiet_barrier(comm) -> None:
    """A barrier that sleeps while it waits (MPI's blocking one polls a core that another rank needs)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(1e-3)


def run_sizes(sizes: list[int], names, store: str | None) -> dict:
    """``{P: {"passed": [...], "info": {...}}}`` for every ``P`` in ``sizes``, as seen by world rank 0."""
    world = MPI.COMM_WORLD
    mine: dict = {}
    for group_sizes in phases(world.Get_size(), sizes):
        starts = np.cumsum([0, *group_sizes])
        color = next((g for g in range(len(group_sizes)) if starts[g] <= world.Get_rank() < starts[g + 1]),
                     MPI.UNDEFINED)
        comm = world.Split(color, world.Get_rank())
        if comm != MPI.COMM_NULL:
            P = comm.Get_size()
            results = run_checks(comm, names, None if store is None else f"{store}-P{P}")
            if comm.Get_rank() == 0:
                mine[P] = {"passed": list(results), "info": {k: v for k, v in results.items() if v}}
            comm.Free()
        quiet_barrier(world)
    everyone = world.gather(mine, root=0)
    return {P: out for part in everyone or [] for P, out in part.items()}


if __name__ == "__main__":
    # a hung rank prints where it hangs before the test's subprocess timeout kills the job
    faulthandler.dump_traceback_later(float(os.environ.get("RDMA_TEST_DUMP_AFTER", "140")), exit=True)
    # what the imports made (torch, PyG: millions of objects) is out of the collector's reach, as in
    # pyg_sparsecomm.testing.processes's workers: the engine cache's full collections (one per layer close(),
    # 0.6 s each otherwise) still collect everything the checks make
    gc.freeze()
    try:
        args = sys.argv[1:]
        store, args = (args[1], args[2:]) if args[:1] == ["--store"] else (None, args)
        sizes, args = ([int(P) for P in args[1].split(",")], args[2:]) if args[:1] == ["--sizes"] \
            else ([MPI.COMM_WORLD.Get_size()], args)
        results = run_sizes(sizes, args[1:] or list(CHECKS), store)
        if MPI.COMM_WORLD.Get_rank() == 0:
            with open(args[0], "w") as fh:
                json.dump(results, fh)
        gc.unfreeze()  # the interpreter's exit frees what it imported (nanobind reports leaks otherwise)
    except BaseException:  # noqa: BLE001 -- any failure must abort every rank, or peers hang
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
