"""Pairs of a relation of a heterogeneous graph (issue 48, item 1) against single-process PyG.

One launch per P = 1..3 checks, on a directed ('user', 'rates', 'item') relation with isolated users and
items nobody rated (P = 3: rank 2 owns no user): the scores z_user[s] . z_item[t] of the pairs every
rank holds (from the partitioned HeteroData, from its shard, from a {type: part} dict) equal the single
process's; the backward gives the single-process gradient of every owned row; the bytes counted equal
the predicted bytes and the rows each rank needs, each remote endpoint once; a user-user relation
shares one exchange; a bad edge type and pairs naming nodes out of range raise on every rank, naming
the fix.
"""
import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_sparsecomm import comm_counter, shard
from pyg_sparsecomm.link import distribute_pairs, local_pairs
from pyg_sparsecomm.testing import launch

USERS, ITEMS, WIDTH = 11, 9, 4
RATES, FOLLOWS = ("user", "rates", "item"), ("user", "follows", "user")


def _graph(P: int) -> tuple[HeteroData, torch.Tensor]:
    """Users 9, 10 rate nothing; items 7, 8 nobody rated; pairs: positives and negatives touching both."""
    gen = torch.Generator().manual_seed(3)
    data = HeteroData()
    data["user"].x = torch.randn(USERS, WIDTH, generator=gen)
    data["item"].x = torch.randn(ITEMS, WIDTH, generator=gen)
    rated = torch.stack([torch.randint(0, 9, (30,), generator=gen), torch.randint(0, 7, (30,), generator=gen)])
    data[RATES].edge_index = rated
    data["item", "rated_by", "user"].edge_index = rated.flip(0)
    data[FOLLOWS].edge_index = torch.randint(0, USERS, (2, 12), generator=gen)
    if P == 3:  # rank 2 owns no user
        data["user"].part = torch.arange(USERS) % 2
    else:
        data["user"].part = torch.randint(0, P, (USERS,), generator=torch.Generator().manual_seed(P))
    data["item"].part = torch.randint(0, P, (ITEMS,), generator=torch.Generator().manual_seed(10 + P))
    data.num_parts = P
    pairs = torch.cat([rated[:, :20], torch.tensor([[9, 10, 0, 3, 9], [7, 2, 8, 8, 0]])], dim=1)
    return data, pairs


def _remote_rows(ids: torch.Tensor, part: torch.Tensor, rank: int) -> int:
    return int(torch.unique(ids[part[ids] != rank]).numel())


def _check_relation(rank, data, local, pairs, part_form, z_user, z_item, reference):
    """Scores, gradients and bytes of one distribute_pairs call against the single process."""
    z = {"user": z_user[local["user"].n_id].clone().requires_grad_(),
         "item": z_item[local["item"].n_id].clone().requires_grad_()}
    held = distribute_pairs(pairs, torch.arange(pairs.size(1), dtype=torch.float), part_form, edge_type=RATES)
    weight = torch.linspace(0.5, 1.5, pairs.size(1))
    counter = comm_counter()
    sent, received = counter.bytes_sent("halo"), counter.bytes_received("halo")
    src, dst = held.gather(z)
    score = (src * dst).sum(-1)
    sent, received = counter.bytes_sent("halo") - sent, counter.bytes_received("halo") - received
    (score * weight[held.pair_id]).sum().backward()
    predicted = held.predicted_bytes(WIDTH)
    # each remote endpoint once: sources of the user type, targets of the item type
    mine = held.edge_label_index
    needed = (_remote_rows(mine[0], data["user"].part, rank) + _remote_rows(mine[1], data["item"].part, rank))
    return {"score": score.detach(), "expected": reference["score"][held.pair_id],
            "label": held.edge_label, "pair_id": held.pair_id,
            "grad_user": z["user"].grad, "grad_user_ref": reference["grad_user"][local["user"].n_id],
            "grad_item": z["item"].grad, "grad_item_ref": reference["grad_item"][local["item"].n_id],
            "bytes": (sent, received), "predicted": (predicted["sent"], predicted["received"]),
            "needed_bytes": needed * WIDTH * 4}


def _reference(pairs: torch.Tensor, z_user: torch.Tensor, z_item: torch.Tensor) -> dict:
    """The single process: the scores and the gradients of sum_k w_k z_user[s_k] . z_item[t_k]."""
    zu, zi = z_user.clone().requires_grad_(), z_item.clone().requires_grad_()
    score = (zu[pairs[0]] * zi[pairs[1]]).sum(-1)
    (score * torch.linspace(0.5, 1.5, pairs.size(1))).sum().backward()
    return {"score": score.detach(), "grad_user": zu.grad, "grad_item": zi.grad}


def _errors(rank, local, pairs) -> list[str]:
    messages = []
    for call in (lambda: distribute_pairs(pairs, part=local, edge_type=("user", "rates", "movie")),
                 lambda: distribute_pairs(pairs, part=local, edge_type=("item", "rates", "user")),
                 lambda: distribute_pairs(torch.tensor([[0], [ITEMS + 2]]), part=local, edge_type=RATES),
                 lambda: local_pairs(torch.tensor([[USERS], [0]]) if rank == 0 else torch.zeros(2, 0, dtype=torch.long),
                                     local, edge_type=RATES)):
        with pytest.raises(ValueError) as info:
            call()
        messages.append(str(info.value))
    return messages


def _worker(rank, world_size):
    data, pairs = _graph(world_size)
    local = shard(data)
    gen = torch.Generator().manual_seed(7)
    z_user, z_item = torch.randn(USERS, WIDTH, generator=gen), torch.randn(ITEMS, WIDTH, generator=gen)
    reference = _reference(pairs, z_user, z_item)
    forms = {"hetero data": data, "shard": local, "dict": {"user": data["user"].part, "item": data["item"].part}}
    out = {name: _check_relation(rank, data, local, pairs, form, z_user, z_item, reference)
           for name, form in forms.items()}
    # a rank's own pairs (any endpoints) and a user-user relation: one plan, one exchange
    own = pairs[:, rank::world_size]
    held = local_pairs(own, data, edge_type=RATES)
    z = {"user": z_user[local["user"].n_id], "item": z_item[local["item"].n_id]}
    out["own"] = ((held.gather(z)[0] * held.gather(z)[1]).sum(-1), (z_user[own[0]] * z_item[own[1]]).sum(-1))
    follows = data[FOLLOWS].edge_index
    held = distribute_pairs(follows, part=local, edge_type=FOLLOWS)
    src, dst = held.gather(z)
    out["follows"] = ((src * dst).sum(-1), (z_user[follows[0]] * z_user[follows[1]]).sum(-1)[held.pair_id],
                      list(held.plans))
    out["errors"] = _errors(rank, local, pairs)
    return out


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_hetero_pairs_equal_single_process(world_size):
    per_rank = launch(_worker, world_size, timeout=300)
    _, pairs = _graph(world_size)
    for form in ("hetero data", "shard", "dict"):
        held = torch.cat([out[form]["pair_id"] for out in per_rank])
        assert torch.equal(torch.sort(held).values, torch.arange(pairs.size(1))), f"{form}: every pair held once"
        for rank, out in enumerate(per_rank):
            result = out[form]
            torch.testing.assert_close(result["score"], result["expected"], msg=f"{form}, rank {rank}: scores")
            assert torch.equal(result["label"], result["pair_id"].float()), f"{form}, rank {rank}: labels follow pairs"
            torch.testing.assert_close(result["grad_user"], result["grad_user_ref"], msg=f"rank {rank}: user grads")
            torch.testing.assert_close(result["grad_item"], result["grad_item_ref"], msg=f"rank {rank}: item grads")
            assert result["bytes"] == result["predicted"], f"{form}, rank {rank}: counted != predicted bytes"
            assert result["bytes"][1] == result["needed_bytes"], f"{form}, rank {rank}: each needed row once"
        if world_size > 1:
            assert sum(out[form]["bytes"][1] for out in per_rank) > 0, "nothing was exchanged: a vacuous test"
    if world_size == 3:
        assert per_rank[2]["shard"]["score"].numel() == 0, "rank 2 owns no user, so holds no pair"
    for rank, out in enumerate(per_rank):
        torch.testing.assert_close(*out["own"], msg=f"rank {rank}: its own pairs")
        torch.testing.assert_close(out["follows"][0], out["follows"][1], msg=f"rank {rank}: user-user pairs")
        assert out["follows"][2] == ["user"], "a relation within one type shares one exchange"
        bad_type, reversed_type, out_of_range, local_out_of_range = out["errors"]
        assert "not a relation of this graph" in bad_type and "('user', 'rates', 'item')" in bad_type
        assert "not a relation of this graph" in reversed_type
        assert f"holds id {ITEMS + 2} but node type 'item' has {ITEMS} nodes" in out_of_range
        assert "own numbering" in out_of_range
        assert f"holds id {USERS} but node type 'user'" in local_out_of_range, "rank 0's bad pairs raise everywhere"
