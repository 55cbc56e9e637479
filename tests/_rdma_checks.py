"""Backend-independent checks of :mod:`pyg_sparsecomm.rdma`, shared by the MPI worker
(``tests/_rdma_worker.py`` under ``mpiexec``) and the emulated symmetric-memory backend
(``tests/rdma/test_symm_backend.py``).  Every check takes the backend and asserts on every rank.
"""
import time
from collections import Counter

import numpy as np
import scipy.sparse as sp
import torch

from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.rdma import (
    ALGORITHMS,
    SPGEMM_ALGORITHMS,
    DenseTiledMatrix,
    RemoteQueue,
    SparseTiledMatrix,
    spgemm,
    spmm,
    work_stealing,
)
from pyg_sparsecomm.rdma.stationary import k_order


def torch_csr(m: sp.csr_matrix) -> torch.Tensor:
    coo = m.tocoo()
    idx = torch.from_numpy(np.stack([coo.row, coo.col]).astype(np.int64))
    # scipy's indices: invariants not checked, said (else torch warns once per rank)
    return torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data), m.shape, check_invariants=False).coalesce()


def ragged() -> sp.csr_matrix:
    """37 x 29: no tile size used below divides it."""
    return sp.random(37, 29, density=0.12, random_state=3, format="csr")


def with_empty_tiles() -> sp.csr_matrix:
    """40 x 40 whose non-zeros avoid whole tile blocks (rows 10-29 and cols 0-19 are empty)."""
    m = sp.random(40, 40, density=0.3, random_state=4, format="lil")
    m[10:30, :] = 0
    m[:, 0:20] = 0
    m[35, 5] = 2.0  # one lonely entry in an otherwise empty tile column
    return sp.csr_matrix(m)


def rmat() -> sp.csr_matrix:
    """Skewed R-MAT (a=0.6, b=c=d=0.4/3), 2**7 nodes, edge factor 8, random values."""
    ei = rmat_graph(scale=7, edge_factor=8, a=0.6, b=0.4 / 3, c=0.4 / 3, seed=1).edge_index.numpy()
    vals = np.random.default_rng(5).uniform(0.5, 1.5, ei.shape[1])
    return sp.csr_matrix((vals, (ei[0], ei[1])), shape=(128, 128))


CASES = {  # name -> (A, A tile shape, B tile columns for SpMM / SpGEMM)
    "ragged": (ragged(), (8, 7), 4, 6),
    "empty_tiles": (with_empty_tiles(), (10, 10), 3, 10),
    "rmat": (rmat(), (24, 24), 5, 24),
}


VARIANTS = [("stationary_c", {}), ("stationary_c", {"prefetch": False}), ("stationary_a", {}),
            ("stationary_a", {"combine": False}), ("ws_random", {}), ("ws_locality", {}), ("summa", {})]
assert {name for name, _ in VARIANTS} == set(ALGORITHMS)


def check_spmm_and_spgemm(be, variants=VARIANTS) -> None:
    for case, (S, tile, bcols, gcols) in CASES.items():
        X = np.random.default_rng(0).standard_normal((S.shape[1], 6))
        A = SparseTiledMatrix.from_global(be, S, tile)
        empty = A.directory[:, :, 6] == 0
        if case == "empty_tiles":
            assert empty.any(), "case must contain empty tiles"
        # empty tiles take no storage: offsets -1, and the regions hold only the non-empty tiles
        assert (A.directory[empty][:, 1:4] == -1).all() and (A.directory[~empty][:, 1:4] >= 0).all()
        mine = [ij for ij in A.my_tiles() if A.nnz(*ij)]
        assert be.local(A.regions[1]).numel() == sum(A.tiles.dims(*ij)[0] + 1 for ij in mine), case
        assert be.local(A.regions[0]).numel() == sum(A.nnz(*ij) for ij in mine), case
        B = DenseTiledMatrix.from_global(be, X, (tile[1], bcols))
        expect = torch.sparse.mm(torch_csr(S), torch.from_numpy(X)).numpy()
        for name, kwargs in variants:
            if name in ALGORITHMS:
                res = spmm(A, B, name, **kwargs)
                got = res.C.to_global().cpu().numpy()
                assert got.shape == expect.shape
                err = np.abs(got - expect).max()
                assert np.allclose(got, expect, atol=1e-12), f"spmm {name} {kwargs} {case}: {err}"
                res.C.free()
        B.free()
        # SpGEMM: A @ S2 with S2 = A^T A-shaped sparse operand (square case: A @ A as in the paper)
        S2 = S if S.shape[0] == S.shape[1] else sp.csr_matrix(S.T)
        Bs = SparseTiledMatrix.from_global(be, S2, (tile[1], gcols))
        expect = torch.sparse.mm(torch_csr(S), torch_csr(S2)).to_dense().numpy()
        for name, kwargs in variants:
            if name not in SPGEMM_ALGORITHMS:
                continue
            res = spgemm(A, Bs, name, **kwargs)
            got = res.C.to_global().to_dense().cpu().numpy()
            assert np.allclose(got, expect, atol=1e-12), f"spgemm {name} {kwargs} {case}: {np.abs(got - expect).max()}"
            res.C.free()
        Bs.free()
        A.free()


def slow_owner_hook(be, A, slow: int, signal, word: int, stealable: bool, wait: float = 30.0):
    """A ``work_hook`` that makes stealing deterministic instead of timing-dependent.

    Every stolen product (``C_ij`` not owned by the computing rank) increments ``signal[word]``
    at rank 0.  Rank ``slow`` blocks before its first own product until some rank has
    stolen (or ``wait`` seconds passed), so if anything of rank ``slow`` can be stolen, it is.
    """
    RANK = be.rank
    waited = [not stealable or RANK != slow]

    def hook(i, j, k):
        if A.pgrid.owner(i, j) != RANK:
            be.fetch_add(0, signal, word, 1)
        elif not waited[0]:
            waited[0] = True
            deadline = time.time() + wait
            while be.fetch_add(0, signal, word, 0) == 0 and time.time() < deadline:
                time.sleep(1e-3)
    return hook


def stealable_from(A, B, ks, slow: int, victim: str, words, budget) -> bool:
    """Whether another rank can steal a product of rank ``slow`` besides its first one (``budget``-limited)."""
    own = [(i, j, k) for (i, j), kk in sorted(ks.items()) if A.pgrid.owner(i, j) == slow for k in kk]
    if victim == "random":
        rest = own[1:]
    else:  # 3D: a thief must own A_ik or B_kj
        rest = [(i, j, k) for i, j, k in own[1:] if A.owner(i, k) != slow or B.owner(k, j) != slow]
    return any(budget is None or words[i, j] <= budget for i, j, _ in rest)


def check_work_stealing_claims(be) -> dict:
    """A rank is held back so the others steal; every non-empty (i, j, k) is reserved exactly once.

    Returns ``{victim policy: products stolen}`` of the two unbudgeted runs (same on every rank)."""
    P, RANK = be.world_size, be.rank
    S, tile = rmat(), (16, 16)
    X = np.random.default_rng(1).standard_normal((S.shape[1], 4))
    A = SparseTiledMatrix.from_global(be, S, tile)
    B = DenseTiledMatrix.from_global(be, X, (16, 4))
    # ragged: 128 = 5 * 24 + 8, so C tile row 5 is 8 rows (32 words) and the others 24 rows (96 words)
    Ar = SparseTiledMatrix.from_global(be, S, (24, 24))
    Br = DenseTiledMatrix.from_global(be, X, (24, 4))
    signal = be.alloc(8 if RANK == 0 else 0, torch.int64)
    be.barrier()
    runs = [("random", A, B, None), ("locality", A, B, None), ("locality budget", Ar, Br, 32)]
    stolen_by = {}
    for word, (victim, A_, B_, budget) in enumerate(runs):
        M, N = A_.grid_shape[0], B_.grid_shape[1]
        ks = {(i, j): k_order(A_, B_, i, j) for i in range(M) for j in range(N)}
        words = {(i, j): A_.tiles.dims(i, 0)[0] * B_.tiles.dims(0, j)[1] for i, j in ks}
        all_products = {(i, j, k) for (i, j), kk in ks.items() for k in kk}
        slow = 0 if budget is None else A_.pgrid.owner(M - 1, 0)  # budget run: the ragged row's owner
        stealable = P > 1 and stealable_from(A_, B_, ks, slow, victim.split()[0], words, budget)
        hook = slow_owner_hook(be, A_, slow, signal, word, stealable, wait=30.0 if budget is None else 10.0)
        res = work_stealing(A_, B_, victim=victim.split()[0], work_hook=hook, steal_budget=budget)
        claims = Counter(c for part in be.allgather(res.claims) for c in part)
        assert set(claims) == all_products, f"{victim}: dropped {all_products - set(claims)}"
        assert max(claims.values()) == 1, f"{victim}: computed twice {[c for c, n in claims.items() if n > 1]}"
        stolen = sum(s["stolen"] for s in res.breakdowns)
        if stealable:
            assert stolen > 0, f"{victim}: nobody stole from the held-back rank {slow}"
        assert np.allclose(res.C.to_global().cpu().numpy(), S @ X, atol=1e-12), victim
        if budget is None:
            stolen_by[victim] = stolen
        res.C.free()
    be.barrier()
    be.free(signal)
    for m in (A, B, Ar, Br):
        m.free()
    return stolen_by


def check_queue_concurrent_pushes(be, per_rank: int = 150) -> None:
    """All ranks push to rank 0 at once while it drains; nothing is lost or duplicated."""
    P, RANK = be.world_size, be.rank
    queue = RemoteQueue(be, P * per_rank if RANK == 0 else 0)
    be.barrier()
    got = []
    for seq in range(per_rank):
        queue.push(0, (RANK, seq, 0, 0, 0, 0, seq * P + RANK))
        if RANK == 0:
            handle = queue.pop()
            if handle is not None:
                got.append(handle)
    if RANK == 0:
        deadline = time.time() + 60
        while len(got) < P * per_rank and time.time() < deadline:
            handle = queue.pop()
            got.append(handle) if handle is not None else time.sleep(1e-4)
        pairs = Counter((h[0], h[1]) for h in got)
        assert len(got) == P * per_rank, f"received {len(got)} of {P * per_rank}"
        assert set(pairs) == {(r, s) for r in range(P) for s in range(per_rank)} and max(pairs.values()) == 1
        assert all(h[6] == h[1] * P + h[0] for h in got), "handle words corrupted"
        assert queue.pop() is None
    be.barrier()
    queue.free()
    # the reservation primitive itself: fetch_add tickets are unique and complete
    counter = be.alloc(1, torch.int64)
    tickets = [be.fetch_add(0, counter, 0, 1) for _ in range(100)]
    everyone = sorted(t for part in be.allgather(tickets) for t in part)
    assert everyone == list(range(100 * P)), "fetch_add tickets not unique"
    be.barrier()
    be.free(counter)


