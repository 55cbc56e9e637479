"""``HaloExchanger`` (comm/exchanger.py) in real gloo runs against references built from the whole
graph: the halo rows and their gradients (exact, compressed, several tensors at once, stale), the
reverse exchange and its adjoint; and ``check_settings``, the one check of a layer's settings."""
import pytest
import torch
import torch.distributed as dist
from graphs import make_cases

from pyg_sparsecomm import comm_counter, shard
from pyg_sparsecomm.algorithms import ALGORITHMS, check_settings
from pyg_sparsecomm.comm.exchanger import HaloExchanger
from pyg_sparsecomm.comm.halo_options import EXACT, ExchangeSlots, HaloOptions
from pyg_sparsecomm.comm.quantize import payload_row_bytes
from pyg_sparsecomm.testing import launch

WIDTH = 3
CASES = ["directed", "isolated", "empty_part"]


def _randn(seed: int, *shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _global(num_nodes: int, seed: int = 0) -> torch.Tensor:
    """The global ``[N, WIDTH]`` rows every rank takes its owned rows from."""
    return _randn(seed, num_nodes, WIDTH)


def _count_all_to_alls() -> list[int]:
    """Counts ``dist.all_to_all_single`` calls (what one exchange per dtype means)."""
    calls, original = [0], dist.all_to_all_single

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)
    dist.all_to_all_single = counted
    return calls


def _exchanges(rank, world_size, case):
    data = make_cases(world_size)[case]
    local = shard(data)
    plan, H = local.adj.plan, _global(data.num_nodes)
    up = _randn(100 + rank, plan.halo_size, WIDTH)
    out = {"n_id": plan.n_id, "halo_n_id": plan.halo_n_id}
    exchanger = HaloExchanger(plan)
    x = H[plan.n_id].clone().requires_grad_()
    halo = exchanger.exchange(x)
    ((halo * up).sum() + x.sum() * 0).backward()  # P = 1: an empty halo, no graph
    out["exact"], out["exact_grad"] = halo.detach(), x.grad
    # compressed rows (fp16 is a deterministic cast), exact gradients; .exact ignores the options
    fp16 = exchanger.bind(options=HaloOptions(precision="fp16"))
    counter = comm_counter()
    counter.reset()
    x = H[plan.n_id].clone().requires_grad_()
    halo = fp16.exchange(x)
    ((halo * up).sum() + x.sum() * 0).backward()
    out["fp16"], out["fp16_grad"], out["fp16_sent"] = halo.detach(), x.grad, counter.bytes_sent("halo")
    out["fp16_exact"] = fp16.exact.exchange(H[plan.n_id])
    out["sent_rows"] = sum(plan.send_counts)
    return out


@pytest.mark.parametrize("world_size,case", [(1, "directed")] + [(3, c) for c in CASES])
def test_exchange_returns_the_halo_rows_and_sends_their_gradients_to_the_owners(world_size, case):
    results = launch(_exchanges, world_size, case)
    num_nodes = 60
    H = _global(num_nodes)
    expected_grad = torch.zeros(num_nodes, WIDTH)
    for rank, res in enumerate(results):
        expected_grad.index_add_(0, res["halo_n_id"], _randn(100 + rank, res["halo_n_id"].numel(), WIDTH))
    assert sum(res["halo_n_id"].numel() for res in results) > 0 or world_size == 1
    for rank, res in enumerate(results):
        where = f"P={world_size}, {case}, rank {rank}"
        ref = H[res["halo_n_id"]]
        assert torch.equal(res["exact"], ref), where
        assert torch.equal(res["fp16_exact"], ref), where
        assert torch.equal(res["fp16"], ref.half().float()), where
        torch.testing.assert_close(res["exact_grad"], expected_grad[res["n_id"]], msg=where)
        torch.testing.assert_close(res["fp16_grad"], expected_grad[res["n_id"]], msg=where)
        assert res["fp16_sent"] == res["sent_rows"] * payload_row_bytes(WIDTH, "fp16"), where
    if world_size > 1:
        assert any(not torch.equal(res["fp16"], res["exact"]) for res in results)  # fp16 did round


def _many(rank, world_size):
    data = make_cases(world_size)["directed"]
    plan = shard(data).adj.plan
    n = data.num_nodes
    a, b = _randn(1, n, WIDTH)[plan.n_id], _randn(2, n, 2, 2, dtype=torch.float64)[plan.n_id]
    ids = plan.n_id * 10  # int64: travels in its own exchange, exactly
    calls = _count_all_to_alls()
    halos = HaloExchanger(plan, options=HaloOptions(precision="bf16")).exchange_many([a, b, ids], key="m")
    return plan.halo_n_id, halos, calls[0]


def test_exchange_many_moves_every_dtype_once():
    n = 60
    a, b = _randn(1, n, WIDTH), _randn(2, n, 2, 2, dtype=torch.float64)
    for halo_n_id, (ha, hb, hid), calls in launch(_many, 3):
        assert calls == 3  # float32, float64 and int64: one all-to-allv each
        assert ha.shape == (halo_n_id.numel(), WIDTH) and hb.shape == (halo_n_id.numel(), 2, 2)
        torch.testing.assert_close(ha, a[halo_n_id], rtol=1e-2, atol=1e-2)  # bf16 rows
        torch.testing.assert_close(hb, b[halo_n_id], rtol=1e-2, atol=1e-2)
        assert torch.equal(hid, halo_n_id * 10)  # not floating point: exact


def _reduce(rank, world_size, case):
    data = make_cases(world_size)[case]
    plan = shard(data).adj.plan
    x_ext = _randn(200 + rank, plan.num_owned + plan.halo_size, WIDTH).requires_grad_()
    up = _global(data.num_nodes, seed=7)[plan.n_id]
    owned = HaloExchanger(plan, options=HaloOptions(precision="int8", staleness=1),
                          slots=ExchangeSlots()).reduce(x_ext)  # always exact, never stale
    (owned * up).sum().backward()
    return plan.n_id, plan.halo_n_id, x_ext.detach(), owned.detach(), x_ext.grad


@pytest.mark.parametrize("case", CASES)
def test_reduce_sums_halo_columns_into_their_owners_and_is_the_adjoint_of_exchange(case):
    results = launch(_reduce, 3, case)
    total = torch.zeros(60, WIDTH)
    for n_id, halo_n_id, x_ext, _, _ in results:
        total.index_add_(0, torch.cat([n_id, halo_n_id]), x_ext)
    up = _global(60, seed=7)
    for n_id, halo_n_id, _, owned, grad in results:
        torch.testing.assert_close(owned, total[n_id])
        assert torch.equal(grad, up[torch.cat([n_id, halo_n_id])])  # the forward exchange of the upstream


def _stale(rank, world_size):
    data = make_cases(world_size)["directed"]
    plan = shard(data).adj.plan
    slots = ExchangeSlots()
    exchanger = HaloExchanger(plan, options=HaloOptions(staleness=1), slots=slots)
    halos = []
    for step in range(3):
        slots.begin_call(training=True)
        x = _global(data.num_nodes, seed=step)[plan.n_id].requires_grad_()
        halo = exchanger.exchange(x)
        halo.sum().backward()
        halos.append(halo.detach())
    slots.begin_call(training=False)
    evaluation = exchanger.exchange(_global(data.num_nodes, seed=5)[plan.n_id])
    for state in slots.slots.values():
        state.drain()
    return plan.halo_n_id, halos, evaluation, sorted(slots.slots)


def test_staleness_through_the_exchanger_uses_the_previous_steps_rows():
    for halo_n_id, halos, evaluation, keys in launch(_stale, 2):
        assert keys == ["x"]  # one pipeline, in the layer's slots, under the call site's key
        expected = [_global(60, seed=s)[halo_n_id] for s in (0, 0, 1)]  # step t uses step t - 1's rows
        for got, want in zip(halos, expected, strict=True):
            assert torch.equal(got, want)
        assert torch.equal(evaluation, _global(60, seed=5)[halo_n_id])  # evaluation: exact, this step's


def test_bind_replaces_fields_and_keeps_the_rest():
    plan = shard(make_cases(1)["directed"]).adj.plan
    slots = ExchangeSlots()
    exchanger = HaloExchanger(plan, None, None, slots)
    assert exchanger.options is EXACT and exchanger.world_size == 1
    assert exchanger.bind(plan=plan, group=None, slots=slots) is exchanger  # nothing changes
    int8 = exchanger.bind(options=HaloOptions(precision="int8"))
    assert (int8.plan, int8.group, int8.slots, int8.options.precision) == (plan, None, slots, "int8")
    assert int8.exact.options is EXACT and int8.exact.slots is None
    with pytest.raises(AttributeError):
        int8.plan = plan  # frozen: a layer's exchanger never changes under an algorithm


def test_check_settings_is_the_one_check_of_algorithm_replication_group_and_options():
    one_and_half = sorted(n for n, a in ALGORITHMS.items() if a.replicated)
    assert check_settings("1d") is False and check_settings("auto", 2) is True
    assert check_settings("1.5d", 1, unit_grid=True) is True  # DistributedGCNConv's c = 1 grid
    cases = {
        ("fast", 1, None, None): "unknown algorithm 'fast'; choose one of",
        ("1d", 0, None, None): "replication must be a positive integer, got 0",
        ("1d", True, None, None): "replication must be a positive integer, got True",
        ("1d", 2, None, None): f"is a 1D algorithm: it needs replication = 1, got replication=2; a 1.5D "
                               f"layout needs one of {one_and_half} or 'auto'",
        ("1.5d", 1, None, None): "is a 1.5D algorithm: it needs replication > 1, got 1",
        ("auto", 2, object(), None): "do not pass group=",  # any group: pure, no process group needed
        ("oblivious", 1, None, HaloOptions(precision="int8")): "does not support halo_precision",
        ("1d_overlap", 1, None, HaloOptions(staleness=1)): None,
    }
    for (algorithm, replication, group, options), message in cases.items():
        if message is None:
            check_settings(algorithm, replication, group, options)
            continue
        with pytest.raises(ValueError) as info:
            check_settings(algorithm, replication, group, options)
        assert message in str(info.value), (algorithm, replication, str(info.value))
    with pytest.raises(ValueError, match=r"choose one of \[.*'rdma'\]$"):
        check_settings("auto", allow_auto=False)  # the statistics price named algorithms only
