"""distributed_loss returns the whole-graph loss (issue 23, line budget): ``float(loss)`` is the
single-process loss on every rank while the gradient stays this rank's share, so the summed
gradients are unchanged; combinations of two such losses stay right; ``global_sum`` of one (or of
anything computed from one) raises, since it would be P times the loss.  Real gloo runs at P = 2, 4."""
import pytest
import torch
import torch.nn.functional as Fn
from test_distribute_layers import make_graph
from test_distribute_models import labelled
from test_gradient_sync import Net

from pyg_sparsecomm import distribute, distributed_loss, global_sum, shard
from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.training.whole_graph import WholeGraphLoss


def losses(out, data):
    """Two losses over different rows, one with a keyword: the train rows and the others."""
    m, rest = data.train_mask, ~data.train_mask
    if hasattr(data, "n_id"):   # a shard
        a = distributed_loss(Fn.cross_entropy, out[m], data.y[m])
        b = distributed_loss(Fn.cross_entropy, out[rest], data.y[rest], label_smoothing=0.1)
    else:
        a = Fn.cross_entropy(out[m], data.y[m])
        b = Fn.cross_entropy(out[rest], data.y[rest], label_smoothing=0.1)
    return a, b


def run(data, distributed):
    torch.manual_seed(0)
    model = Net()
    if distributed:
        distribute(model)
    out = model(data.x, data.adj.with_value(None) if distributed else data.edge_index)   # unweighted
    a, b = losses(out, data)
    total = a + 0.5 * b
    total.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return {"a": float(a), "b": b.item(), "total": float(total)}, grads, (a, b, total)


def _worker(rank, world_size):
    local = shard(labelled(make_graph(world_size)))
    values, grads, (a, b, total) = run(local, distributed=True)
    refused = {}
    for name, value in {"loss": a, "detached": a.detach(), "combined": total, "combined detached": total.detach(),
                        "stacked": torch.stack([a, b])}.items():
        try:
            global_sum(value)
            refused[name] = None
        except TypeError as error:
            refused[name] = str(error)
    types = {type(v).__name__ for v in (a, a.detach(), total)}
    return values, grads, refused, types, float(global_sum(torch.tensor(1.0)))


@pytest.mark.parametrize("world_size", [2, 4])
def test_loss_value_is_the_whole_graph_loss_and_gradients_the_single_process_ones(world_size):
    reference, ref_grads, _ = run(labelled(make_graph(world_size)), distributed=False)
    results = launch(_worker, world_size)
    for rank, (values, grads, refused, types, ones) in enumerate(results):
        for key in reference:       # on every rank, not only summed over ranks
            assert abs(values[key] - reference[key]) < 1e-5, (rank, key, values[key], reference[key])
        assert grads.keys() == ref_grads.keys()
        for key in ref_grads:
            torch.testing.assert_close(grads[key], ref_grads[key], atol=1e-5, rtol=1e-4, msg=f"rank {rank}: {key}")
        for name, message in refused.items():
            assert message is not None, f"rank {rank}: global_sum({name}) did not raise"
            assert "distributed_loss already returns the whole-graph loss" in message
            assert "float(loss)" in message
        assert types == {"WholeGraphLoss"}
        assert ones == world_size   # global_sum of anything else still sums


def test_single_process_loss_is_the_plain_loss():
    data = labelled(make_graph(1))
    out = torch.randn(data.num_nodes, 4, requires_grad=True)
    loss = distributed_loss(Fn.cross_entropy, out[data.train_mask], data.y[data.train_mask])
    expected = Fn.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    assert isinstance(loss, WholeGraphLoss)
    torch.testing.assert_close(loss.detach().as_subclass(torch.Tensor), expected.detach())
    grad, = torch.autograd.grad(loss, out)
    expected_grad, = torch.autograd.grad(expected, out)
    torch.testing.assert_close(grad, expected_grad)
    with pytest.raises(TypeError, match="distributed_loss already returns the whole-graph loss"):
        global_sum(loss * 2)


def _loss_collectives(rank, world_size):
    from pyg_sparsecomm.testing.call_profile import CallProfile
    local = shard(labelled(make_graph(world_size)))
    out = torch.randn(local.num_nodes, 4, requires_grad=True)
    counts = {}
    for name, call in {"cross_entropy": lambda: distributed_loss(Fn.cross_entropy, out, local.y),
                       "mse_loss": lambda: distributed_loss(Fn.mse_loss, out, torch.zeros_like(out)),
                       "weighted": lambda: distributed_loss(Fn.cross_entropy, out, local.y,
                                                            weight=torch.tensor([1.0, 2.0, 0.5, 1.0]))}.items():
        with CallProfile() as profile:
            call()
        counts[name] = dict(profile.collectives)
    return counts


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_mean_loss_takes_one_all_reduce(world_size):
    """The rank's summed terms and its count travel in one all-reduce (issue 56: was two, the count
    first), whether the count comes from the shapes (``mse_loss``) or from the targets."""
    for rank, counts in enumerate(launch(_loss_collectives, world_size)):
        assert all(seen == {"all_reduce": 1} for seen in counts.values()), (rank, counts)
