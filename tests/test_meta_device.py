"""Moving a package object to a device moves every tensor it holds (issue #24, build item 2a).

On the CPU, ``x.to("cpu")`` returns ``x``: a tensor an object forgets to move is invisible until
the first GPU run mixes it with a moved one.  The ``meta`` device makes it visible here: every
object is moved to ``meta`` and :func:`device_walk.tensors_not_on` lists what stayed behind.
(``SampledAdj`` and the loader's batches: ``tests/loader/test_loader*.py``.)
"""
import pytest
import torch
from device_walk import tensors, tensors_not_on
from graphs import NUM_FEATURES, make_cases

from pyg_sparsecomm import DistributedGCNConv, shard
from pyg_sparsecomm.plan.halo_adj import HaloAdj
from pyg_sparsecomm.testing import launch

META = torch.device("meta")


def _assert_all_moved(obj, what: str, at_least: int = 1) -> None:
    reached = tensors(obj)
    assert len(reached) >= at_least, f"{what}: the walker reached {len(reached)} tensors"
    left = tensors_not_on(obj, META)
    assert not left, f"{what}: tensors left behind by .to('meta'): {left}"


@pytest.mark.parametrize("case", ["weighted", "empty_part", "self_loops"])
def test_shard_adjacency_and_plan_move_every_tensor(case):
    data = make_cases(3)[case]
    for rank in range(3):
        local = shard(data, rank=rank, world_size=3)
        adj = local.adj
        adj.row(), adj.edge_index(), adj.csr(), adj.csr_t()  # caches hold tensors too
        _assert_all_moved(local.to(META), f"shard {rank}", at_least=8)
        _assert_all_moved(adj.to(META), f"adj {rank}", at_least=5)
        _assert_all_moved(adj.plan.to(META), f"plan {rank}", at_least=5)


def test_an_adjacency_with_its_plan_elsewhere_moves_the_plan():
    """``HaloAdj.to`` used to return itself when its edges were already there, plan or not."""
    adj = shard(make_cases(3)["weighted"], rank=1, world_size=3).adj
    half_moved = HaloAdj(adj.rowptr.to(META), adj.col.to(META), adj.value.to(META), adj.plan)
    _assert_all_moved(half_moved.to(META), "adjacency with a CPU plan", at_least=8)


@pytest.mark.parametrize("algorithm", ["1d", "1d_overlap", "1d_overlap_p2p", "oblivious"])
def test_a_cached_layer_moves_or_drops_what_it_cached(algorithm):
    local = shard(make_cases(1)["weighted"])
    conv = DistributedGCNConv(NUM_FEATURES, 4, cached=True, algorithm=algorithm)
    conv(local.x, local.adj, local.edge_weight)
    assert conv._cached_spmm is not None  # the test moves a layer that cached its SpMM
    _assert_all_moved(conv.to(META), f"cached {algorithm} layer", at_least=2)


def _stale_layer_moved(rank: int, world_size: int) -> tuple[int, list[str]]:
    local = shard(make_cases(world_size)["directed"])
    conv = DistributedGCNConv(NUM_FEATURES, 4, algorithm="1d", staleness=1)
    for _ in range(2):  # step 1 leaves exchanges in flight and the previous step's halos kept
        conv(local.x, local.adj).sum().backward()
    held = len(tensors(conv.exchange_slots))
    return held, tensors_not_on(conv.to(META), META)


def test_a_layer_with_stale_halos_moves_or_drops_them():
    for held, left in launch(_stale_layer_moved, 2, timeout=200):
        assert held > 0, "the layer kept no stale halos: the test moves nothing"
        assert not left, left
