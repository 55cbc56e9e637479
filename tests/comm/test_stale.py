"""Pipelined (stale) halo exchange (issue #16, part 2) at the exchange level, in real gloo runs.

Step ``t`` of training must equal a reference that feeds step ``t - 1``'s halos explicitly:
the halo rows returned at step ``t`` are the exact halo rows of ``x_{t-1}`` (step 0: of ``x_0``),
and ``x_t``'s gradient is its local gradient plus the halo gradients of step ``t - 1`` summed into
their owners (step 0: of step 0) — smoothed by ``γ`` when ``stale_smoothing`` is set.  The
reference is computed from the global graph in one process (every rank's plan, every rank's
upstream gradient); each step moves the bytes of one exact exchange each way.
"""
import pytest
import torch
import torch.distributed as dist
from graphs import make_cases

from pyg_sparsecomm import comm_counter, shard
from pyg_sparsecomm.comm.exchanger import HaloExchanger
from pyg_sparsecomm.comm.halo_options import ExchangeSlots, HaloOptions
from pyg_sparsecomm.comm.stale import IDENTITY, stale_halo_exchange
from pyg_sparsecomm.plan import comm_pattern
from pyg_sparsecomm.plan.homogeneous import rank_plan
from pyg_sparsecomm.testing import launch

STEPS, WIDTH = 4, 3


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _smoothed(values: list[torch.Tensor], gamma: float) -> list[torch.Tensor]:
    """``u_0 = v_0``, ``u_t = γ u_{t-1} + (1 - γ) v_{t-1}``: what step ``t`` uses (t ≥ 1)."""
    used = [values[0]]
    for t in range(1, len(values) + 1):
        used.append(gamma * used[-1] + (1 - gamma) * values[t - 1])
    return used[:len(values)]


class _Reference:
    """Exact halos and halo gradients of every step, from the global graph and all ranks' plans."""

    def __init__(self, data, world_size: int) -> None:
        pattern = comm_pattern(data.edge_index, data.part, data.num_nodes, world_size)
        self.plans = [rank_plan(pattern, r) for r in range(world_size)]
        n = data.num_nodes
        self.x = [_randn(10 + t, n, WIDTH) for t in range(STEPS)]            # global x_t
        self.local_up = [_randn(50 + t, n, WIDTH) for t in range(STEPS)]     # upstream of x_t's own use
        self.halo_up = [[_randn(100 * t + r, p.halo_size, WIDTH) for r, p in enumerate(self.plans)]
                        for t in range(STEPS)]                              # upstream of each rank's halo

    def halo(self, t: int, rank: int) -> torch.Tensor:
        return self.x[t][self.plans[rank].halo_n_id]

    def halo_grad(self, t: int, rank: int) -> torch.Tensor:
        """The owned rows of ``rank``: the sum of every peer's halo gradient of them at step ``t``."""
        total = torch.zeros_like(self.x[t])
        for r, plan in enumerate(self.plans):
            total.index_add_(0, plan.halo_n_id, self.halo_up[t][r])
        return total[self.plans[rank].n_id]


def _train_steps(rank, world_size, case, gamma):
    data = make_cases(world_size)[case]
    local, ref = shard(data), _Reference(data, world_size)
    plan = local.adj.plan
    options, slots, counter = HaloOptions(staleness=1, stale_smoothing=gamma), ExchangeSlots(), comm_counter()
    out = {"halo": [], "grad": [], "sent": [], "eval": None}
    for t in range(STEPS):
        counter.reset()
        x = ref.x[t][plan.n_id].clone().requires_grad_()
        halo = stale_halo_exchange(x, HaloExchanger(plan, None, options, slots), "x")
        flag = torch.ones(1)
        dist.all_reduce(flag)  # a default-group collective while the pipelined exchange is in flight
        ((halo * ref.halo_up[t][rank]).sum() + (x * ref.local_up[t][plan.n_id]).sum()).backward()
        out["halo"].append(halo.detach())
        out["grad"].append(x.grad - ref.local_up[t][plan.n_id])
        out["sent"].append((counter.bytes_sent("halo"), counter.bytes_sent("halo_grad")))
        if t == 1:
            out["eval"] = _evaluate(ref, plan, options, slots, rank)
        if t == 2:
            slots["x"].drain()  # waiting early changes nothing
    out["expected_halo"] = _smoothed([ref.halo(t, rank) for t in range(STEPS)], gamma or 0.0)
    out["expected_grad"] = _smoothed([ref.halo_grad(t, rank) for t in range(STEPS)], gamma or 0.0)
    out["exact_halo"] = [ref.halo(t, rank) for t in range(STEPS)]
    out["predicted"] = (sum(plan.send_counts) * WIDTH * 4, sum(plan.recv_counts) * WIDTH * 4)
    return out


def _evaluate(ref, plan, options, slots, rank):
    """Evaluation between training steps: exact under no_grad and with ``slots.training`` false."""
    x = (ref.x[0][plan.n_id] * 7).requires_grad_()
    with torch.no_grad():
        no_grad = stale_halo_exchange(x, HaloExchanger(plan, None, options, slots), "x")
    slots.training = False
    halo = stale_halo_exchange(x, HaloExchanger(plan, None, options, slots), "x")
    (halo * ref.halo_up[0][rank]).sum().backward()
    slots.training = True
    return {"no_grad": no_grad, "eval": halo.detach(), "expected": ref.halo(0, rank) * 7,
            "grad": x.grad, "expected_grad": ref.halo_grad(0, rank)}


CASES = [(2, "isolated", None), (2, "directed", 0.5), (3, "empty_part", None), (3, "directed", 0.25)]


@pytest.mark.parametrize("world_size,case,gamma", CASES)
def test_step_t_uses_the_halos_and_halo_gradients_of_step_t_minus_1(world_size, case, gamma):
    results = launch(_train_steps, world_size, case, gamma)
    assert any(res["predicted"] != (0, 0) for res in results)  # else the byte check is vacuous
    for rank, res in enumerate(results):
        where = f"P={world_size}, {case}, γ={gamma}, rank {rank}"
        for t in range(STEPS):
            torch.testing.assert_close(res["halo"][t], res["expected_halo"][t], msg=f"halo, step {t}, {where}")
            torch.testing.assert_close(res["grad"][t], res["expected_grad"][t], msg=f"grad, step {t}, {where}")
            assert res["sent"][t] == res["predicted"], f"bytes of step {t}, {where}"
        if res["exact_halo"][2].numel():  # the test can fail: a stale halo is not this step's
            assert not torch.allclose(res["halo"][2], res["exact_halo"][2]), where
        ev = res["eval"]
        for got in ("no_grad", "eval"):
            torch.testing.assert_close(ev[got], ev["expected"], msg=f"{got}, {where}")
        torch.testing.assert_close(ev["grad"], ev["expected_grad"], msg=f"eval gradient, {where}")


def _misuse(rank, world_size):
    cases = make_cases(world_size)
    local, other = shard(cases["directed"]), shard(cases["undirected"])
    options, slots = HaloOptions(staleness=1), ExchangeSlots()
    x = torch.randn(local.num_nodes, WIDTH, requires_grad=True)
    stale_halo_exchange(x, HaloExchanger(local.adj.plan, None, options, slots), "x").sum().backward()
    errors = {}
    for name, call in {
        "plan": lambda: stale_halo_exchange(torch.randn(other.num_nodes, WIDTH),
                                            HaloExchanger(other.adj.plan, None, options, slots), "x"),
        "width": lambda: stale_halo_exchange(torch.randn(local.num_nodes, WIDTH + 1),
                                             HaloExchanger(local.adj.plan, None, options, slots), "x"),
        "rows": lambda: stale_halo_exchange(torch.randn(local.num_nodes + 1, WIDTH),
                                            HaloExchanger(local.adj.plan, None, options, slots), "x"),
    }.items():
        try:
            call()
        except ValueError as e:
            errors[name] = str(e)
    return errors


def test_staleness_refuses_mini_batch_plans_and_composes_with_compressed_payloads():
    from dataclasses import replace

    from pyg_sparsecomm.comm.stale import payload_codecs
    local = shard(make_cases(1)["directed"])
    with pytest.raises(ValueError, match="staleness needs full-graph training on the same shard"):
        stale_halo_exchange(local.x, HaloExchanger(replace(local.adj.plan, minibatch=True), None,
                                                  HaloOptions(staleness=1), ExchangeSlots()))
    rows, grads = payload_codecs(HaloOptions(precision="int8", grad_precision=None, staleness=1))
    assert getattr(rows, "precision", None) == "int8" and grads is IDENTITY


def test_a_changed_plan_or_row_shape_is_refused():
    for errors in launch(_misuse, 2):
        assert "staleness needs full-graph training on the same shard" in errors["plan"]
        assert "previous step's halos cannot stand in" in errors["width"]
        assert "this rank owns" in errors["rows"]


def _dropped_pipelines(rank, world_size):
    import gc

    from pyg_sparsecomm.comm.halo import start_p2p_rows
    data = make_cases(world_size)["directed"]
    local, ref = shard(data), _Reference(data, world_size)
    plan, options, halos = local.adj.plan, HaloOptions(staleness=1), []
    for round_ in range(4):
        slots = ExchangeSlots()  # a new model: a new pipeline on the same dedicated group
        for t in range(2):
            x = (ref.x[t][plan.n_id] + round_).requires_grad_()
            halo = stale_halo_exchange(x, HaloExchanger(plan, None, options, slots), "x", start_p2p_rows)
            (halo * ref.halo_up[t][rank]).sum().backward()
            halos.append((halo.detach(), ref.halo(0, rank) + round_))
        del slots, x, halo  # dropped with both exchanges of its last step in flight
        gc.collect()
    return halos


def test_a_dropped_pipeline_does_not_disturb_the_next_one():
    """Point-to-point exchanges in flight when their pipeline is dropped still complete; the next
    pipeline's messages are not matched with theirs."""
    for halos in launch(_dropped_pipelines, 3, timeout=200, pg_timeout=20):
        for got, expected in halos:
            torch.testing.assert_close(got, expected)
