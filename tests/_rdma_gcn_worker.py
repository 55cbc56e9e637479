"""``DistributedGCNConv(algorithm="rdma")`` == PyG ``GCNConv`` under ``mpiexec -n P`` (run by tests/rdma/test_rdma.py).

``python _rdma_gcn_worker.py STORE RESULTS``: torch.distributed (gloo, file store
``STORE``) is initialised with the MPI ranks.  Once every check held on every rank,
rank 0 writes ``{"passed": [names]}`` as JSON to ``RESULTS``; any failure aborts the
job with exit code 1.  Checks:

* ``gcn_rdma_equivalence`` — output, input, weight and bias gradients for every graph
  case (including edge weights) and GCNConv option;
* ``gcn_rdma_many_adjacencies`` — more adjacencies alive than the engine cache keeps
  idle (cached=True layers with different edge weights), forward and backward on all
  of them twice, then collective release and eviction.
"""
import faulthandler
import json
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from _rdma_gcn_checks import check, check_many_adjacencies  # tests/ is sys.path[0] when run as a script
from mpi4py import MPI

import pyg_sparsecomm.algorithms.rdma as rdma_algorithm

if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    # a hung rank prints where it hangs before the test's subprocess timeout kills the job
    faulthandler.dump_traceback_later(float(os.environ.get("RDMA_TEST_DUMP_AFTER", "100")), exit=True)
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=comm.rank,
                                world_size=comm.size, timeout=timedelta(seconds=60))
        check(comm.rank, comm.size)
        check_many_adjacencies(comm.rank, comm.size)
        rdma_algorithm.free_engines()
        dist.barrier()
        dist.destroy_process_group()
        if comm.rank == 0:
            with open(sys.argv[2], "w") as fh:
                json.dump({"passed": ["gcn_rdma_equivalence", "gcn_rdma_many_adjacencies"]}, fh)
    except BaseException:  # noqa: BLE001 -- any failure must abort every rank, or peers hang
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
