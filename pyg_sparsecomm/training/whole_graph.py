"""What a training loop over a shard needs so that it equals single-process training.

Each rank computes its owned rows; the whole-graph loss is the sum over ranks
of each rank's *sum* of per-node losses, divided by the *global* number of
labelled nodes.  Backward through the halo exchanges delivers to every rank
its share of the parameter gradient; summing the shares
(``distribute(model)`` does it in backward; :func:`sync_gradients` for other modules) gives
exactly the single-process gradient::

    model = distribute(model)        # rank 0's parameters everywhere; gradients summed in backward
    out = model(local.x, local.adj)
    loss = distributed_loss(F.cross_entropy, out[local.train_mask], local.y[local.train_mask])
    loss.backward()                  # p.grad: the sum of the ranks' shares
    optimizer.step()
    print(float(loss))               # the whole-graph loss, same on every rank

Every rank must run the same forward/backward (also a rank with no labelled
rows): the exchanges are collectives.
"""
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.collectives import all_reduce_value
from ..comm.device_check import check_devices
from ..comm.group import collective_device, global_rank, host_all_reduce, is_distributed, raise_together
from ..comm.peer_failure import failures_named
from ..comm.waiting import finish
from ..graph.node_index import FIX, ShardIndex
from .grad_registry import is_synced, mark_normalised
from .loss_reduction import local_terms, takes_reduction
from .per_rank import check_product
from .replicated import ReplicatedScores


class WholeGraphFloat(float):
    """``loss.item()`` of a :class:`WholeGraphLoss`: a ``float``, which warns once when multiplied
    by this rank's count (:mod:`~pyg_sparsecomm.training.per_rank`); a history of them saved with
    ``torch.save`` loads with ``torch.load(weights_only=True)`` (an allowed global)."""

    __slots__ = ()

    def __mul__(self, other: Any) -> float:
        check_product(self, other)
        return float(self) * other

    __rmul__ = __mul__


torch.serialization.add_safe_globals([WholeGraphFloat])


class WholeGraphLoss(Tensor):
    """What :func:`distributed_loss` returns: a tensor whose *value* is the whole graph's loss (the
    same on every rank) and whose *gradient* flows into this rank's share only.

    A marker type: PyTorch keeps a subclass through ``detach()``, arithmetic (``a + 0.5 * b``) and
    ``torch.stack``, so :func:`global_sum`, which would add the ranks' equal values ``P`` times,
    can refuse it wherever it came from.  As a number it is a plain tensor's: ``f"{loss:.4f}"``
    formats the value of a 0-dim one (``torch.Tensor.__format__``, which checks for the exact
    class), and ``float(loss)`` / ``loss.item()`` read the detached value, without torch's warning
    about converting a tensor that requires grad (the README prints ``float(loss)``).  Multiplied
    by ``batch.batch_size`` (this rank's count) it warns once (:mod:`~pyg_sparsecomm.training.per_rank`).
    """

    def __format__(self, format_spec: str) -> str:
        return self.detach().as_subclass(Tensor).__format__(format_spec)

    def __float__(self) -> float:
        return float(self.detach().as_subclass(Tensor))

    def item(self) -> float:
        return WholeGraphFloat(self.detach().as_subclass(Tensor).item())

    def __mul__(self, other: Any) -> Tensor:
        check_product(self, other)
        return super().__mul__(other)

    def __rmul__(self, other: Any) -> Tensor:
        check_product(self, other)
        return super().__rmul__(other)


class _GivenValue(torch.autograd.Function):
    r"""Forward: ``value`` (the whole-graph loss :math:`\sum_r L_r`, already summed over ranks);
    backward: the gradient passes to this rank's ``share`` :math:`L_r` unchanged, so the ranks'
    parameter gradients still sum to the single-process one."""

    @staticmethod
    def forward(ctx, share: Tensor, value: Tensor) -> Tensor:
        return value.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad, None


def global_sum(value, group: dist.ProcessGroup | None = None) -> Tensor:
    """Sum of a (detached) scalar or tensor over all ranks (returned on the input's device).

    Args:
        value (torch.Tensor or float): this rank's part.
        group (torch.distributed.ProcessGroup, optional): the ranks to sum over. (default: all ranks)

    Raises:
        TypeError: for a :func:`distributed_loss` result (or anything computed from one), which
            already holds the whole-graph value: summing it would give ``P`` times the loss.
    """
    if isinstance(value, WholeGraphLoss):
        raise TypeError("global_sum: distributed_loss already returns the whole-graph loss (the same on every "
                        "rank, no longer this rank's share): use float(loss) instead of global_sum(loss), "
                        "which would add it up once per rank")
    t = torch.as_tensor(value.detach() if isinstance(value, Tensor) else value).clone()
    return all_reduce_value(t, dist.ReduceOp.SUM, group, "global_sum")


def global_count(mask_or_count, group: dist.ProcessGroup | None = None) -> int:
    """Number of selected rows over all ranks (a bool mask, an index tensor or an int).

    Counts travel as host integers (:func:`~pyg_sparsecomm.comm.group.host_all_reduce`), so an
    ``int`` count never waits for a device; a bool mask is counted on its device first.

    A plain integer tensor over more than one rank is refused on every rank: it could be the whole
    graph's ids (``split_idx['train']``, counted once per rank) or this rank's rows.

    Args:
        mask_or_count (torch.Tensor or int): this rank's rows: a bool mask, an index of the shard's
            rows (:class:`~pyg_sparsecomm.graph.node_index.ShardIndex`: ``shard_index(ids, data)``,
            ``data.train_idx``) or a count.
        group (torch.distributed.ProcessGroup, optional): the ranks to count over. (default: all ranks)
    """
    if isinstance(mask_or_count, Tensor):
        if mask_or_count.dtype != torch.bool and not isinstance(mask_or_count, ShardIndex) \
                and is_distributed(group) and dist.get_world_size(group) > 1:
            raise ValueError(f"global_count: a plain integer tensor of {mask_or_count.numel()} entries could be the "
                             f"whole graph's node ids (counted once per rank) or this rank's rows: {FIX}; or pass a "
                             f"bool mask or a count (int)")
        local = int(mask_or_count.sum()) if mask_or_count.dtype == torch.bool else mask_or_count.numel()
    else:
        local = int(mask_or_count)
    return host_all_reduce([local], group=group)[0] if is_distributed(group) else local


def global_bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0,
                    group: dist.ProcessGroup | None = None) -> Tensor:
    """``torch.bincount`` of every rank's values together: the count (or summed ``weights``) of every
    value over all ranks, as long as the largest value of any rank plus one (at least ``minlength``),
    the same on every rank, e.g. the class weights of a shard's labels::

        weight = global_bincount(train_data['user', 'movie'].edge_label)

    Two collectives: the length (a host integer all-reduce), then the counts.

    Args:
        input (torch.Tensor): this rank's non-negative integers (``[n]``).
        weights (torch.Tensor, optional): ``[n]`` weights of this rank's values. (default: :obj:`None`)
        minlength (int, optional): the least number of bins. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the ranks to count over. (default: all ranks)
    """
    length = max(int(input.max()) + 1 if input.numel() else 0, minlength)
    if is_distributed(group):
        length = host_all_reduce([length], dist.ReduceOp.MAX, group)[0]
    return all_reduce_value(torch.bincount(input, weights, minlength=length), dist.ReduceOp.SUM, group,
                            "global_bincount")


def distributed_loss(loss_fn: Callable[..., Tensor] | torch.nn.Module, input: Tensor, target: Tensor,
                     group: dist.ProcessGroup | None = None, **kwargs) -> WholeGraphLoss:
    r"""The whole-graph loss, whose gradient is this rank's share of the single-process gradient.

    .. math::
        L_r = \frac{1}{\sum_s d_s} \sum_{i \in \text{rows}_r} \ell(x_i, y_i), \qquad
        L = \sum_r L_r = \text{the single-process mean loss},

    where :math:`d_s` is what the loss's own mean divides by on rank :math:`s`'s rows: their
    number (their elements for an elementwise loss of ``[n, C]`` targets; for ``cross_entropy`` /
    ``nll_loss`` the targets other than ``ignore_index``, weighted by ``weight``: see
    :mod:`~pyg_sparsecomm.training.loss_reduction`).

    The returned value is :math:`L` on every rank (``float(loss)`` prints the single-process
    loss; no :func:`global_sum`), its gradient :math:`\partial L_r`: the ranks' summed gradient
    shares are the single-process gradient.  Losses combine as usual (``a + 0.5 * b``: value
    and gradient both right).  A plain ``loss_fn(...)`` (a local *mean*) would make the
    gradients about ``P`` times too large: a ``distribute()``d model warns when backward does not
    pass through this function's result.

    Args:
        loss_fn (callable or torch.nn.Module): a PyTorch loss function taking ``reduction=``
            (``F.cross_entropy``, ``F.binary_cross_entropy_with_logits``, ...) or a loss module
            of ``torch.nn`` (``torch.nn.BCEWithLogitsLoss(pos_weight=w)``), whose own arguments
            and ``reduction`` hold (``"mean"``: the global mean; ``"sum"``: the global sum).
        input (Tensor): this rank's scored rows (``out[local.train_mask]``), or the
            :class:`~pyg_sparsecomm.training.replicated.ReplicatedScores` of a global list of
            pairs (``LightGCN``'s scores): then ``target`` holds the whole list's targets and the
            loss is ``loss_fn(input, target, **kwargs)``, as in one process.
        target (Tensor): their targets.
        group (ProcessGroup, optional): the ranks the rows are spread over. (default: all)
        **kwargs (optional): passed to a function ``loss_fn`` (``weight=``, ``ignore_index=``,
            ``label_smoothing=``, ``reduction="sum"``, ...).  A function of the user's without
            ``reduction=`` is taken as a mean over its input's elements (checked: see
            :mod:`~pyg_sparsecomm.training.loss_reduction`).

    Returns:
        a scalar :class:`WholeGraphLoss` (a :class:`~torch.Tensor`).

    One collective per call, not waiting for the device: the rank's summed terms and its
    denominator (from the shapes, or from the targets for ``cross_entropy`` and ``nll_loss``) are
    all-reduced together on the group's device, giving the value and the divisor at once; not
    cached, since with mini-batches a peer's rows change while this rank's may not.
    """
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"distributed_loss: its fourth argument is the process group, got {type(group).__name__}: "
                        f"pass the loss's own arguments by keyword, e.g. distributed_loss(fn, pred, target, weight=w)")
    if isinstance(input, ReplicatedScores):  # every rank holds every row: the loss itself, the same everywhere
        value = loss_fn(input.as_subclass(Tensor), target, **kwargs)
        return mark_normalised(value).as_subclass(WholeGraphLoss)
    if takes_reduction(loss_fn):
        total, denominator = local_terms(loss_fn, input, target, kwargs)
    else:  # its checks may fail on some ranks only (rows given twice): every rank raises
        total, denominator = raise_together(lambda: local_terms(loss_fn, input, target, kwargs),
                                            "distributed_loss", group, flag_first=True)
    if denominator is None:
        return whole_graph_value(total, group)
    return _whole_graph_mean(total, denominator, group)


def whole_graph_value(share: Tensor, group: dist.ProcessGroup | None = None) -> WholeGraphLoss:
    r"""The loss :math:`L = \sum_r L_r` of this rank's share :math:`L_r`, already divided by the
    *global* count (what :func:`distributed_loss` returns for its loss functions; a loss of its own
    form, e.g. ``LightGCN``'s BPR loss, builds its share and calls this): its value on every rank,
    its gradient into :math:`L_r` only.

    Args:
        share (torch.Tensor): this rank's scalar share.
        group (torch.distributed.ProcessGroup, optional): the ranks. (default: all ranks)
    """
    value = all_reduce_value(share.detach().clone(), dist.ReduceOp.SUM, group, "distributed_loss")
    return _GivenValue.apply(mark_normalised(share), value).as_subclass(WholeGraphLoss)


def _whole_graph_mean(total: Tensor, count: int | Tensor, group: dist.ProcessGroup | None) -> WholeGraphLoss:
    r"""``total`` (this rank's summed loss terms) over the global ``count`` (at least 1, as the loss of
    no rows is 0): the value :math:`\sum_s t_s / \sum_s d_s` on every rank, the gradient into
    :math:`t_r / \sum_s d_s` only.  One all-reduce of ``(t_r, d_r)`` in ``float64`` gives both sums."""
    device = total.device
    count = count if isinstance(count, Tensor) else torch.tensor(float(count))
    pair = torch.stack([total.detach().reshape(()).to(torch.float64), count.reshape(()).to(device, torch.float64)])
    pair = all_reduce_value(pair, dist.ReduceOp.SUM, group, "distributed_loss")
    divisor = torch.where(pair[1] == 0, 1.0, pair[1])
    share = (total / divisor.to(torch.promote_types(total.dtype, torch.float32))).to(total.dtype)
    value = (pair[0] / divisor).to(total.dtype)
    return _GivenValue.apply(mark_normalised(share), value).as_subclass(WholeGraphLoss)


def sync_gradients(module: torch.nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Sums parameter gradients over ranks, in one flat all-reduce.

    A parameter without a gradient on this rank contributes zeros, so ranks
    never disagree about the collective's size.  Parameters of a ``distribute()``d model are
    skipped: their gradients were summed in backward (so calling this as well never sums twice).

    Args:
        module (torch.nn.Module): the model whose gradients to sum.
        group (torch.distributed.ProcessGroup, optional): the ranks to sum over. (default: all ranks)
    """
    if not is_distributed(group):
        return
    params = [p for p in module.parameters() if p.requires_grad and not is_synced(p)]
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    check_devices("sync_gradients", group, flat)
    with failures_named("sync_gradients", group):
        finish(dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group, async_op=True), group)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def global_accuracy(pred: Tensor, target: Tensor, group: dist.ProcessGroup | None = None) -> float:
    r"""Fraction of correct predictions over the rows of all ranks.

    Args:
        pred (torch.Tensor): this rank's predicted classes.
        target (torch.Tensor): this rank's true classes.
        group (torch.distributed.ProcessGroup, optional): the ranks to count over. (default: all ranks)

    Shapes:
        - **input:** predictions :math:`(|\mathcal{V}_r|)`, targets :math:`(|\mathcal{V}_r|)` for this
          rank's (selected) rows
        - **output:** a Python :obj:`float`
    """
    pred, target = _same_rows(pred, target)
    correct = global_sum(torch.tensor(float((pred == target).sum()), dtype=torch.float64), group)
    total = global_count(pred.numel(), group)
    return float(correct) / max(total, 1)


def _same_rows(pred: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """``(pred, target)`` compared row by row: ``[n]`` against ``[n, 1]`` (OGB's labels) as ``[n]``
    (``==`` would broadcast them to ``[n, n]``); other shapes that differ raise ``ValueError``."""
    if pred.shape == target.shape:
        return pred, target
    if pred.numel() != target.numel() or pred.dim() > 2 or target.dim() > 2:
        raise ValueError(f"global_accuracy: pred has shape {list(pred.shape)} and target {list(target.shape)}, which "
                         f"compare element by element only if they hold the same rows: pass both as [n] (or both "
                         f"as [n, 1], as OGB's Evaluator takes them)")
    return pred.reshape(-1), target.reshape(-1)


def gather_nodes(tensor: Tensor, local, dst: int | None = 0,
                 group: dist.ProcessGroup | None = None) -> Tensor | None:
    """Rows of every rank's shard (outputs, predictions, embeddings) in global node order.

    Row ``i`` of ``tensor`` belongs to global node ``local.n_id[i]``; the result holds row
    ``v`` for node ``v`` of the whole graph, as a single-process model's output would, e.g. for
    OGB's ``Evaluator`` or a CSV::

        pred = gather_nodes(model(data.x, data.edge_index).argmax(-1), data)
        if pred is not None:                    # rank 0
            evaluator.eval({"y_true": y_true, "y_pred": pred.unsqueeze(-1)})

    A collective: every rank calls it.  (For metrics every rank needs, e.g. an LR scheduler's
    or early stopping's value, :func:`global_accuracy` and :func:`global_sum` are cheaper.)

    Args:
        tensor (torch.Tensor): ``[local.num_nodes, ...]``, this rank's rows in shard order.
        local (torch_geometric.data.Data): the shard (anything with ``n_id`` and ``global_num_nodes``).
        dst (int, optional): the rank (of ``group``) that receives the result; ``None``: every rank.
            (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the ranks holding the shards (default: all).

    Returns:
        ``[global_num_nodes, ...]`` on ``dst`` (every rank if ``dst is None``), ``None`` elsewhere.
    """
    n_id = local.n_id
    if isinstance(tensor, ShardIndex):
        raise ValueError("gather_nodes: tensor is an index of the shard's rows (shard_index(), data.train_idx), not "
                         "one row per node: gather the values (gather_nodes(pred, data)) and index the result with "
                         "the whole graph's ids (the list before shard_index); local.n_id[idx] gives this rank's")
    if tensor.size(0) != n_id.numel():
        raise ValueError(f"gather_nodes: tensor has {tensor.size(0)} rows but the shard holds {n_id.numel()} "
                         f"nodes (local.n_id): pass this rank's rows, e.g. model(data.x, data.edge_index)")
    num_nodes = int(local.global_num_nodes)
    if not is_distributed(group) or dist.get_world_size(group) == 1:
        out = tensor.new_zeros((num_nodes, *tensor.shape[1:]))
        out[n_id.to(tensor.device)] = tensor.detach()
        return out
    device = collective_device(group) or tensor.device
    world_size = dist.get_world_size(group)
    counts = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world_size)]
    with failures_named("gather_nodes", group):
        dist.all_gather(counts, torch.tensor([n_id.numel()], device=device), group=group)
    width = max(int(c) for c in counts)
    rows = torch.zeros((width, *tensor.shape[1:]), dtype=tensor.dtype, device=device)
    rows[:n_id.numel()] = tensor.detach().to(device)
    ids = torch.full((width,), -1, dtype=torch.long, device=device)
    ids[:n_id.numel()] = n_id.to(device)
    receives = dst is None or dist.get_rank(group) == dst
    all_rows = [torch.empty_like(rows) for _ in range(world_size)] if receives else None
    all_ids = [torch.empty_like(ids) for _ in range(world_size)] if receives else None
    with failures_named("gather_nodes", group):
        if dst is None:
            dist.all_gather(all_rows, rows, group=group)
            dist.all_gather(all_ids, ids, group=group)
        else:  # only dst holds the whole graph's rows (every rank would with all_gather)
            dist.gather(rows, all_rows, dst=global_rank(group, dst), group=group)
            dist.gather(ids, all_ids, dst=global_rank(group, dst), group=group)
    if all_rows is None or all_ids is None:
        return None
    out = tensor.new_zeros((num_nodes, *tensor.shape[1:]))
    for r in range(world_size):
        count = int(counts[r])
        out[all_ids[r][:count].to(out.device)] = all_rows[r][:count].to(out.device)
    return out
