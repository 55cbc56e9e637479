"""``algorithm="rdma"`` on symmetric memory prefetches: the next get is in flight while the
current tile is multiplied, and a get is consumed only through its future (issue #24, defect 7).

On a GPU the gets are copies on a side stream that the compute stream waits for
(``SideStreamGets``); the emulation (``tests/_symm_emulation.py``, ``DeferredGets``) lands a
copy only when its future is waited for and logs the order, and the test logs every tile
product into the same log.
"""
import torch
from _symm_emulation import emulated_backend
from graphs import NUM_FEATURES, make_cases

from pyg_sparsecomm.testing import launch


def _logged_products(rank: int, world_size: int, workdir: str) -> tuple[list, float]:
    import pyg_sparsecomm.algorithms.rdma as rdma_algorithm
    from pyg_sparsecomm import DistributedGCNConv, shard
    be = emulated_backend(workdir)
    rdma_algorithm.set_backend(be)
    log = be.gets.log
    product = rdma_algorithm.tile_product

    def logged(tile, h):
        log.append(("product", -1))
        return product(tile, h)
    rdma_algorithm.tile_product = logged
    data = make_cases(world_size)["directed"]
    local = shard(data)
    torch.manual_seed(0)
    conv = DistributedGCNConv(NUM_FEATURES, 4, algorithm="rdma")
    with torch.no_grad():
        conv(local.x, local.adj)  # builds the engine (its gets of A's tiles are not products')
    log.clear()
    x = local.x.clone().requires_grad_()
    y = conv(x, local.adj)
    y.sum().backward()
    finite = float(torch.isfinite(torch.cat([y.flatten(), x.grad.flatten()])).float().mean())
    rdma_algorithm.free_engines()
    return log, finite


def test_next_get_is_in_flight_while_a_tile_is_multiplied(tmp_path):
    for rank, (log, finite) in enumerate(launch(_logged_products, 3, str(tmp_path), timeout=300)):
        in_flight, overlapped = set(), set()
        for what, n in log:
            if what == "start":
                in_flight.add(n)
            elif what == "wait":
                assert n in in_flight, f"rank {rank}: get {n} waited for twice or before it started"
                in_flight.remove(n)
            else:
                overlapped |= in_flight  # these gets travel while this product computes
        gets = {n for what, n in log if what == "start"}
        assert gets and not in_flight, f"rank {rank}: every get is consumed through its future: {log}"
        assert overlapped == gets, f"rank {rank}: gets {sorted(gets - overlapped)} overlap no product: {log}"
        assert finite == 1.0, f"rank {rank}: a get was read before it landed"
