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
