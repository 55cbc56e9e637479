"""Single-process PyG training, the reference the distributed runs are compared with."""
import torch
import torch.nn.functional as F


def reference_epoch(model: torch.nn.Module, opt: torch.optim.Optimizer, data) -> float:
    """One full-graph training epoch of ``model`` on the whole ``data``; returns the loss."""
    model.train()
    opt.zero_grad()
    out = model(data.x, data.edge_index)
    loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    opt.step()
    return float(loss.detach())


def batch_subgraph(data, batch):
    """The subgraph of one :class:`~pyg_sparsecomm.loader.GlobalBatch` as a single-process PyG
    ``NeighborLoader`` batch holds it: ``x`` in batch order (seeds first, then by hop), the sampled
    edges relabelled to batch positions (ordered by hop, as ``trim_to_layer`` expects) and the
    seeds' labels."""
    position = torch.full((data.num_nodes,), -1, dtype=torch.long)
    position[batch.n_id] = torch.arange(batch.n_id.numel())
    edge_index = position[data.edge_index[:, batch.e_id]]
    assert bool((edge_index >= 0).all()), "a batch edge leaves the batch's nodes"
    return data.x[batch.n_id], edge_index, data.y[batch.n_id[:batch.num_seeds]]


def reference_minibatch_epoch(model: torch.nn.Module, opt: torch.optim.Optimizer, data, batches,
                              trim: bool = True) -> list[float]:
    """One mini-batch epoch of ``model`` over ``batches`` (``global_batches(...)``) in one process,
    plain PyG: the loss is the mean over each batch's seeds; ``trim`` passes the rows and edges per hop
    (PyG's ``trim_to_layer``).  Returns every batch's loss."""
    model.train()
    losses = []
    for batch in batches:
        x, edge_index, y = batch_subgraph(data, batch)
        hops = {"num_sampled_nodes_per_hop": batch.num_sampled_nodes,
                "num_sampled_edges_per_hop": batch.num_sampled_edges} if trim else {}
        opt.zero_grad()
        out = model(x, edge_index, **hops)
        loss = F.cross_entropy(out[:batch.num_seeds], y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
