"""``DistributedLinkNeighborLoader``: its batches at P = 1..4 are the single-process reference's
(global ids): the same pairs and negatives whatever P and the partition, the sampled neighbourhood
of their endpoints that the node loader's reference (``_neighbor_batch``) draws from them as seeds,
and ``batch.pairs.gather`` returns both endpoints' rows; on a directed graph with isolated nodes
(P = 3: an empty part)."""
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.sampler import NegativeSampling

from pyg_sparsecomm import distribute, distributed_loss, shard
from pyg_sparsecomm.loader import DistributedLinkNeighborLoader, NeighborSampling
from pyg_sparsecomm.sampling.rules import _neighbor_batch, global_in_edges
from pyg_sparsecomm.testing import launch

N, FANOUT, SEED, PAIRS, BATCH, FEATURES = 50, (3, 2), 7, 30, 8, 4


def _graph():
    gen = torch.Generator().manual_seed(2)
    edge_index = torch.randint(10, N, (2, 200), generator=gen)  # nodes 0..9 isolated
    x = torch.randn(N, FEATURES, generator=gen)
    pairs = torch.randint(0, N, (2, PAIRS), generator=gen)
    return Data(x=x, edge_index=edge_index, num_nodes=N), pairs, torch.rand(PAIRS, generator=gen).round()


def _partition(P):
    return torch.arange(N) % 2 if P == 3 else torch.randint(0, P, (N,), generator=torch.Generator().manual_seed(P))


def _worker(rank, P, data, pairs, label, part):
    data = data.clone()
    data.part, data.num_parts = part, P
    local = shard(data)
    out = {}
    for neg_sampling in ("binary", "triplet"):
        given = label if neg_sampling == "binary" else None  # PyG refuses labels with triplets
        loader = DistributedLinkNeighborLoader(local, list(FANOUT), pairs, given, neg_sampling=neg_sampling,
                                               batch_size=BATCH, shuffle=True, seed=SEED)
        batches = []
        model = distribute(_model())
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        for epoch in range(2):
            assert loader.epoch == epoch
            for batch in loader:
                z_src, z_dst = batch.pairs.gather(batch.x)
                if neg_sampling == "binary":  # a training step on the batch
                    opt.zero_grad()
                    score = _decode(*batch.pairs.gather(model(batch.x, batch.adj)))
                    target = (batch.edge_label > 0).float()
                    loss = distributed_loss(F.binary_cross_entropy_with_logits, score, target)
                    loss.backward()
                    opt.step()
                    out.setdefault("losses", []).append(float(loss.detach()))
                batches.append({"epoch": epoch, "b": batch.batch_index, "n_id": batch.n_id,
                                "hops": batch.num_sampled_nodes, "e_id": batch.e_id,
                                "pairs": batch.edge_label_index_global,
                                "label": getattr(batch, "edge_label", None), "z_src": z_src, "z_dst": z_dst,
                                "num_pairs": batch.pairs.num_pairs,
                                "reference": loader.batch_pairs(epoch, batch.batch_index)})
        out[neg_sampling] = batches
    return out


def _model():
    torch.manual_seed(0)
    return GraphSAGE(FEATURES, 8, num_layers=2, out_channels=8)


def _decode(z_src, z_dst):
    return (z_src * z_dst).sum(-1)


def _reference_training(data, batches):
    """Single-process PyG on the same batches: the model on each batch's subgraph (global ids relabelled
    to batch positions), BCE over the batch's pairs."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for epoch, b, (pairs, label, _, _) in batches:
        ref = _reference_neighbourhood(data, epoch, b, torch.unique(pairs.reshape(-1)).numpy())
        position = torch.full((N,), -1, dtype=torch.long)
        position[ref.n_id] = torch.arange(ref.n_id.numel())
        opt.zero_grad()
        z = model(data.x[ref.n_id], position[data.edge_index[:, ref.e_id]])
        z_pairs = position[pairs]
        loss = F.binary_cross_entropy_with_logits(_decode(z[z_pairs[0]], z[z_pairs[1]]), (label > 0).float())
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _reference_neighbourhood(data, epoch, b, seeds):
    sampling = NeighborSampling(batch_size=1, seed=SEED, num_neighbors=FANOUT)
    src, dst = data.edge_index.numpy()
    return _neighbor_batch(sampling, epoch, b, seeds, src, dst, global_in_edges(src, dst, N), N)


def _keys(pairs):
    return sorted((pairs[0] * N + pairs[1]).tolist())


def test_link_batches_equal_single_process_reference():
    data, pairs, label = _graph()
    single = {}
    for P in (1, 2, 3, 4):
        outs = launch(_worker, P, data, pairs, label, _partition(P))
        for neg_sampling in ("binary", "triplet"):
            per_rank = [o[neg_sampling] for o in outs]
            drawn = []
            for position in range(len(per_rank[0])):
                ranks = [batches[position] for batches in per_rank]
                epoch, b = ranks[0]["epoch"], ranks[0]["b"]
                assert all((r["epoch"], r["b"]) == (epoch, b) for r in ranks)  # the same batches on every rank
                all_pairs, all_label, pair_id, num_positive = ranks[0]["reference"]
                assert _keys(torch.cat([r["pairs"] for r in ranks], dim=1)) == _keys(all_pairs)  # each pair once
                assert all(r["num_pairs"] == all_pairs.size(1) for r in ranks)
                assert torch.equal(pair_id[:num_positive], torch.sort(pair_id[:num_positive]).values)
                assert torch.equal(all_pairs[:, :num_positive], pairs[:, pair_id[:num_positive]])
                if neg_sampling == "binary":  # PyG's labels: given labels + 1 (they hold a 0) for positives, 0 else
                    assert all_pairs.size(1) == 2 * num_positive
                    assert torch.equal(all_label, torch.cat([label[pair_id[:num_positive]] + 1,
                                                             torch.zeros(num_positive)]))
                    assert sorted(torch.cat([r["label"] for r in ranks]).tolist()) == sorted(all_label.tolist())
                else:  # one negative target per positive, same source
                    assert all_pairs.size(1) == 2 * num_positive
                    assert torch.equal(all_pairs[0, num_positive:], all_pairs[0, :num_positive])
                ref = _reference_neighbourhood(data, epoch, b, torch.unique(all_pairs.reshape(-1)).numpy())
                assert sorted(torch.cat([r["n_id"] for r in ranks]).tolist()) == sorted(ref.n_id.tolist())
                assert [sum(h) for h in zip(*[r["hops"] for r in ranks], strict=True)] == ref.num_sampled_nodes
                assert sorted(torch.cat([r["e_id"] for r in ranks]).tolist()) == sorted(ref.e_id.tolist())
                for r in ranks:  # both endpoints' rows arrive, wherever they live
                    assert torch.equal(r["z_src"], data.x[r["pairs"][0]])
                    assert torch.equal(r["z_dst"], data.x[r["pairs"][1]])
                drawn.append((epoch, b, _keys(all_pairs)))
            positives = sorted(k for e, _, keys in drawn if e == 0 for k in keys)
            assert set(_keys(pairs)) <= set(positives)  # every positive pair drawn in epoch 0
            single.setdefault(neg_sampling, drawn)
            assert drawn == single[neg_sampling]  # the same batches whatever P and the partition
        if "reference_losses" not in single:
            batches = [(r["epoch"], r["b"], r["reference"]) for r in outs[0]["binary"]]
            single["reference_losses"] = _reference_training(data, batches)
            assert len(set(single["reference_losses"])) == len(batches) > 4
        for o in outs:  # mini-batch training equals single-process PyG on the same batches
            torch.testing.assert_close(torch.tensor(o["losses"]), torch.tensor(single["reference_losses"]),
                                       rtol=1e-5, atol=1e-6)


def _errors(rank, P, data, pairs):
    data = data.clone()
    data.part, data.num_parts = torch.arange(N) % P, P
    local = shard(data)
    messages = []
    for kwargs in ({"neg_sampling": "exact"}, {"neg_sampling": "triplet", "edge_label": torch.ones(PAIRS)},
                   {"neg_sampling": NegativeSampling("binary", src_weight=torch.ones(N))}):
        try:
            DistributedLinkNeighborLoader(local, [2], pairs, **kwargs)
        except ValueError as e:
            messages.append(str(e))
    loader = DistributedLinkNeighborLoader(local, [2], pairs, neg_sampling=NegativeSampling("triplet", 2),
                                           batch_size=100)
    batch = next(iter(loader))
    try:  # PyG's habit z[batch.edge_label_index[0]] would index batch rows with global ids
        batch.edge_label_index  # noqa: B018  (the read is what raises)
    except AttributeError as e:
        no_positions = str(e)
    mine = pairs[:, :PAIRS - 1] if rank == 1 else pairs  # rank 1 passes other pairs
    try:
        DistributedLinkNeighborLoader(local, [2], mine)
    except ValueError as e:
        messages.append(str(e))
    return messages, batch.pairs.num_pairs, no_positions, hasattr(batch, "edge_label_index")


def test_link_loader_errors_and_pyg_negative_sampling():
    data, pairs, _ = _graph()
    for messages, num_pairs, no_positions, has_positions in launch(_errors, 2, data, pairs):
        assert "use z_src, z_dst = batch.pairs.gather(z)" in no_positions and not has_positions
        assert num_pairs == 3 * PAIRS  # NegativeSampling("triplet", amount=2): two negatives per pair
        assert len(messages) == 4
        assert "neg_sampling must be None, 'binary' or 'triplet'" in messages[0]
        assert "edge_label must be None for neg_sampling='triplet'" in messages[1]
        assert "src_weight / dst_weight is not supported" in messages[2]
        assert "different edge_label_index" in messages[3]
