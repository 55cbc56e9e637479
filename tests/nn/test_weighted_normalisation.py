"""A weighted distributed ``GCNConv`` folds its source degrees into the rows it exchanges (issue 57):
its steady-state call makes one exchange (the rows'), not two (degrees, then rows), and its output and
gradients stay PyG's whatever happens to the weights between calls: constant (the normalisation is
kept), edited in place or replaced on one rank only, or learned (``requires_grad``: normalised again
every call, gradients reaching the weights).

Real gloo runs at P = 2 and 3 against ``GCNConv`` on the whole graph, the weights given as
``edge_weight`` or as the values of a torch sparse ``adj_t``.
"""
import warnings

import pytest
import torch
from graphs import OUT
from test_adj_values import to_sparse_tensor
from test_first_use_checks import N, graph
from test_kept_normalisation import _layers

from pyg_sparsecomm import LossNormalisationWarning, shard, sync_gradients
from pyg_sparsecomm.comm.counters import comm_counter
from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.testing.call_profile import CallProfile

STEPS = 5
TOLERANCE = 1e-5


def _data(world_size: int, adj_t: bool = False):
    data = graph(torch.arange(N) % world_size)
    data.edge_weight = torch.rand(data.edge_index.size(1), generator=torch.Generator().manual_seed(3)) + 0.5
    return to_sparse_tensor(data) if adj_t else data


def _step(ref, layer, data, local, ref_weight, weight, adj_t=False):
    """One forward and backward of both layers; the largest differences of the outputs, of ``x``'s and
    the parameters' gradients, and the halo exchanges of the distributed forward."""
    up = torch.randn(N, OUT, generator=torch.Generator().manual_seed(5))
    x_ref, x = data.x.clone().requires_grad_(), local.x.clone().requires_grad_()
    expected = ref(x_ref, data.adj_t) if adj_t else ref(x_ref, data.edge_index, ref_weight)
    (expected * up).sum().backward()
    before = comm_counter().calls["halo"]
    out = layer(x, local.adj) if adj_t else layer(x, local.adj.with_value(None), weight)
    exchanges = comm_counter().calls["halo"] - before
    (out * up[local.n_id]).sum().backward()
    sync_gradients(layer)
    params = dict(ref.named_parameters())
    errors = [float((out - expected[local.n_id]).detach().abs().max()),
              float((x.grad - x_ref.grad[local.n_id]).abs().max()),
              *(float((p.grad - params[k].grad).abs().max()) for k, p in layer.named_parameters())]
    ref.zero_grad()
    layer.zero_grad()
    return max(errors), exchanges


def _constant(rank, world_size, adj_t):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # the gradient probe is a plain sum
    data = _data(world_size, adj_t)
    local = shard(data)
    ref, layer = _layers()
    errors, exchanges = [], []
    for _ in range(STEPS):
        error, count = _step(ref, layer, data, local, data.edge_weight, local.edge_weight, adj_t)
        errors.append(error)
        exchanges.append(count)
    kept = type(layer._sparsecomm.normalised).__name__  # the normalisation kept across calls
    with CallProfile() as profile:  # a steady-state call: no collective but the halo's exchange
        layer(local.x, local.adj) if adj_t else layer(local.x, local.adj.with_value(None), local.edge_weight)
    return errors, exchanges, dict(profile.collectives), kept


@pytest.mark.parametrize("adj_t", [False, True], ids=["edge_weight", "adj_t"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_constant_weights_make_one_exchange_per_steady_call(world_size, adj_t):
    for rank, (errors, exchanges, collectives, kept) in enumerate(launch(_constant, world_size, adj_t)):
        assert max(errors) < TOLERANCE, (rank, errors)
        assert kept == "FoldedNormalisation", kept
        assert exchanges[0] <= 2, exchanges  # the first call ("auto" chooses the algorithm): degrees, then rows
        assert exchanges[1:] == [1] * (STEPS - 1), (rank, exchanges)  # rows only
        assert collectives == {"all_to_all_single": 1}, (rank, collectives)


def _changed_on_one_rank(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)
    data = _data(world_size)
    local = shard(data)
    ref, layer = _layers()
    owner = data.part[data.edge_index[1]]  # an edge's weight is its target's owner's
    scale = torch.ones(data.edge_index.size(1))
    weight, errors, exchanges = local.edge_weight, [], []
    for step in range(STEPS + 1):
        if step == 2:  # in place on rank 0 only: the same object, a new version there
            scale[owner == 0] *= 3.0
            if rank == 0:
                weight.mul_(3.0)
        elif step == 4:  # a new tensor on the last rank only
            scale[owner == world_size - 1] /= 6.0
            if rank == world_size - 1:
                weight = weight / 6.0
        error, count = _step(ref, layer, data, local, data.edge_weight * scale, weight)
        errors.append(error)
        exchanges.append(count)
    return errors, exchanges


@pytest.mark.parametrize("world_size", [2, 3])
def test_weights_changed_on_one_rank_stay_exact(world_size):
    for rank, (errors, exchanges) in enumerate(launch(_changed_on_one_rank, world_size)):
        assert max(errors) < TOLERANCE, (rank, errors)
        assert exchanges[1:] == [1] * STEPS, (rank, exchanges)  # no rank exchanges degrees: none waits for them


def _learned(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)
    data = _data(world_size)
    local = shard(data)
    ref, layer = _layers()
    ref_weight = data.edge_weight.clone().requires_grad_()
    weight = local.edge_weight.clone().requires_grad_()
    optimiser = torch.optim.SGD([weight], lr=0.1)
    ref_optimiser = torch.optim.SGD([ref_weight], lr=0.1)
    errors = []
    for _ in range(STEPS):
        error, _ = _step(ref, layer, data, local, ref_weight, weight)
        errors.append(max(error, float((weight.grad - ref_weight.grad[local.e_id]).abs().max())))
        optimiser.step()  # the weights change every step, in place
        ref_optimiser.step()
        optimiser.zero_grad()
        ref_optimiser.zero_grad()
        assert layer._sparsecomm.normalised is None  # learned weights: normalised again every call, never kept
    return errors


@pytest.mark.parametrize("world_size", [2, 3])
def test_learned_weights_stay_exact_with_their_gradients(world_size):
    for rank, errors in enumerate(launch(_learned, world_size)):
        assert max(errors) < TOLERANCE, (rank, errors)
