"""``DistributedLinkNeighborLoader``: its batches at P = 1..4 are the single-process reference's
(global ids): the same pairs and negatives whatever P and the partition, the sampled neighbourhood
of their endpoints that the node loader's reference (``_neighbor_batch``) draws from them as seeds,
``batch.pairs.gather`` returns both endpoints' rows, and PyG's batch indices (``out[batch.edge_label_index[0]]``,
``out[batch.dst_neg_index]``, ...) index the batch's rows as PyG's do: a GraphSAGE + dot product trained
through them as PyG's ``link_pred.py`` is (binary and triplet) has the single-process loss curve and
gradients; on a directed graph with isolated nodes (P = 3: an empty part)."""
import warnings

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
                indexed = _pyg_rows(batch, neg_sampling)  # PyG's batch indices on the batch's rows
                opt.zero_grad()  # a training step on the batch, written as PyG's link_pred.py
                score, target = _pyg_scores(model(batch.x, batch.edge_index), batch, neg_sampling)
                loss = distributed_loss(F.binary_cross_entropy_with_logits, score, target)
                loss.backward()
                out.setdefault(f"grads_{neg_sampling}", []).append([p.grad.clone() for p in model.parameters()])
                opt.step()
                out.setdefault(f"losses_{neg_sampling}", []).append(float(loss.detach()))
                batches.append({"epoch": epoch, "b": batch.batch_index, "n_id": batch.n_id, "indexed": indexed,
                                "hops": batch.num_sampled_nodes, "e_id": batch.e_id,
                                "pairs": batch.edge_label_index_global,
                                "label": getattr(batch, "edge_label", None), "z_src": z_src, "z_dst": z_dst,
                                "num_pairs": batch.pairs.num_pairs,
                                "reference": loader.batch_pairs(epoch, batch.batch_index)})
        out[neg_sampling] = batches
    return out


def _pyg_rows(batch, neg_sampling):
    """``(rows, global ids)`` of every PyG batch index: the sources' and targets' rows of ``batch.x``."""
    if neg_sampling == "binary":
        index = batch.edge_label_index
        assert isinstance(index[0], torch.Tensor) and index.size() == index.global_ids.size()
        return [(batch.x[index[0]], index.global_ids[0]), (batch.x[index[1]], index.global_ids[1])]
    assert "edge_label_index" not in batch and "edge_label" not in batch  # as PyG's triplet batches
    ids, k = batch.edge_label_index_global, batch.num_positive_pairs
    return [(batch.x[batch.src_index], ids[0, :k]), (batch.x[batch.dst_pos_index], ids[1, :k]),
            (batch.x[batch.dst_neg_index], ids[1, k:])]  # one negative per positive: [k], as PyG squeezes


def _pyg_scores(out, batch, neg_sampling):
    """PyG's scores of a link batch: ``out[edge_label_index[0]] * out[edge_label_index[1]]``, or the triplet's
    positives then negatives; and their targets."""
    if neg_sampling == "binary":
        score = (out[batch.edge_label_index[0]] * out[batch.edge_label_index[1]]).sum(dim=-1)
        return score, (batch.edge_label > 0).float()
    positive = (out[batch.src_index] * out[batch.dst_pos_index]).sum(dim=-1)
    negative = (out[batch.src_index] * out[batch.dst_neg_index]).sum(dim=-1)
    return torch.cat([positive, negative]), torch.cat([torch.ones_like(positive), torch.zeros_like(negative)])


def _model():
    torch.manual_seed(0)
    return GraphSAGE(FEATURES, 8, num_layers=2, out_channels=8)


def _decode(z_src, z_dst):
    return (z_src * z_dst).sum(-1)


def _reference_training(data, batches):
    """Single-process PyG on the same batches: the model on each batch's subgraph (global ids relabelled
    to batch positions), BCE over the batch's pairs (a triplet batch's: positives 1, negatives 0); the
    losses and every step's gradients."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses, grads = [], []
    for epoch, b, (pairs, label, _, num_positive) in batches:
        if label is None:  # triplet: the positives, then their negatives
            label = torch.cat([torch.ones(num_positive), torch.zeros(pairs.size(1) - num_positive)])
        ref = _reference_neighbourhood(data, epoch, b, torch.unique(pairs.reshape(-1)).numpy())
        position = torch.full((N,), -1, dtype=torch.long)
        position[ref.n_id] = torch.arange(ref.n_id.numel())
        opt.zero_grad()
        z = model(data.x[ref.n_id], position[data.edge_index[:, ref.e_id]])
        z_pairs = position[pairs]
        loss = F.binary_cross_entropy_with_logits(_decode(z[z_pairs[0]], z[z_pairs[1]]), (label > 0).float())
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        losses.append(float(loss.detach()))
    return losses, grads


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
                    for rows, ids in r["indexed"]:  # PyG's indices: out[index] is the rows of the global ids
                        assert torch.equal(rows, data.x[ids])
                drawn.append((epoch, b, _keys(all_pairs)))
            positives = sorted(k for e, _, keys in drawn if e == 0 for k in keys)
            assert set(_keys(pairs)) <= set(positives)  # every positive pair drawn in epoch 0
            single.setdefault(neg_sampling, drawn)
            assert drawn == single[neg_sampling]  # the same batches whatever P and the partition
        for neg_sampling in ("binary", "triplet"):
            if f"reference_{neg_sampling}" not in single:
                batches = [(r["epoch"], r["b"], r["reference"]) for r in outs[0][neg_sampling]]
                single[f"reference_{neg_sampling}"] = _reference_training(data, batches)
                assert len(set(single[f"reference_{neg_sampling}"][0])) == len(batches) > 4
            losses, grads = single[f"reference_{neg_sampling}"]
            for o in outs:  # mini-batch training through PyG's indices equals single-process PyG on the same batches
                torch.testing.assert_close(torch.tensor(o[f"losses_{neg_sampling}"]), torch.tensor(losses),
                                           rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(o[f"grads_{neg_sampling}"], grads, rtol=1e-4, atol=1e-6)


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
    refusals = []  # what a pair index cannot do: index with the whole [2, m] object, or a z of other rows
    binary = next(iter(DistributedLinkNeighborLoader(local, [2], pairs, neg_sampling="binary", batch_size=100)))
    for index, z in ((binary.edge_label_index, binary.x), (binary.edge_label_index[1], binary.x[1:])):
        try:
            with warnings.catch_warnings():  # torch first warns of indexing with a non-tuple sequence
                warnings.simplefilter("ignore", UserWarning)
                z[index]
        except (TypeError, ValueError) as e:
            refusals.append(str(e))
    mine = pairs[:, :PAIRS - 1] if rank == 1 else pairs  # rank 1 passes other pairs
    try:
        DistributedLinkNeighborLoader(local, [2], mine)
    except ValueError as e:
        messages.append(str(e))
    return (messages, batch.pairs.num_pairs, refusals, hasattr(batch, "edge_label_index"),
            tuple(batch.dst_neg_index.shape) == (batch.num_positive_pairs, 2))


def test_link_loader_errors_and_pyg_negative_sampling():
    data, pairs, _ = _graph()
    for messages, num_pairs, refusals, has_edge_label_index, neg_shape in launch(_errors, 2, data, pairs):
        assert not has_edge_label_index and neg_shape  # PyG's triplet batch: src/dst_pos/dst_neg_index [k, amount]
        assert "supports z[edge_label_index[0]], z[edge_label_index[1]]" in refusals[0]
        assert "z = model(batch.x, batch.edge_index)" in refusals[1] and len(refusals) == 2
        assert num_pairs == 3 * PAIRS  # NegativeSampling("triplet", amount=2): two negatives per pair
        assert len(messages) == 4
        assert "neg_sampling must be None, 'binary' or 'triplet'" in messages[0]
        assert "edge_label must be None for neg_sampling='triplet'" in messages[1]
        assert "src_weight / dst_weight is not supported" in messages[2]
        assert "different edge_label_index" in messages[3]
