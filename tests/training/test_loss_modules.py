"""``distributed_loss`` is the loss's own reduction over the whole graph, for loss functions and
``torch.nn`` loss modules (issue 45, finding 0).

Before: ``distributed_loss(torch.nn.BCEWithLogitsLoss(), ...)`` raised "forward() got an
unexpected keyword argument 'reduction'"; and every loss was divided by the global number of
rows, so ``F.cross_entropy`` with ignored targets (``-100``, ``ignore_index``) or with ``weight=``,
and elementwise losses of ``[n, C]`` targets (multi-label ``binary_cross_entropy_with_logits``),
returned another value (and gradient) than the same loss in one process.  Real gloo run at P = 2,
the rows split unevenly and the ignored targets all on rank 0."""
import io
import warnings

import pytest
import torch
import torch.nn.functional as F

from pyg_sparsecomm import distributed_loss
from pyg_sparsecomm.testing import launch

N, C, ON_RANK_0 = 12, 3, 8


def _inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, C, generator=gen)
    labels = torch.randint(0, C, (N,), generator=gen)
    labels[[1, 4, 6]] = -100  # ignored, all on rank 0's rows
    multi = (torch.rand(N, C, generator=gen) > 0.5).float()
    probabilities = torch.softmax(torch.randn(N, C, generator=gen), dim=-1)
    weight = torch.tensor([0.3, 1.0, 2.5])
    return x, labels, multi, probabilities, weight


def cases():
    """name -> (loss, keyword arguments, how the input is taken, the target)."""
    x, labels, multi, probabilities, weight = _inputs()
    kept = labels.clamp(min=0)  # class 0 then stands for the rows ignore_index=0 leaves out
    return {
        "F.cross_entropy, ignored targets": (F.cross_entropy, {}, None, labels),
        "F.cross_entropy(weight=)": (F.cross_entropy, {"weight": weight}, None, labels),
        "F.cross_entropy(reduction='sum')": (F.cross_entropy, {"reduction": "sum"}, None, labels),
        "CrossEntropyLoss(weight, ignore_index=0, label_smoothing)": (
            torch.nn.CrossEntropyLoss(weight=weight, ignore_index=0, label_smoothing=0.1), {}, None, kept),
        "CrossEntropyLoss(reduction='sum')": (torch.nn.CrossEntropyLoss(reduction="sum"), {}, None, labels),
        "CrossEntropyLoss, class probabilities": (torch.nn.CrossEntropyLoss(), {}, None, probabilities),
        "NLLLoss(weight)": (torch.nn.NLLLoss(weight=weight), {}, "log_softmax", labels),
        "BCEWithLogitsLoss(pos_weight), [n, C]": (torch.nn.BCEWithLogitsLoss(pos_weight=weight), {}, None, multi),
        "F.binary_cross_entropy_with_logits, [n, C]": (F.binary_cross_entropy_with_logits, {}, None, multi),
        "MSELoss": (torch.nn.MSELoss(), {}, None, multi),
        "KLDivLoss(reduction='batchmean')": (torch.nn.KLDivLoss(reduction="batchmean"), {}, "log_softmax",
                                             probabilities),
    }


def _value_and_gradient(loss_fn, kwargs, transform, target, rows, distributed):
    x = _inputs()[0].requires_grad_()
    scores = x.log_softmax(-1) if transform == "log_softmax" else x
    if distributed:
        loss = distributed_loss(loss_fn, scores[rows], target[rows], **kwargs)
    else:
        loss = loss_fn(scores, target, **kwargs)
    loss.backward()
    return loss.detach().as_subclass(torch.Tensor), x.grad


def _worker(rank, world_size):
    rows = torch.arange(ON_RANK_0) if rank == 0 else torch.arange(ON_RANK_0, N)
    out = {}
    for name, (loss_fn, kwargs, transform, target) in cases().items():
        value, grad = _value_and_gradient(loss_fn, kwargs, transform, target, rows, distributed=True)
        torch.distributed.all_reduce(grad)  # the ranks' shares of the gradient, summed
        out[name] = (value, grad)
    return out


def test_every_loss_is_its_own_reduction_over_all_ranks():
    per_rank = launch(_worker, 2, timeout=120)
    for name, (loss_fn, kwargs, transform, target) in cases().items():
        value, grad = _value_and_gradient(loss_fn, kwargs, transform, target, None, distributed=False)
        for rank, results in enumerate(per_rank):
            got_value, got_grad = results[name]
            torch.testing.assert_close(got_value, value, msg=f"rank {rank}, {name}: loss")
            torch.testing.assert_close(got_grad, grad, msg=f"rank {rank}, {name}: gradient")


def test_a_loss_without_a_whole_graph_value_names_the_fix():
    x, labels, *_ = _inputs()
    with pytest.raises(ValueError, match=r"reduction='none'.*use reduction='mean'"):
        distributed_loss(torch.nn.CrossEntropyLoss(reduction="none"), x, labels)
    with pytest.raises(ValueError, match=r"reduction='none'.*use reduction='mean'"):
        distributed_loss(F.cross_entropy, x, labels, reduction="none")
    with pytest.raises(TypeError, match=r"in its constructor.*CrossEntropyLoss\(weight=w"):
        distributed_loss(torch.nn.CrossEntropyLoss(), x, labels, weight=torch.ones(C))
    with pytest.raises(TypeError, match="Linear has no reduction attribute"):
        distributed_loss(torch.nn.Linear(C, C), x, labels)
    module = torch.nn.CrossEntropyLoss()
    distributed_loss(module, x, labels)
    assert module.reduction == "mean"  # the module is left as it was given


def test_the_loss_reads_as_a_number_without_a_warning():
    """``f"{loss:.4f}"`` raised "unsupported format string passed to WholeGraphLoss.__format__";
    ``float(loss)`` warned (torch's "Converting a tensor with requires_grad=True to a scalar"):
    each is now the plain value; ``loss.item()`` (and ``batch.batch_size``) saved with
    ``torch.save`` load with ``weights_only=True``."""
    from pyg_sparsecomm.training.per_rank import LocalCount
    x, labels, *_ = _inputs()
    loss = distributed_loss(F.cross_entropy, x.requires_grad_(), labels)
    value = F.cross_entropy(x, labels).item()
    with warnings.catch_warnings():  # torch warns once per process: test_ported_minibatch_script checks a fresh one
        warnings.simplefilter("error")
        assert f"{loss:.4f}" == f"{value:.4f}" and f"{loss}" == f"{value}"
        assert float(loss) == value and loss.item() == value
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{torch.stack([loss, loss]):.4f}"  # as a plain tensor of more than one value
    buffer = io.BytesIO()
    torch.save({"losses": [loss.item()], "seeds": LocalCount(3)}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == {"losses": [value], "seeds": 3}
