"""Negatives of bipartite and typed pairs (issue 48, item 2).

``negative_sampling(edge_index, (num_src, num_dst))`` as PyG's bipartite call (sources in
``[0, num_src)``, targets in ``[0, num_dst)``, ``i = j`` allowed, no edge, PyG's counts, a uniform
subset of the non-edges as PyG draws one) and ``structured_negative_sampling`` with bipartite sizes;
``hetero_negative_sampling`` / ``hetero_structured_negative_sampling`` of an edge type.  One launch
per P = 2, 3 (gloo) draws, for two partitions (the package's and one where the last rank owns no
user), from the whole partitioned ``HeteroData`` and from the rank's shard, with ``epoch=`` and
without (calls counted): every rank's share is the single process's draw filtered to the sources it
owns, in order, so the union is the same set for any P and partition.  Bad edge types and ids out
of range raise, naming the fix.
"""
import importlib
import random

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.utils import negative_sampling as pyg_negative_sampling

from pyg_sparsecomm import SparsityAwarePartitioner, shard
from pyg_sparsecomm.link.hetero_negatives import hetero_negative_sampling, hetero_structured_negative_sampling
from pyg_sparsecomm.link.negative_sampling import negative_sampling, structured_negative_sampling
from pyg_sparsecomm.testing import launch

USERS, ITEMS = 13, 9
RATES, REV, SIMILAR = ("user", "rates", "item"), ("item", "rated_by", "user"), ("item", "similar", "item")
#: the module (its ``_COUNTED_EPOCHS``: the epoch of the n-th call without ``epoch=`` is that + n)
sampler = importlib.import_module("pyg_sparsecomm.link.negative_sampling")


def _graph() -> HeteroData:
    """Users 11, 12 rate nothing; items 7, 8 nobody rated; a directed item-item relation."""
    gen = torch.Generator().manual_seed(5)
    data = HeteroData()
    data["user"].x = torch.randn(USERS, 3, generator=gen)
    data["item"].x = torch.randn(ITEMS, 3, generator=gen)
    rated = torch.unique(torch.stack([torch.randint(0, 11, (45,), generator=gen),
                                      torch.randint(0, 7, (45,), generator=gen)]), dim=1)
    data[RATES].edge_index = rated[:, torch.randperm(rated.size(1), generator=gen)]
    data[REV].edge_index = data[RATES].edge_index.flip(0)
    data[SIMILAR].edge_index = torch.randint(0, ITEMS, (2, 14), generator=gen)
    return data


def _partitions(data: HeteroData, P: int) -> list[dict[str, torch.Tensor]]:
    """The package's heterogeneous partition, and one where rank P - 1 owns no user."""
    ours = SparsityAwarePartitioner(num_parts=P)(data.clone())
    uneven = {"user": torch.arange(USERS) % max(P - 1, 1), "item": (ITEMS - 1 - torch.arange(ITEMS)) % P}
    return [{t: ours[t].part for t in data.node_types}, uneven]


def _partitioned(data: HeteroData, part: dict[str, torch.Tensor], P: int) -> HeteroData:
    out = data.clone()
    for node_type, owner in part.items():
        out[node_type].part = owner
    out.num_parts = P
    return out


def _draws(data: HeteroData, rank=None) -> dict:
    """Every sampler of a relation: with epoch=, and two calls without (fresh, counted)."""
    return {"neg": hetero_negative_sampling(data, RATES, 40, seed=1, epoch=0, rank=rank),
            "ratio": hetero_negative_sampling(data, RATES, 1.5, epoch=1, rank=rank),
            "same_type": hetero_negative_sampling(data, SIMILAR, 12, epoch=0, rank=rank),
            "fresh": [hetero_negative_sampling(data, RATES, 20, rank=rank) for _ in range(2)],
            "structured": hetero_structured_negative_sampling(data, RATES, seed=2, epoch=0, rank=rank),
            "structured_same": hetero_structured_negative_sampling(data, SIMILAR, False, epoch=0, rank=rank)}


def _reference(data: HeteroData, first_call: int = 0) -> dict:
    """The single process's draws, by the plain samplers (the counted calls at their epochs: the
    process made ``first_call`` such calls before)."""
    rates, similar = data[RATES].edge_index, data[SIMILAR].edge_index
    counted = sampler._COUNTED_EPOCHS
    return {"neg": negative_sampling(rates, (USERS, ITEMS), 40, seed=1, epoch=0),
            "ratio": negative_sampling(rates, (USERS, ITEMS), 1.5, epoch=1),
            "same_type": negative_sampling(similar, ITEMS, 12, epoch=0),
            "fresh": [negative_sampling(rates, (USERS, ITEMS), 20, epoch=counted + first_call + n)
                      for n in range(2)],
            "structured": structured_negative_sampling(rates, (USERS, ITEMS), seed=2, epoch=0),
            "structured_same": structured_negative_sampling(similar, ITEMS, False, epoch=0)}


def _error(fn, *args, **kwargs) -> str:
    try:
        fn(*args, **kwargs)
    except ValueError as e:
        return str(e)
    return "no error"


def _worker(rank: int, world_size: int) -> list:
    torch.set_num_threads(1)
    data, out = _graph(), []
    for part in _partitions(data, world_size):
        whole = _partitioned(data, part, world_size)
        local = shard(whole)
        out.append({"whole": _draws(whole), "shard": _draws(local), "part": part})
    bad = whole.clone()
    bad[RATES].edge_index = torch.tensor([[0, USERS], [1, 2]])
    out.append([_error(hetero_negative_sampling, local, ("item", "rates", "user")),  # each rank raises
                _error(hetero_structured_negative_sampling, bad, RATES),
                _error(hetero_negative_sampling, data, RATES, epoch=0)])  # no partition: not every pair per rank
    return out


def _share(reference, owner: torch.Tensor, rank: int):
    """The pairs (or triplets) of ``reference`` whose source ``rank`` owns, in order."""
    if isinstance(reference, list):
        return [_share(r, owner, rank) for r in reference]
    if isinstance(reference, tuple):
        mine = owner[reference[0]] == rank
        return tuple(t[mine] for t in reference)
    return reference[:, owner[reference[0]] == rank]


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return torch.equal(a, b)


@pytest.mark.parametrize("P", [2, 3, 4])
def test_same_negatives_for_any_p_and_partition(P):
    data = _graph()
    per_rank = launch(_worker, P, timeout=300)
    for which in range(2):  # the two partitions
        part = per_rank[0][which]["part"]
        for source in ("whole", "shard"):  # each made two calls without epoch=, counted from 0
            reference = _reference(data, first_call=4 * which + 2 * (source == "shard"))
            for key, ref in reference.items():
                owner = part["item"] if key in ("same_type", "structured_same") else part["user"]
                for r in range(P):
                    got = per_rank[r][which][source][key]
                    assert _equal(got, _share(ref, owner, r)), f"P={P} partition {which} {source} {key} rank {r}"
        assert reference["neg"].size(1) == 40 and reference["ratio"].size(1) == int(1.5 * data[RATES].num_edges)
        for key, ref in reference.items():
            if not isinstance(ref, (list, tuple)):  # the ranks' union is the reference's set
                union = torch.cat([per_rank[r][which]["whole"][key] for r in range(P)], dim=1)
                assert sorted(map(tuple, union.t().tolist())) == sorted(map(tuple, ref.t().tolist()))
        if which == 1:
            assert per_rank[P - 1][which]["whole"]["neg"].size(1) == 0  # rank P - 1 owns no user
    for r in range(P):  # a bad edge type or ids out of range: an error naming the fix on every rank
        wrong_type, out_of_range, unpartitioned = per_rank[r][2]
        assert "has no partition, so every rank would draw every negative" in unpartitioned
        assert "not a relation of this graph: pass one of its edge types" in wrong_type
        assert f"holds id {USERS} but the bipartite sizes" in out_of_range and "data[src].num_nodes" in out_of_range


def test_one_process_partitioned_or_not_and_simulated_ranks(monkeypatch):
    monkeypatch.setattr(sampler, "_CALLS", {})  # the calls without epoch= here are not other tests'
    data = _graph()
    counted = {key: value for key, value in _reference(data).items() if key != "fresh"}
    assert _equal({k: v for k, v in _draws(data).items() if k != "fresh"}, counted)  # no partition: every pair
    for P in (1, 2, 3):
        for part in _partitions(data, P):
            whole = _partitioned(data, part, P)
            for r in range(P):  # rank= draws a rank's share of the whole partitioned graph
                mine = {k: v for k, v in _draws(whole, rank=r).items() if k != "fresh"}
                for key, ref in counted.items():
                    owner = part["item"] if key in ("same_type", "structured_same") else part["user"]
                    assert _equal(mine[key], _share(ref, owner, r)), (P, r, key)


def test_bipartite_ranges_counts_and_no_positive():
    data = _graph()
    rates = data[RATES].edge_index
    positives = set(map(tuple, rates.t().tolist()))
    for request in (None, 0.5, 2.0, 25, 0):
        ours = negative_sampling(rates, (USERS, ITEMS), request, epoch=3)
        random.seed(0)
        pyg = pyg_negative_sampling(rates, (USERS, ITEMS), request)
        assert ours.size(1) == pyg.size(1), request  # PyG's count (enough non-edges here)
        pairs = set(map(tuple, ours.t().tolist()))
        assert len(pairs) == ours.size(1) and not pairs & positives
        assert all(0 <= i < USERS and 0 <= j < ITEMS for i, j in pairs)
    # force_undirected means nothing between two types: ignored, as PyG's
    assert torch.equal(negative_sampling(rates, (USERS, ITEMS), 30, force_undirected=True, epoch=4),
                       negative_sampling(rates, (USERS, ITEMS), 30, epoch=4))
    assert negative_sampling(rates, [USERS, ITEMS], 30, epoch=4).size(1) == 30  # a list, as PyG's
    # more than exist: every non-edge once, i = j included (a user and an item are two nodes)
    every = negative_sampling(rates, (USERS, ITEMS), 10 ** 4, epoch=5)
    assert every.size(1) == USERS * ITEMS - len(positives) and (every[0] == every[1]).any()
    i, j, k = structured_negative_sampling(rates, (USERS, ITEMS), epoch=6)
    assert torch.equal(i, rates[0]) and torch.equal(j, rates[1])
    assert int(k.max()) < ITEMS and not set(zip(i.tolist(), k.tolist(), strict=True)) & positives


def test_dense_rows_pick_among_the_remaining_targets():
    """A source linked to all targets but one: the rejection rounds may miss it, the fallback not."""
    num_dst = 300
    rows = torch.cat([torch.zeros(num_dst - 1, dtype=torch.long), torch.ones(num_dst - 2, dtype=torch.long)])
    cols = torch.cat([torch.arange(1, num_dst), torch.arange(2, num_dst)])
    edge_index = torch.stack([rows, cols])
    for epoch in range(3):
        neg = negative_sampling(edge_index, (2, num_dst), 3, epoch=epoch)
        assert sorted(map(tuple, neg.t().tolist())) == [(0, 0), (1, 0), (1, 1)]
        _, _, k = structured_negative_sampling(edge_index, (2, num_dst), epoch=epoch)
        assert set(k[rows == 0].tolist()) == {0} and set(k[rows == 1].tolist()) <= {0, 1}


def test_uniform_over_the_non_edges_as_pyg():
    """Every non-edge (i, j), i = j included, as often as PyG draws it: k / (non-edges) per draw."""
    num_src, num_dst, k, draws = 4, 5, 6, 1500
    edge_index = torch.tensor([[0, 0, 1, 2, 3, 3], [0, 4, 2, 2, 1, 3]])
    non_edges = num_src * num_dst - 6
    ours, pyg = torch.zeros(num_src * num_dst), torch.zeros(num_src * num_dst)
    random.seed(0)
    for epoch in range(draws):
        neg = negative_sampling(edge_index, (num_src, num_dst), k, seed=7, epoch=epoch)
        ours += torch.bincount(neg[0] * num_dst + neg[1], minlength=num_src * num_dst)
        ref = pyg_negative_sampling(edge_index, (num_src, num_dst), k)
        pyg += torch.bincount(ref[0] * num_dst + ref[1], minlength=num_src * num_dst)
    allowed = ours > 0
    assert int(allowed.sum()) == non_edges and torch.equal(allowed, pyg > 0)
    assert not allowed[edge_index[0] * num_dst + edge_index[1]].any()
    assert float((ours[allowed] / draws - k / non_edges).abs().max()) < 0.05
    assert float((pyg[allowed] / draws - k / non_edges).abs().max()) < 0.05
    counts = torch.zeros(num_dst)  # structured: k uniform over source 0's non-neighbours 1, 2, 3
    for epoch in range(draws):
        i, _, kk = structured_negative_sampling(edge_index, (num_src, num_dst), seed=8, epoch=epoch)
        counts += torch.bincount(kk[i == 0], minlength=num_dst)
    assert counts[0] == 0 and counts[4] == 0
    assert float((counts[1:4] / counts.sum() - 1 / 3).abs().max()) < 0.03


def test_errors_name_the_fix(monkeypatch):
    data = _graph()
    rates = data[RATES].edge_index
    with pytest.raises(ValueError, match=r"edge_index\[1\] holds id 6 .*allow target ids 0..5.*data\[dst\]"):
        negative_sampling(rates, (USERS, 6))
    with pytest.raises(ValueError, match=r"edge_index\[0\] holds id 10 .*allow source ids 0..9"):
        structured_negative_sampling(rates, (10, ITEMS))
    with pytest.raises(ValueError, match="edge_index holds id -1|edge_index\\[0\\] holds id -1"):
        negative_sampling(torch.tensor([[-1], [0]]), 4)
    with pytest.raises(ValueError, match="two integers >= 0"):
        negative_sampling(rates, (USERS, ITEMS, 2))
    with pytest.raises(ValueError, match=r"\[2, num_edges\] integer tensor"):
        negative_sampling(rates.float(), (USERS, ITEMS))
    with pytest.raises(ValueError, match="contains_neg_self_loops=False means nothing"):
        structured_negative_sampling(rates, (USERS, ITEMS), False)
    with pytest.raises(ValueError, match="owner of 9 nodes but there are 13 source nodes.*data\\[src\\].part"):
        negative_sampling(rates, (USERS, ITEMS), epoch=0, part=torch.zeros(ITEMS, dtype=torch.long))
    full = torch.stack(torch.meshgrid(torch.arange(2), torch.arange(3), indexing="ij")).reshape(2, -1)
    with pytest.raises(ValueError, match="linked to every node of the target type"):
        structured_negative_sampling(full, (2, 3), epoch=0)
    with pytest.raises(ValueError, match="not a relation of this graph: pass one of its edge types"):
        hetero_negative_sampling(data, ("item", "rates", "user"), epoch=0)
    with pytest.raises(ValueError, match="tuple of strings"):
        hetero_structured_negative_sampling(data, "rates", epoch=0)
    with pytest.raises(ValueError, match="from a HeteroData"):
        hetero_negative_sampling(data.to_homogeneous(), RATES, epoch=0)
    local = shard(_partitioned(data, {"user": torch.zeros(USERS, dtype=torch.long),
                                      "item": torch.zeros(ITEMS, dtype=torch.long)}, 1))
    with pytest.raises(ValueError, match="'user' has no partition.*pass the partitioned HeteroData"):
        hetero_negative_sampling(data, RATES, epoch=0, rank=0)
    with pytest.raises(ValueError, match="rank= draws a rank's share .*not a shard"):
        hetero_negative_sampling(local, RATES, epoch=0, rank=0)
    assert _equal(hetero_negative_sampling(local, RATES, 30, epoch=0),  # a one-rank shard draws the whole graph's
                  negative_sampling(rates, (USERS, ITEMS), 30, epoch=0))
    assert np.array_equal(hetero_negative_sampling(data, RATES, 30, epoch=0).numpy(),
                          negative_sampling(rates, (USERS, ITEMS), 30, epoch=0).numpy())
