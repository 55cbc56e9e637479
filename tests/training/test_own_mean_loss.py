"""distributed_loss of a user's loss function without reduction= (PyG's hetero_link_pred.py's
weighted_mse_loss, issue 48): taken as a mean over its input's elements, with the value and gradient
of the function itself on one process; a sum passed as such, a non-scalar, reduction= for it, and the
loss's own argument passed where the process group goes are refused naming the fix.  (Its whole-graph
value at P = 2, 3 and the refusal on every rank: tests/link/test_hetero_link_pred_porting.py.)"""
import pytest
import torch

from pyg_sparsecomm import distributed_loss, global_bincount


def weighted_mse_loss(pred, target, weight=None):
    weight = 1. if weight is None else weight[target].to(pred.dtype)
    return (weight * (pred - target.to(pred.dtype)).pow(2)).mean()


def test_value_and_gradient_are_the_functions():
    pred = torch.randn(10, requires_grad=True)
    target = torch.randint(0, 6, (10,))
    weight = torch.rand(6) + 0.5
    loss = distributed_loss(weighted_mse_loss, pred, target, weight=weight)
    expected = weighted_mse_loss(pred, target, weight)
    torch.testing.assert_close(float(loss), float(expected.detach()))
    grad, = torch.autograd.grad(loss, pred)
    expected_grad, = torch.autograd.grad(expected, pred)
    torch.testing.assert_close(grad, expected_grad)


def test_no_rows_is_zero():
    pred = torch.empty(0, requires_grad=True)
    assert float(distributed_loss(weighted_mse_loss, pred, torch.empty(0, dtype=torch.long))) == 0.0


@pytest.mark.parametrize("loss_fn, kwargs, match", [
    (lambda pred, target: (pred - target).pow(2).sum(), {}, "rows given twice"),
    (lambda pred, target: (pred - target).pow(2), {}, "must return a scalar"),
    (weighted_mse_loss, {"reduction": "sum"}, "takes no reduction"),
])
def test_refusals(loss_fn, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        distributed_loss(loss_fn, torch.arange(4.0), torch.arange(4.0) + 1, **kwargs)


def test_positional_argument_is_not_the_group():
    with pytest.raises(TypeError, match="by keyword"):
        distributed_loss(weighted_mse_loss, torch.arange(4.0), torch.arange(4), torch.ones(4))


def test_global_bincount_on_one_process():
    labels = torch.tensor([0, 3, 3, 1])
    assert torch.equal(global_bincount(labels), torch.bincount(labels))
    assert torch.equal(global_bincount(labels, minlength=6), torch.bincount(labels, minlength=6))
