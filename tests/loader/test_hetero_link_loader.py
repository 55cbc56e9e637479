"""``DistributedLinkNeighborLoader`` on ``HeteroData`` shards == the single-process reference of the same
batches (``hetero_link_global_batches``), one gloo launch per P = 1..3, on a user–item graph with a
directed relation (``follows``), isolated users, items nobody rated and, at P = 3, a part owning no
user: every batch's pairs, labels and negatives (binary and triplet), its nodes and edges per type, the
rows ``z_dict[dst][edge_label_index[1]]`` / ``z[dst_pos_index]`` / ``z[dst_neg_index]`` bring, and the
loss curve and gradients of a ``to_hetero(SAGE)`` encoder with a dot-product decoder trained on them;
pairs within one node type (``follows``: one seed set of both ends); the refusals, on every rank."""
import functools

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero
from torch_geometric.sampler import NegativeSampling

from pyg_sparsecomm import distribute, distributed_loss, shard
from pyg_sparsecomm.loader import DistributedLinkNeighborLoader, HeteroNeighborSampling
from pyg_sparsecomm.sampling.link_rules import LinkBatching, hetero_link_global_batches
from pyg_sparsecomm.testing import launch

USERS, ITEMS, FEATURES, PAIRS, BATCH, SEED, EPOCHS = 20, 15, 4, 24, 8, 3, 2
RATES, REV, FOLLOWS = ("user", "rates", "item"), ("item", "rev_rates", "user"), ("user", "follows", "user")
FANOUTS = {RATES: [3, 2], REV: [2, 2], FOLLOWS: [-1, 1]}
MODES = {"binary": "binary", "triplet": NegativeSampling("triplet", amount=2)}


def make_graph():
    gen = torch.Generator().manual_seed(4)
    data = HeteroData()
    data["user"].x = torch.randn(USERS, FEATURES, generator=gen)
    data["item"].x = torch.randn(ITEMS, FEATURES, generator=gen)
    rates = torch.stack([torch.randint(4, USERS, (50,), generator=gen),  # users 0..3 rate nothing
                         torch.randint(0, ITEMS - 3, (50,), generator=gen)])  # items 12..14 nobody rated
    data[RATES].edge_index = rates
    data[REV].edge_index = rates.flip(0)
    data[FOLLOWS].edge_index = torch.randint(4, USERS, (2, 25), generator=gen)  # directed, no reverse
    pairs = torch.stack([torch.randint(0, USERS, (PAIRS,), generator=gen), torch.randint(0, ITEMS, (PAIRS,),
                                                                                          generator=gen)])
    return data, pairs, torch.rand(PAIRS, generator=gen).round()


def partition(data, P):
    data = data.clone()
    gen = torch.Generator().manual_seed(P)
    data["user"].part = torch.arange(USERS) % 2 if P == 3 else torch.randint(0, P, (USERS,), generator=gen)
    data["item"].part = torch.randint(0, P, (ITEMS,), generator=gen)
    data.num_parts = P
    return data


class SAGE(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(FEATURES, 8), SAGEConv(8, 8)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def build(data):
    torch.manual_seed(0)
    return to_hetero(SAGE(), (["user", "item"], [RATES, REV, FOLLOWS]), aggr="sum")


def loss_of(mode, z_dict, index, reduce):
    """BCE of the dot products (binary), or of positive minus negative scores (triplet, BPR's form)."""
    z_user, z_item = z_dict["user"], z_dict["item"]
    if mode == "binary":
        eli, label = index
        score = (z_user[eli[0]] * z_item[eli[1]]).sum(-1)
        return reduce(F.binary_cross_entropy_with_logits, score, (label > 0).float())
    src, pos, neg = index
    z_src = z_user[src]
    diff = ((z_src * z_item[pos]).sum(-1)[:, None] - (z_src[:, None] * z_item[neg]).sum(-1)).view(-1)
    return reduce(F.binary_cross_entropy_with_logits, diff, torch.ones_like(diff))


def _worker(rank, P, data, pairs, label):
    local = shard(partition(data, P))
    out = {}
    for mode, neg_sampling in MODES.items():
        loader = DistributedLinkNeighborLoader(local, FANOUTS, (RATES, pairs), label if mode == "binary" else None,
                                               neg_sampling=neg_sampling, batch_size=BATCH, shuffle=True, seed=SEED)
        model = distribute(build(local))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        batches, losses, grads = [], [], []
        for _ in range(EPOCHS):
            for batch in loader:
                if mode == "binary":
                    eli = batch[RATES].edge_label_index
                    index = (eli, batch[RATES].edge_label)
                    held = eli.global_ids
                    rows = (batch["user"].x[eli[0]], batch["item"].x[eli[1]])
                else:
                    index = (batch["user"].src_index, batch["item"].dst_pos_index, batch["item"].dst_neg_index)
                    held = torch.stack([batch["user"].n_id[index[0]], index[1].global_ids])
                    rows = (batch["user"].x[index[0]], batch["item"].x[index[1]], batch["item"].x[index[2]],
                            index[2].global_ids)
                batches.append({"n_id": {t: batch[t].n_id for t in batch.node_types},
                                "e_id": {et: batch[et].e_id for et in batch.edge_types}, "held": held,
                                "label": batch[RATES].get("edge_label"), "input_id": batch[RATES].input_id,
                                "rows": rows})
                opt.zero_grad()
                loss = loss_of(mode, model(batch.x_dict, batch.adj_dict), index, distributed_loss)
                loss.backward()
                grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
                opt.step()
                losses.append(float(loss.detach()))
        out[mode] = (batches, losses, grads)
    out["errors"] = _errors(rank, P, data, local, pairs)
    out["follows"] = _within_one_type(local, pairs)
    return out


def _within_one_type(local, pairs):
    """Pairs of a relation within one node type (``follows``, directed): one seed set of both ends."""
    follows = pairs % USERS
    loader = DistributedLinkNeighborLoader(local, [2, 1], (FOLLOWS, follows), neg_sampling="binary", batch_size=BATCH,
                                           seed=SEED)
    out = []
    for batch in loader:
        eli = batch[FOLLOWS].edge_label_index
        out.append(({t: batch[t].n_id for t in batch.node_types}, eli.global_ids,
                    batch["user"].x[eli[0]], batch["user"].x[eli[1]]))
    return out


def _errors(rank, P, data, local, pairs):
    """The messages of every refused argument on this rank (each raised on every rank, before any exchange
    that would hang)."""
    only_rates = HeteroData()
    for t in ("user", "item"):
        only_rates[t].x = data[t].x
    only_rates[RATES].edge_index = data[RATES].edge_index
    one_way = shard(partition(only_rates, P))
    bad = pairs.clone()
    if rank == min(1, P - 1):  # one rank's pairs only: every rank raises
        bad[1, 0] = ITEMS + 5
    cases = [(local, FANOUTS, (("user", "likes", "item"), pairs)), (local, FANOUTS, (RATES, bad)),
             (one_way, [2], (RATES, pairs)), (local, {RATES: [2], REV: [2]}, (RATES, pairs)),
             (local, FANOUTS, pairs)]
    messages = []
    for shard_, fanouts, edge_label_index in cases:
        try:
            DistributedLinkNeighborLoader(shard_, fanouts, edge_label_index, batch_size=BATCH)
            messages.append(None)
        except ValueError as e:
            messages.append(str(e))
    return messages


def reference_batches(data, pairs, label, mode):
    sampling = HeteroNeighborSampling(batch_size=1, seed=SEED, input_type="user",
                                      relations=tuple((et, tuple(FANOUTS[et])) for et in data.edge_types))
    amount = 2.0 if mode == "triplet" else 1.0
    rule = LinkBatching(PAIRS, BATCH, USERS, ITEMS, mode, amount, True, SEED)
    return [b for epoch in range(EPOCHS)
            for b in hetero_link_global_batches(data, sampling, rule, RATES, pairs,
                                                label if mode == "binary" else None, epoch)]


@functools.lru_cache
def reference_training(mode):
    """Single-process PyG on the reference batches: the model on each batch's subgraph (global ids
    relabelled to batch positions), the loss over the batch's pairs."""
    data, pairs, label = make_graph()
    model = build(data)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, grads = [], []
    for pairs_b, label_b, _, num_pos, hood in reference_batches(data, pairs, label, mode):
        position = {t: torch.full((data[t].num_nodes,), -1) for t in data.node_types}
        for t in data.node_types:
            position[t][hood.n_id[t]] = torch.arange(hood.n_id[t].numel())
        x_dict = {t: data[t].x[hood.n_id[t]] for t in data.node_types}
        edge_index_dict = {}
        for (s, r, d), e_id in hood.e_id.items():
            ei = data[(s, r, d)].edge_index[:, e_id]
            edge_index_dict[(s, r, d)] = torch.stack([position[s][ei[0]], position[d][ei[1]]])
        src, dst = position["user"][pairs_b[0]], position["item"][pairs_b[1]]
        index = ((torch.stack([src, dst]), label_b) if mode == "binary" else
                 (src[:num_pos], dst[:num_pos], dst[num_pos:].view(num_pos, -1)))
        opt.zero_grad()
        loss = loss_of(mode, model(x_dict, edge_index_dict), index, lambda fn, a, b: fn(a, b))
        loss.backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        opt.step()
        losses.append(float(loss.detach()))
    return losses, grads


def _sorted(pairs):
    return sorted((pairs[0] * ITEMS + pairs[1]).tolist())


_RUNS: dict = {}


def run(P):
    """One launch per P, shared by the tests."""
    if P not in _RUNS:
        _RUNS[P] = launch(_worker, P, *make_graph())
    return _RUNS[P]


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_hetero_link_batches_and_training_equal_single_process(P):
    data, pairs, label = make_graph()
    per_rank = run(P)
    for mode in MODES:
        reference = reference_batches(data, pairs, label, mode)
        ranks = [r[mode][0] for r in per_rank]
        assert all(len(b) == len(reference) for b in ranks) and len(reference) > 4
        for i, (all_pairs, all_label, pair_id, num_pos, hood) in enumerate(reference):
            parts = [b[i] for b in ranks]
            for t in data.node_types:
                assert sorted(torch.cat([p["n_id"][t] for p in parts]).tolist()) == sorted(hood.n_id[t].tolist())
            for et in data.edge_types:
                assert sorted(torch.cat([p["e_id"][et] for p in parts]).tolist()) == sorted(hood.e_id[et].tolist())
            assert sorted(torch.cat([p["input_id"] for p in parts]).tolist()) == pair_id[:num_pos].tolist()
            held = torch.cat([p["held"] for p in parts], dim=1)
            expected = all_pairs if mode == "binary" else all_pairs[:, :num_pos]
            assert _sorted(held) == _sorted(expected)  # each pair on one rank
            for p in parts:  # the endpoints' rows, wherever they live
                assert torch.equal(p["rows"][0], data["user"].x[p["held"][0]])
                assert torch.equal(p["rows"][1], data["item"].x[p["held"][1]])
            if mode == "binary":
                assert all_pairs.size(1) == 2 * num_pos
                assert sorted(torch.cat([p["label"] for p in parts]).tolist()) == sorted(all_label.tolist())
                assert all_label[num_pos:].eq(0).all() and all_label[:num_pos].ge(1).all()
            else:  # two negatives per positive, in PyG's [k, amount] layout
                negatives = all_pairs[1, num_pos:].view(num_pos, 2)
                by_source = {}
                for p in parts:
                    assert p["rows"][3].shape == (p["held"].size(1), 2)
                    assert torch.equal(p["rows"][2], data["item"].x[p["rows"][3]])
                    for k in range(p["held"].size(1)):
                        by_source.setdefault(tuple(p["held"][:, k].tolist()), []).append(p["rows"][3][k].tolist())
                for k in range(num_pos):
                    assert negatives[k].tolist() in by_source[tuple(all_pairs[:, k].tolist())]
        losses, grads = reference_training(mode)
        assert len(set(losses)) == len(losses)
        for r in per_rank:
            assert r[mode][1] == pytest.approx(losses, rel=1e-5, abs=1e-6), (mode, P)
            for got, want in zip(r[mode][2], grads, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_hetero_link_loader_errors_name_the_fix_on_every_rank():
    for r in run(2):
        edge_type, out_of_range, one_way, fanouts, untyped = r["errors"]
        assert "edge type ('user', 'likes', 'item'), which is not a relation of the graph: pass one of" in edge_type
        assert f"holds id {ITEMS + 5} but node type 'item' has {ITEMS} nodes" in out_of_range
        assert "rank 1" in out_of_range and "rank 0" not in out_of_range  # only rank 1's pairs were bad
        assert "node type 'user' (the source of ('user', 'rates', 'item')) is the destination of no relation" in \
            one_way and "add the reverse relations" in one_way
        assert "no fanouts for edge type ('user', 'follows', 'user')" in fanouts
        assert "edge_label_index on a heterogeneous graph is (edge_type, pairs)" in untyped


@pytest.mark.parametrize("P", [2, 3])
def test_pairs_within_one_node_type(P):
    data, pairs, _ = make_graph()
    sampling = HeteroNeighborSampling(batch_size=1, seed=SEED, input_type="user",
                                      relations=tuple((et, (2, 1)) for et in data.edge_types))
    rule = LinkBatching(PAIRS, BATCH, USERS, USERS, "binary", 1.0, False, SEED)
    reference = hetero_link_global_batches(data, sampling, rule, FOLLOWS, pairs % USERS)
    ranks = [r["follows"] for r in run(P)]
    assert all(len(b) == len(reference) for b in ranks) and len(reference) > 2
    for i, (all_pairs, _, _, _, hood) in enumerate(reference):
        parts = [b[i] for b in ranks]
        assert hood.num_sampled_nodes["user"][0] == torch.unique(all_pairs).numel()  # one seed set of both ends
        for t in data.node_types:
            assert sorted(torch.cat([p[0][t] for p in parts]).tolist()) == sorted(hood.n_id[t].tolist())
        held = torch.cat([p[1] for p in parts], 1)
        assert sorted((held[0] * USERS + held[1]).tolist()) == sorted((all_pairs[0] * USERS + all_pairs[1]).tolist())
        for _, held, z_src, z_dst in parts:
            assert torch.equal(z_src, data["user"].x[held[0]]) and torch.equal(z_dst, data["user"].x[held[1]])

