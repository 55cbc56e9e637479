r"""PyG's ``DeepGraphInfomax`` on a shard: the summary over all nodes, one corruption of the whole
graph, the loss over all nodes and the linear evaluation fit on every rank's training rows.

``distribute(DeepGraphInfomax(hidden, encoder, summary, corruption))`` swaps in
:class:`DistributedDeepGraphInfomax` (parameters and ``state_dict`` keys stay).  On a shard
(``model(data.x, data.edge_index)`` of :func:`~pyg_sparsecomm.partition_and_shard`):

* :meth:`~DistributedDeepGraphInfomax.forward` runs the encoder on the shard, as PyG's does, and
  calls the user's ``corruption`` and ``summary`` with the whole graph's node tensors
  (:class:`~.whole_graph_nodes.WholeGraphNodes`): PyG's ``x[torch.randperm(x.size(0))]`` is one
  permutation of all :math:`N` nodes, drawn from ``torch``'s default generator with rank 0's state
  (given to every rank before the call), so it is the single process's draw when rank 0's
  generator is the single process's; each rank fetches the rows of its nodes from their owners.
  PyG's ``torch.sigmoid(z.mean(dim=0))`` is the sigmoid of the mean over all nodes (one
  all-reduce of :math:`d` floats).  What such a function does beyond reductions over the nodes,
  permutations of all nodes and row-wise operations raises ``NotImplementedError`` naming it;
* :meth:`~DistributedDeepGraphInfomax.loss` is PyG's
  :math:`-\frac{1}{N}\sum_v \log \mathcal{D}(z_v, s) - \frac{1}{N}\sum_v \log(1 - \mathcal{D}(\tilde z_v, s))`
  over all nodes, with :func:`~pyg_sparsecomm.distributed_loss`'s conventions (the value on
  every rank, the gradient into this rank's share);
* :meth:`~DistributedDeepGraphInfomax.test` fits PyG's logistic regression once, on rank 0, on
  every rank's training rows (gathered: :math:`O(n_{train} d)`), and scores every rank's test rows:
  the accuracy over all of them, the same on every rank.

Without a shard on one process it is PyG's model.
"""
import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn.models import DeepGraphInfomax
from torch_geometric.nn.models.deep_graph_infomax import EPS

from ...comm.collectives import gather_rows
from ...comm.group import collective_device, global_rank, host_all_reduce, raise_together
from ...comm.group import rank as group_rank
from ...comm.group import world_size as group_world_size
from ...training.whole_graph import whole_graph_value
from .shard_model import ShardContext, ShardModel
from .whole_graph_nodes import WholeGraphNodes, local_rows


class DistributedDeepGraphInfomax(ShardModel, DeepGraphInfomax):
    """PyG's ``DeepGraphInfomax`` on a shard (see the module doc); ``distribute`` swaps it in."""

    def forward(self, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor, Tensor]:
        r"""The encoder's rows of the graph and of its corruption, and the summary of all nodes.

        Args:
            *args: the encoder's arguments (``data.x, data.edge_index`` of a shard).
            **kwargs: its keyword arguments.

        Shapes:
            - **output:** :math:`(N_r, d)`, :math:`(N_r, d)` (this rank's rows) and the summary,
              the same on every rank
        """
        shard = self._shard_of("DeepGraphInfomax", args, kwargs)
        if shard is None:
            return super().forward(*args, **kwargs)
        pos_z = self.encoder(*args, **kwargs)
        cor = self._corruption(shard, args, kwargs)
        cor = cor if isinstance(cor, tuple) else (cor,)
        cor_kwargs = copy.copy(kwargs)
        for key, value in zip(kwargs.keys(), cor[len(args):], strict=False):  # as PyG's
            cor_kwargs[key] = value
        neg_z = self.encoder(*cor[:len(args)], **cor_kwargs)
        return pos_z, neg_z, self._summary(shard, pos_z, args, kwargs)

    def _corruption(self, shard: ShardContext, args: tuple, kwargs: dict) -> Any:
        """The user's corruption of the whole graph's node tensors, with rank 0's generator state."""
        what = f"DeepGraphInfomax's corruption ({_name(self.corruption)})"
        _rank_zero_generator(shard.group, _first_tensor(args, kwargs))
        out = self.corruption(*_whole(args, shard, what), **_whole(kwargs, shard, what))
        for value in out if isinstance(out, tuple) else (out,):
            if isinstance(value, Tensor) and value.dim() and value.size(0) == shard.num_nodes != shard.num_owned:
                raise NotImplementedError(f"{what} returned a new tensor of {shard.num_nodes} rows (the whole "
                                          f"graph's): on a shard only a permutation of the given node tensor "
                                          f"(x[index]) or row-wise operations of it can be computed exactly")
        return local_rows(out)

    def _summary(self, shard: ShardContext, pos_z: Tensor, args: tuple, kwargs: dict) -> Tensor:
        """The user's summary of the whole graph's node tensors (a reduction over all nodes)."""
        what = f"DeepGraphInfomax's summary ({_name(self.summary)})"
        out = self.summary(WholeGraphNodes(pos_z, shard, what), *_whole(args, shard, what),
                           **_whole(kwargs, shard, what))
        if isinstance(out, WholeGraphNodes):
            raise NotImplementedError(f"{what} returned a tensor with a row per node; a summary of the whole graph "
                                      f"reduces over all nodes (torch.sigmoid(z.mean(dim=0)))")
        return out

    def loss(self, pos_z: Tensor, neg_z: Tensor, summary: Tensor) -> Tensor:
        r"""PyG's objective over all nodes of all ranks (see the module doc).

        Args:
            pos_z (torch.Tensor): this rank's rows of the graph's latent space.
            neg_z (torch.Tensor): this rank's rows of the corrupted graph's.
            summary (torch.Tensor): the summary (the same on every rank).
        """
        group = self._sparsecomm_group
        pos = -torch.log(self.discriminate(pos_z, summary, sigmoid=True) + EPS)
        neg = -torch.log(1 - self.discriminate(neg_z, summary, sigmoid=True) + EPS)
        pos_count, neg_count = host_all_reduce([pos.numel(), neg.numel()], group=group) \
            if group_world_size(group) > 1 else (pos.numel(), neg.numel())
        return whole_graph_value(pos.sum() / max(pos_count, 1) + neg.sum() / max(neg_count, 1), group)

    def test(self, train_z: Tensor, train_y: Tensor, test_z: Tensor, test_y: Tensor, solver: str = "lbfgs",
             *args: Any, **kwargs: Any) -> float:
        r"""PyG's linear evaluation over every rank's rows (see the module doc; a collective).

        Args:
            train_z (torch.Tensor): this rank's training rows of the latent space (``z[data.train_mask]``).
            train_y (torch.Tensor): their labels.
            test_z (torch.Tensor): this rank's test rows.
            test_y (torch.Tensor): their labels.
            solver (str, optional): scikit-learn's ``LogisticRegression`` solver. (default: :obj:`"lbfgs"`)
            *args: further arguments of ``LogisticRegression``.
            **kwargs: its keyword arguments (``max_iter=150``).
        """
        group = self._sparsecomm_group
        if group_world_size(group) == 1:
            return float(super().test(train_z, train_y, test_z, test_y, solver, *args, **kwargs))
        from sklearn.linear_model import LogisticRegression

        def sizes() -> None:
            for z, y, name in ((train_z, train_y, "train"), (test_z, test_y, "test")):
                if z.size(0) != y.size(0):
                    raise ValueError(f"DeepGraphInfomax.test: {name}_z has {z.size(0)} rows but {name}_y "
                                     f"{y.size(0)}: pass this rank's rows of both (z[mask], data.y[mask])")
        raise_together(sizes, "DeepGraphInfomax.test", group, flag_first=True)
        features = gather_rows(train_z.detach().cpu(), group).numpy()
        labels = gather_rows(train_y.detach().cpu(), group).numpy()
        fitted: list[Any] = [None]
        if group_rank(group) == 0:
            fitted[0] = raise_together(lambda: LogisticRegression(*args, solver=solver, **kwargs).fit(features, labels),
                                       "DeepGraphInfomax.test", group, flag_first=True)
        else:
            raise_together(lambda: None, "DeepGraphInfomax.test", group, flag_first=True)
        dist.broadcast_object_list(fitted, src=global_rank(group, 0), group=group, device=collective_device(group))
        predicted = fitted[0].predict(test_z.detach().cpu().numpy()) if test_z.size(0) else []
        correct = int((torch.as_tensor(predicted) == test_y.detach().cpu()).sum()) if test_z.size(0) else 0
        correct, count = host_all_reduce([correct, int(test_y.size(0))], group=group)
        return correct / count if count else float("nan")


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", type(fn).__name__)


def _whole(value: Any, shard: ShardContext, what: str) -> Any:
    """``value`` with this rank's node tensors (``num_owned`` rows) as :class:`WholeGraphNodes`."""
    if isinstance(value, tuple):
        return tuple(_whole(v, shard, what) for v in value)
    if isinstance(value, dict):
        return {k: _whole(v, shard, what) for k, v in value.items()}
    if isinstance(value, Tensor) and value.dim() and value.size(0) == shard.num_owned:
        return WholeGraphNodes(value, shard, what)
    return value


def _first_tensor(args: tuple, kwargs: dict) -> Tensor | None:
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)


def _rank_zero_generator(group: dist.ProcessGroup | None, like: Tensor | None) -> None:
    """Gives every rank rank 0's state of torch's default generator (and of the CUDA generator of
    ``like``'s device), so that a corruption draws the same on every rank."""
    if group_world_size(group) == 1:
        return
    device = collective_device(group)
    states: list[tuple[Callable[[], Tensor], Callable[[Tensor], None]]] = [(torch.get_rng_state, torch.set_rng_state)]
    if like is not None and like.device.type == "cuda":
        index = like.device.index
        states.append((lambda: torch.cuda.get_rng_state(index), lambda s: torch.cuda.set_rng_state(s, index)))
    for get, put in states:
        state = get()
        buffer = state.to(device) if device is not None else state
        dist.broadcast(buffer, src=global_rank(group, 0), group=group)
        put(buffer.cpu())
