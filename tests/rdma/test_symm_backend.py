"""The symmetric-memory (CUDA) RDMA backend, run without a GPU (issue #5 part 2, item 1).

``SymmetricMemoryBackend`` is the backend ``make_backend("cuda")`` returns.  No GPU is
available here, so its code runs over an emulated symmetric heap
(``tests/_symm_emulation.py``: shared files instead of NVLink mappings, the backend's
Triton fetch-and-add kernel in Triton's interpreter) in real multi-process gloo jobs,
and every algorithm of :mod:`pyg_sparsecomm.rdma` — written once, with torch tile
kernels — must give the same products as on the MPI backend: equal to ``torch.sparse``.
"""
import os

import pytest
import torch
import triton  # noqa: E402,F401  -- a test dependency: a missing triton must fail this module, not skip it
from _rdma_checks import check_queue_concurrent_pushes, check_spmm_and_spgemm, check_work_stealing_claims
from _rdma_gcn_checks import check, check_many_adjacencies, expected_comparisons
from _symm_emulation import emulated_backend

from pyg_sparsecomm.rdma import make_backend
from pyg_sparsecomm.testing import launch


def _algorithms_worker(rank: int, world_size: int, workdir: str) -> list[str]:
    be = emulated_backend(workdir)
    done = []
    be.interpret_atomics = False  # the products: the atomic as a torch op (tests/_symm_emulation.py)
    check_spmm_and_spgemm(be)  # every algorithm, SUMMA included (broadcasts over torch.distributed groups)
    done.append("spmm_spgemm")
    be.interpret_atomics = True  # the claims and the queue: the backend's Triton kernel, interpreted
    check_work_stealing_claims(be)
    done.append("work_stealing")
    check_queue_concurrent_pushes(be, per_rank=40)
    done.append("queue")
    be.close()
    return done


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_every_algorithm_on_symmetric_memory_backend(P, tmp_path):
    """SpMM/SpGEMM of stationary-C, stationary-A, both work-stealing variants and SUMMA == torch.sparse over
    the symmetric-memory backend (ragged tiles, empty tiles, R-MAT); every product reserved exactly once; the
    remote queue loses no update under concurrent pushes (Triton fetch-and-add on peers' memory)."""
    out = launch(_algorithms_worker, P, str(tmp_path), timeout=600)
    assert out == [["spmm_spgemm", "work_stealing", "queue"]] * P


def _gcn_worker(rank: int, world_size: int, workdir: str) -> tuple[int, int]:
    import pyg_sparsecomm.algorithms.rdma as rdma_algorithm
    be = emulated_backend(workdir)
    be.interpret_atomics = False  # the layer's products: the atomic as a torch op (tests/_symm_emulation.py)
    rdma_algorithm.set_backend(be)
    compared = check(rank, world_size), check_many_adjacencies(rank, world_size)
    rdma_algorithm.free_engines()
    return compared


@pytest.mark.parametrize("P", [2, 3])
def test_gcn_conv_rdma_on_symmetric_memory_backend(P, tmp_path):
    """DistributedGCNConv(algorithm="rdma") == GCNConv (outputs, input/weight/bias gradients, all graph
    cases and options, > cache-size live adjacencies) with the engine on the symmetric-memory backend."""
    compared = launch(_gcn_worker, P, str(tmp_path), timeout=600)
    # every rank compared every case, option and adjacency (a worker skipping its checks fails here)
    assert compared == [(expected_comparisons(P), 2 * (1 + 2 * 6))] * P


def test_fetch_add_kernel_returns_old_value():
    """The Triton kernel itself (interpreted on CPU): returns the old value and adds in place."""
    os.environ["TRITON_INTERPRET"] = "1"
    from pyg_sparsecomm.rdma.atomics import fetch_add
    buf = torch.zeros(4, dtype=torch.int64)
    assert [fetch_add(buf[2:3], v) for v in (1, 5, 0, -2)] == [0, 1, 6, 6]
    assert buf.tolist() == [0, 0, 4, 0]  # neighbours untouched
    with pytest.raises(ValueError, match="int64"):
        fetch_add(torch.zeros(1), 1)


def test_make_backend_selects_by_device():
    """cuda -> SymmetricMemoryBackend (which names what is missing on this CPU-only machine); bad devices raise."""
    with pytest.raises(RuntimeError, match="needs CUDA|needs a CUDA device"):
        make_backend("cuda")
    with pytest.raises(ValueError, match="no RDMA backend"):
        make_backend("meta")
