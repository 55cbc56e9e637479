"""The random numbers of stochastic rounding (``comm/rounding.py``): a dedicated generator per
device, never torch's default one, reproducible from ``torch.manual_seed`` and different per rank.

* paired runs: after an int8/int4 encode, a real int8 training step (DistributedGCNConv with dropout,
  gloo) and ``torch.rand`` give the same as after the exact ones (same parameters, same masks);
* the same seed gives bitwise the same payloads (fresh processes, re-seeding in one process,
  ``seed_rounding``); ranks and seeds give different ones.
"""
import pytest
import torch
import torch.nn.functional as Fn
from graphs import make_cases

import pyg_sparsecomm
from pyg_sparsecomm import DistributedGCNConv, shard
from pyg_sparsecomm.comm import quantize
from pyg_sparsecomm.comm.quantize import encode
from pyg_sparsecomm.comm.rounding import rounding_generator, rounding_seed, seed_rounding
from pyg_sparsecomm.testing import launch


def rows(seed=0, n=40, f=9):
    return torch.randn(n, f, generator=torch.Generator().manual_seed(seed)) * 5


@pytest.fixture(autouse=True)
def _follow_torch_seed():
    seed_rounding()  # no test leaves a pinned base behind
    yield
    seed_rounding()


@pytest.mark.parametrize("precision", ["int8", "int4", "bf16"])
def test_encoding_leaves_the_default_generator_alone(precision):
    torch.manual_seed(0)
    before = torch.default_generator.get_state()
    encode(rows(), precision)
    assert torch.equal(torch.default_generator.get_state(), before)
    torch.manual_seed(0)
    expected = torch.rand(5)
    torch.manual_seed(0)
    encode(rows(), precision)
    assert torch.equal(torch.rand(5), expected)


def test_the_same_torch_seed_gives_the_same_draws_and_other_seeds_do_not():
    torch.manual_seed(1)
    first = [encode(rows(i), "int8") for i in range(3)]
    torch.manual_seed(2)  # torch.initial_seed() changes: the stream is re-seeded
    other = [encode(rows(i), "int8") for i in range(3)]
    torch.manual_seed(1)
    again = [encode(rows(i), "int8") for i in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(first, other, strict=True))
    assert not torch.equal(first[0][:, 4:], first[1][:, 4:])  # the stream moves on between calls


def test_seed_rounding_restarts_the_stream_and_pins_a_base():
    torch.manual_seed(3)
    first = encode(rows(), "int4")
    torch.manual_seed(3)  # the same seed again: torch.initial_seed() does not change ...
    assert not torch.equal(encode(rows(), "int4"), first)  # ... so the stream continues
    torch.manual_seed(3)
    seed_rounding()
    assert torch.equal(encode(rows(), "int4"), first)
    seed_rounding(17)
    pinned = encode(rows(), "int4")
    torch.manual_seed(99)  # a pinned base ignores torch's seed
    seed_rounding(17)
    assert torch.equal(encode(rows(), "int4"), pinned)
    assert not torch.equal(pinned, first)


def test_seed_rounding_is_exported_and_refuses_non_integers():
    assert pyg_sparsecomm.comm.seed_rounding is seed_rounding and quantize.seed_rounding is seed_rounding
    with pytest.raises(TypeError, match="seed_rounding: seed must be an int or None, got float"):
        seed_rounding(1.5)  # type: ignore[arg-type]


def test_seeds_differ_per_rank_and_base():
    seeds = {rounding_seed(base, rank) for base in (0, 1, 2**63) for rank in range(8)}
    assert len(seeds) == 24 and all(0 <= s < 2**63 for s in seeds)
    assert rounding_generator("cpu") is rounding_generator(torch.device("cpu"))


def _gcn_training_step(local, precision):
    torch.manual_seed(5)
    conv = DistributedGCNConv(local.x.size(1), 4, halo_precision=precision, halo_grad_precision=precision)
    params = [p.detach().clone() for p in conv.parameters()]
    x = Fn.dropout(local.x, p=0.5, training=True)
    out = conv(x, local.adj, local.edge_weight)
    Fn.dropout(out, p=0.5, training=True).square().sum().backward()
    return params, x, torch.rand(6), out.detach()


def _paired_worker(rank, world_size, seed):
    local = shard(make_cases(world_size)["weighted"])
    results = {p: _gcn_training_step(local, p) for p in (None, "int8", "int4")}
    torch.manual_seed(seed)
    payload = encode(rows(), "int8")
    return results, payload, int(sum(local.adj.plan.recv_counts))


def test_int8_and_exact_runs_are_paired_reproducible_and_ranks_draw_apart():
    first, second = launch(_paired_worker, 3, 7), launch(_paired_worker, 3, 7)
    for rank, (results, payload, recv_rows) in enumerate(first):
        exact_params, exact_x, exact_rand, exact_out = results[None]
        for precision in ("int8", "int4"):
            params, x, rand, out = results[precision]
            assert all(torch.equal(a, b) for a, b in zip(params, exact_params, strict=True))
            assert torch.equal(x, exact_x), f"dropout mask differs, {precision}, rank {rank}"
            assert torch.equal(rand, exact_rand), f"torch.rand differs after {precision}, rank {rank}"
            if recv_rows:  # the rounding is real: the output differs from exact
                assert not torch.equal(out, exact_out)
        assert torch.equal(payload, second[rank][1]), f"rank {rank}: same seed, different draws"
        for precision in ("int8", "int4"):
            assert torch.equal(results[precision][3], second[rank][0][precision][3]), f"{precision}, rank {rank}"
    payloads = [payload for _, payload, _ in first]
    assert not torch.equal(payloads[0], payloads[1]) and not torch.equal(payloads[1], payloads[2])
