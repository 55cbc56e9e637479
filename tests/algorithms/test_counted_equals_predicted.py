"""One source of truth for bytes (issue #14): what every registered SpMM algorithm records in
``comm_counter()`` during one forward + backward equals, byte for byte and on every rank, its own
``predict`` — and ``CommStats.bytes_per_epoch`` (which prices through ``predict``) equals the sum.

Real multi-process gloo jobs; ``algorithm="rdma"`` runs its engine on the emulated symmetric-memory
backend (``tests/_symm_emulation.py``: the production ``SymmetricMemoryBackend`` over shared files),
the only one-sided backend that runs under gloo without ``mpiexec``.
"""
import numpy as np
import pytest
import torch
from _symm_emulation import emulated_backend
from graphs import make_cases

from pyg_sparsecomm import CommStats, comm_counter, shard
from pyg_sparsecomm.algorithms import ALGORITHMS, bytes_per_epoch, make_algorithm
from pyg_sparsecomm.algorithms.cost import CostModel, volumes_of_all_ranks
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.plan import comm_pattern
from pyg_sparsecomm.rdma import engine_cache
from pyg_sparsecomm.testing import launch


def _counted(counter) -> dict:
    return {kind: (counter.sent[kind].copy(), counter.received[kind].copy()) for kind in counter.sent}


def _run(name, local, grid, volumes) -> dict:
    """One forward + backward of ``name``: the bytes counted (per kind, per peer) and predicted."""
    cls, counter = ALGORITHMS[name], comm_counter()
    counter.reset()
    algorithm = make_algorithm(name, local.adj, None, grid)
    setup = _counted(counter)  # building the algorithm (rdma: the transposed tiles)
    counter.reset()
    x = local.x.clone().requires_grad_()
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    (algorithm(x) * upstream).sum().backward()
    predicted = cls.predict(volumes, CostModel(), cls.row_bytes(x.size(1), x.element_size()))
    if hasattr(algorithm, "close"):
        algorithm.close()
    return {"setup": setup, "counted": _counted(counter), "sent": counter.bytes_sent(),
            "received": counter.bytes_received(), "predicted": predicted.bytes_sent}


def _worker(rank, world_size, case, c, workdir):
    data = make_cases(world_size // c)[case]
    grid = process_grid(c) if c > 1 else None
    local = shard(data, grid=grid) if grid else shard(data)
    pattern = comm_pattern(data.edge_index, data.part, data.num_nodes, world_size // c)
    volumes = volumes_of_all_ranks(pattern.volume_matrix(), pattern.part_sizes, c, pattern.spans)[rank]
    if c == 1:
        engine_cache.set_backend(emulated_backend(workdir))
    names = sorted(n for n, a in ALGORITHMS.items() if a.replicated == (c > 1))
    out = {name: _run(name, local, grid, volumes) for name in names}
    engine_cache.free_engines()
    return out


CASES = [(1, 1, "undirected"), (2, 1, "weighted"), (3, 1, "directed"), (4, 1, "empty_part"),
         (4, 2, "directed"), (4, 2, "isolated")]


@pytest.mark.parametrize("world_size,c,case", CASES)
def test_counted_bytes_equal_predicted_for_every_algorithm(world_size, c, case, tmp_path):
    per_rank = launch(_worker, world_size, case, c, str(tmp_path), timeout=600)
    data = make_cases(world_size // c)[case]
    stats = CommStats.from_pattern(comm_pattern(data.edge_index, data.part, data.num_nodes, world_size // c))
    width, element_size = data.x.size(1), data.x.element_size()
    for name in per_rank[0]:
        where = f"{name}, P={world_size}, c={c}, {case}"
        for rank, res in enumerate(per_rank):
            assert res[name]["sent"] == res[name]["predicted"], f"{where}, rank {rank}"
        for phase in ("setup", "counted"):  # every byte sent is received by its peer
            kinds = {kind for res in per_rank for kind in res[name][phase]}
            for kind in kinds:
                sent = sum(res[name][phase][kind][0] for res in per_rank if kind in res[name][phase])
                received = np.zeros_like(sent)
                for r, res in enumerate(per_rank):
                    if kind in res[name][phase]:
                        received[r] = res[name][phase][kind][1].sum()
                np.testing.assert_array_equal(sent, received, err_msg=f"{where}, {phase} {kind!r}")
        total = sum(res[name]["sent"] for res in per_rank)
        assert total == sum(res[name]["received"] for res in per_rank), where
        assert bytes_per_epoch(stats, [width], element_size, name, c) == total, where
        assert (total > 0) == (world_size > 1), where


def test_every_registered_algorithm_is_covered():
    """The workers run every registered name whose layout (1D or 1.5D) ``CASES`` has: so both layouts."""
    assert {c > 1 for _, c, _ in CASES} == {False, True}
    assert {"1d", "1d_overlap", "1d_overlap_p2p", "oblivious", "rdma", "1.5d", "1.5d_oblivious"} <= set(ALGORITHMS)
