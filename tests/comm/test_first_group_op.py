"""A process group's first operation is a collective every member joins (issue #24, defect 3).

NCCL creates a group's communicator at its first operation, and the first *batched*
point-to-point call on a group must involve every rank.  ``staleness=1`` with
``algorithm="1d_overlap_p2p"`` exchanges on a dedicated pipeline group with
``batch_isend_irecv`` to the peers that have rows only: a rank without rows (an empty part)
posts nothing.  Gloo does not care, so the test records, in real gloo runs, the first
operation each rank issues on every process group and checks that it is the same
collective on every rank of the group — never a point-to-point batch.
"""
import torch.distributed as dist
from graphs import make_cases

from pyg_sparsecomm import shard
from pyg_sparsecomm.comm.exchanger import HaloExchanger
from pyg_sparsecomm.comm.halo import start_p2p_rows
from pyg_sparsecomm.comm.halo_options import ExchangeSlots, HaloOptions
from pyg_sparsecomm.comm.stale import stale_halo_exchange
from pyg_sparsecomm.testing import launch

#: torch.distributed calls recorded: name -> how to find the group among the arguments
_RECORDED = ("all_reduce", "all_to_all_single", "broadcast", "barrier", "all_gather", "all_gather_object", "reduce")


def _record_first_ops(first: dict) -> None:
    """Wraps torch.distributed's calls so that ``first[group]`` is the name of the first call on it."""
    def note(name: str, group) -> None:
        key = group if group is not None else dist.distributed_c10d._get_default_group()
        first.setdefault(key, name)

    def wrap(name: str):
        original = getattr(dist, name)

        def call(*args, **kwargs):
            note(name, kwargs.get("group"))
            return original(*args, **kwargs)
        setattr(dist, name, call)
    for name in _RECORDED:
        wrap(name)
    batch = dist.batch_isend_irecv

    def batch_isend_irecv(ops):
        for op in ops:
            note("batch_isend_irecv", op.group)
        return batch(ops)
    dist.batch_isend_irecv = batch_isend_irecv


def _stale_p2p_steps(rank: int, world_size: int) -> dict:
    from pyg_sparsecomm.comm import stale
    data = make_cases(world_size)["empty_part"]  # the last rank owns nothing: no rows either way
    local = shard(data)
    plan = local.adj.plan
    first: dict = {}
    _record_first_ops(first)
    slots, options = ExchangeSlots(), HaloOptions(staleness=1)
    for step in range(3):
        x = (local.x + step).requires_grad_()
        halo = stale_halo_exchange(x, HaloExchanger(plan, None, options, slots), "x", start_p2p_rows)
        (halo.sum() + x.sum()).backward()
    pipeline = [stale.pipeline_group(None)]  # the cached group the steps used
    return {"pipeline": [first.get(g) for g in pipeline],
            "world": first.get(dist.distributed_c10d._get_default_group()),
            "rows": sum(plan.send_counts) + sum(plan.recv_counts)}


def test_first_operation_on_the_stale_p2p_pipeline_group_is_a_collective_of_every_rank():
    results = launch(_stale_p2p_steps, 3, timeout=200, pg_timeout=30)
    assert results[2]["rows"] == 0 and results[0]["rows"] > 0  # the case has a rank without rows
    firsts = {tuple(res["pipeline"]) for res in results}
    assert len(firsts) == 1, f"ranks disagree on the pipeline group's first operation: {firsts}"
    (pipeline_firsts,) = firsts
    assert pipeline_firsts and all(op == "all_reduce" for op in pipeline_firsts), pipeline_firsts


def _p2p_on_the_default_group(rank: int, world_size: int) -> tuple:
    data = make_cases(world_size)["empty_part"]
    local = shard(data)
    first: dict = {}
    _record_first_ops(first)
    plan = local.adj.plan
    recv, work = start_p2p_rows(local.x[plan.send_index], plan.send_counts, plan.recv_counts, None)
    work.wait()
    # a later group: the first call on it is the collective too
    group = dist.new_group(list(range(world_size)))
    first.pop(group, None)
    start_p2p_rows(local.x[plan.send_index], plan.send_counts, plan.recv_counts, group)[1].wait()
    return first.get(dist.distributed_c10d._get_default_group()), first.get(group)


def test_first_point_to_point_exchange_on_a_group_is_preceded_by_a_collective():
    """The default group and a user's group: ``start_p2p_rows`` joins every rank first."""
    assert launch(_p2p_on_the_default_group, 3, timeout=200, pg_timeout=30) == [("all_reduce", "all_reduce")] * 3
