r"""PyG's graph auto-encoders on a shard: ``GAE``, ``VGAE`` and their ``InnerProductDecoder``, their
losses over all pairs and nodes, their AUC and AP over every rank's pairs.

``distribute(GAE(encoder))`` (``VGAE``, and the adversarial ``ARGA``/``ARGVA`` of
:mod:`.adversarial`) swaps in the distributed class (parameters and ``state_dict`` keys stay).  On a
shard (``z = model.encode(data.x, data.edge_index)`` of :func:`~pyg_sparsecomm.partition_and_shard`)
``z`` holds this rank's rows, and the methods take PyG's arguments:

* pairs (``pos_edge_index``, ``neg_edge_index``, a decoder's ``edge_index``) as a shard's
  :class:`~pyg_sparsecomm.link.PairIndex` (``train_data.pos_edge_label_index`` of a
  ``RandomLinkSplit(split_labels=True)`` split), as a ``[2, m]`` tensor of global ids, the same on
  every rank (each rank keeps the pairs whose source it owns), or as the shard's ``edge_index`` (its
  edges, held by their target's owner); the decoder gets a ``PairIndex``, so ``z[edge_index[0]]``
  brings the rows owned elsewhere;
* :meth:`~ShardAutoEncoder.recon_loss` is PyG's
  :math:`-\frac{1}{|P|}\sum_{P} \log \sigma(z_s^\top z_t) - \frac{1}{|Q|}\sum_{Q} \log(1 - \sigma(z_s^\top z_t))`
  over the positives :math:`P` and negatives :math:`Q` of all ranks; without ``neg_edge_index`` the
  negatives are PyG's own draw over the whole graph
  (:func:`~pyg_sparsecomm.link.negative_sampling` of the positives: ``torch_geometric.utils.negative_sampling``
  on the union of every rank's positives with the graph's :math:`N`, from Python's ``random`` with the
  state every rank got from rank 0 when the split was sharded), so it is the single process's draw;
* ``VGAE.kl_loss`` is the mean over all :math:`N` nodes; ``VGAE.reparametrize`` draws
  :math:`\varepsilon` per global node id (:mod:`.node_noise`), the same for any number of ranks
  (PyG's distribution, not PyG's draws from ``torch``'s generator);
* :meth:`~ShardAutoEncoder.test` returns scikit-learn's ``roc_auc_score`` and
  ``average_precision_score`` of every rank's pairs (the package's exact versions,
  :func:`~pyg_sparsecomm.link.roc_auc_score` and :func:`~pyg_sparsecomm.link.average_precision_score`).

Every value is a :func:`~pyg_sparsecomm.distributed_loss`-style loss: the whole graph's on every
rank, its gradient into this rank's share.  Without a shard on one process the models are PyG's.
"""
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch_geometric.nn.models import GAE, VGAE, InnerProductDecoder
from torch_geometric.nn.models.autoencoder import EPS, MAX_LOGSTD

from ...comm.group import host_all_reduce
from ...comm.group import world_size as group_world_size
from ...plan.halo_adj import HaloAdj
from ...training.per_rank import warn_once
from ...training.whole_graph import WholeGraphLoss, whole_graph_value
from .shard_model import ShardModel

# link/ (pairs, negatives, metrics) is imported by the calls on a shard that need it, not here: distribute()
# loads this module for every model, and importing the layers loads nothing of link/
if TYPE_CHECKING:  # pragma: no cover
    from ...link.pair_index import PairIndex

#: the noise streams of a model (:func:`~.node_noise.node_normal`)
REPARAMETRIZE, PRIOR = 0, 1


class ShardAutoEncoder(ShardModel):
    """The methods ``GAE`` and its subclasses share on a shard (see the module doc)."""

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        """PyG's alias of the encoder, on a shard this rank's rows."""
        self._shard_of(type(self).__name__, args, kwargs)
        return super().forward(*args, **kwargs)  # type: ignore[misc]

    def encode(self, *args: Any, **kwargs: Any) -> Tensor:
        """The encoder's latent space, on a shard this rank's rows (``data.x, data.edge_index``)."""
        self._shard_of(type(self).__name__, args, kwargs)
        return super().encode(*args, **kwargs)  # type: ignore[misc]

    def decode(self, *args: Any, **kwargs: Any) -> Tensor:
        """The decoder of ``(z, edge_index, ...)``, its pairs as this rank's ``PairIndex`` on a shard."""
        if self._sparsecomm_shard is not None and len(args) > 1:
            args = (args[0], self._pairs(args[1], "decode"), *args[2:])
        elif self._sparsecomm_shard is not None and "edge_index" in kwargs:
            kwargs = {**kwargs, "edge_index": self._pairs(kwargs["edge_index"], "decode")}
        return super().decode(*args, **kwargs)  # type: ignore[misc]

    def recon_loss(self, z: Tensor, pos_edge_index: Any, neg_edge_index: Any = None) -> Tensor:
        r"""PyG's reconstruction loss over the pairs of all ranks (see the module doc).

        Args:
            z (torch.Tensor): this rank's rows of the latent space.
            pos_edge_index (PairIndex or torch.Tensor or HaloAdj): the positive pairs.
            neg_edge_index (PairIndex or torch.Tensor, optional): the negative pairs; ``None``: PyG's
                draw of as many negatives over the whole graph. (default: :obj:`None`)
        """
        if self._sparsecomm_shard is None:
            return super().recon_loss(z, pos_edge_index, neg_edge_index)  # type: ignore[misc]
        from ...link.shard_negatives import negative_sampling
        self._node_ids(z, "recon_loss")
        pos = self._pairs(pos_edge_index, "recon_loss")
        neg = negative_sampling(pos, z.size(0)) if neg_edge_index is None else self._pairs(neg_edge_index,
                                                                                             "recon_loss")
        pos_loss = -torch.log(self.decoder(z, pos, sigmoid=True) + EPS)  # type: ignore[attr-defined]
        neg_loss = -torch.log(1 - self.decoder(z, neg, sigmoid=True) + EPS)  # type: ignore[attr-defined]
        return self._means(pos_loss, neg_loss)

    def test(self, z: Tensor, pos_edge_index: Any, neg_edge_index: Any) -> tuple[float, float]:
        """PyG's AUC and AP of the positive and negative pairs of all ranks (a collective).

        Args:
            z (torch.Tensor): this rank's rows of the latent space.
            pos_edge_index (PairIndex or torch.Tensor): the positive pairs.
            neg_edge_index (PairIndex or torch.Tensor): the negative pairs.
        """
        if self._sparsecomm_shard is None:
            return super().test(z, pos_edge_index, neg_edge_index)  # type: ignore[misc]
        from ...link.metrics import global_auc, global_average_precision
        self._node_ids(z, "test")
        pos_pred = self.decoder(z, self._pairs(pos_edge_index, "test"), sigmoid=True)  # type: ignore[attr-defined]
        neg_pred = self.decoder(z, self._pairs(neg_edge_index, "test"), sigmoid=True)  # type: ignore[attr-defined]
        pred = torch.cat([pos_pred, neg_pred]).detach()
        y = torch.cat([torch.ones(pos_pred.numel()), torch.zeros(neg_pred.numel())])
        group = self._sparsecomm_group
        return global_auc(pred, y, group), global_average_precision(pred, y, group)

    def _means(self, *terms: Tensor) -> WholeGraphLoss:
        """The sum of every term's mean over all ranks' elements, as a whole-graph loss."""
        group = self._sparsecomm_group
        counts = [t.numel() for t in terms]
        if group_world_size(group) > 1:
            counts = host_all_reduce(counts, group=group)
        share = sum(t.sum() / max(c, 1) for t, c in zip(terms, counts, strict=True))
        return whole_graph_value(share, group)  # type: ignore[arg-type]

    def _pairs(self, edge_index: Any, what: str) -> "PairIndex":
        """``edge_index`` as the pairs this rank holds (see the module doc)."""
        from ...link.pair_index import PairIndex
        from ...link.pairs import distribute_pairs, local_pairs
        from ...link.same_pairs import check_same_pairs
        shard, group = self._sparsecomm_shard, self._sparsecomm_group
        assert shard is not None
        name = f"{type(self).__name__}.{what}"
        if isinstance(edge_index, PairIndex):
            return edge_index
        if isinstance(edge_index, HaloAdj):  # the shard's edges (source, target), held by the target's owner
            plan = edge_index.plan
            source = torch.cat([plan.n_id, plan.halo_n_id])[edge_index.col.cpu()]
            target = plan.n_id.repeat_interleave(edge_index.rowptr.diff().cpu())
            pairs = local_pairs(torch.stack([source, target]), shard.part, group=group)
            return PairIndex(pairs.edge_label_index, shard.part, group, pairs)
        if not isinstance(edge_index, Tensor):
            raise TypeError(f"{name}: pairs must be a shard's PairIndex (train_data.pos_edge_label_index), a [2, m] "
                            f"tensor of global ids or the shard's edge_index, got {type(edge_index).__name__}")
        check_same_pairs(edge_index.cpu(), name, group)
        pairs = distribute_pairs(edge_index.cpu(), None, shard.part, group)
        return PairIndex(pairs.edge_label_index, shard.part, group, pairs)


class DistributedGAE(ShardAutoEncoder, GAE):
    """PyG's ``GAE`` on a shard (see the module doc); ``distribute`` swaps it in."""


class DistributedVGAE(ShardAutoEncoder, VGAE):
    """PyG's ``VGAE`` on a shard (see the module doc); ``distribute`` swaps it in."""

    def reparametrize(self, mu: Tensor, logstd: Tensor) -> Tensor:
        r""":math:`\mu + \varepsilon \odot e^{\log\sigma}` while training, :math:`\varepsilon` keyed by
        global node ids (:mod:`.node_noise`); :math:`\mu` in evaluation.

        Args:
            mu (torch.Tensor): this rank's rows of :math:`\mu`.
            logstd (torch.Tensor): this rank's rows of :math:`\log\sigma`.
        """
        if not self.training:
            return mu
        return mu + self._node_noise(logstd, REPARAMETRIZE, "VGAE.reparametrize") * torch.exp(logstd)

    def kl_loss(self, mu: Tensor | None = None, logstd: Tensor | None = None) -> Tensor:
        r"""PyG's KL term, the mean over all nodes of all ranks of
        :math:`-\frac{1}{2}\sum_k (1 + 2\log\sigma_k - \mu_k^2 - \sigma_k^2)`.

        Args:
            mu (torch.Tensor, optional): this rank's rows of :math:`\mu` (default: the last encoding's).
            logstd (torch.Tensor, optional): this rank's rows of :math:`\log\sigma` (default: the last
                encoding's).
        """
        mu = self.__mu__ if mu is None else mu
        logstd = self.__logstd__ if logstd is None else logstd.clamp(max=MAX_LOGSTD)
        per_node = -0.5 * torch.sum(1 + 2 * logstd - mu ** 2 - logstd.exp() ** 2, dim=1)
        return _KLLoss.of(self._means(per_node), self._sparsecomm_shard)


class _KLLoss(WholeGraphLoss):
    """``kl_loss()``'s value: warns once when scaled by this rank's node count (PyG's
    ``(1 / train_data.num_nodes) * model.kl_loss()``, where a shard's ``num_nodes`` is its own)."""

    _sparsecomm_counts: tuple[int, int] | None = None

    @staticmethod
    def of(loss: WholeGraphLoss, shard: Any) -> WholeGraphLoss:
        out = loss.as_subclass(_KLLoss)
        out._sparsecomm_counts = None if shard is None else (shard.num_owned, shard.num_nodes)
        return out

    def _check(self, other: Any, divides: bool) -> None:
        counts = getattr(self, "_sparsecomm_counts", None)
        if counts is None or counts[0] == counts[1] or isinstance(other, (bool, Tensor)):
            return
        local = counts[0] if divides else 1 / max(counts[0], 1)
        if isinstance(other, (int, float)) and other == local:
            warn_once("kl_loss / local nodes", "VGAE.kl_loss() scaled by this rank's number of nodes (a shard's "
                      "num_nodes is its own): the single-process script scales by the whole graph's, "
                      "train_data.global_num_nodes", stacklevel=2)

    def __mul__(self, other: Any) -> Tensor:
        self._check(other, False)
        return super().__mul__(other)

    def __rmul__(self, other: Any) -> Tensor:
        self._check(other, False)
        return super().__rmul__(other)

    def __truediv__(self, other: Any) -> Tensor:
        self._check(other, True)
        return super().__truediv__(other)


class DistributedInnerProductDecoder(InnerProductDecoder):
    r"""PyG's ``InnerProductDecoder`` whose pairs may be a shard's :class:`~pyg_sparsecomm.link.PairIndex`;
    in a job of several ranks a tensor ``edge_index`` (global ids) or ``forward_all`` needs ``z`` of all
    nodes on every rank (``gather_nodes(z, data, dst=None)``): a ``z`` differing between ranks (a shard's
    rows) is refused."""

    def forward(self, z: Tensor, edge_index: Any, sigmoid: bool = True) -> Tensor:
        r""":math:`\sigma(z_s^\top z_t)` of every pair (this rank's, for a ``PairIndex``).

        Args:
            z (torch.Tensor): the latent space (this rank's rows, for a ``PairIndex``).
            edge_index (PairIndex or torch.Tensor): the pairs.
            sigmoid (bool, optional): apply the sigmoid. (default: :obj:`True`)
        """
        from ...link.pair_index import PairIndex
        if not isinstance(edge_index, PairIndex):
            _whole_z(z, "InnerProductDecoder(z, edge_index) with a tensor of global ids")
        return super().forward(z, edge_index, sigmoid)

    def forward_all(self, z: Tensor, sigmoid: bool = True) -> Tensor:
        r"""PyG's dense :math:`\sigma(Z Z^\top)`, of a ``z`` of all nodes.

        Args:
            z (torch.Tensor): the latent space of all nodes.
            sigmoid (bool, optional): apply the sigmoid. (default: :obj:`True`)
        """
        _whole_z(z, "InnerProductDecoder.forward_all(z), the dense N x N adjacency,")
        return super().forward_all(z, sigmoid)


def _whole_z(z: Tensor, what: str) -> None:
    """Raises on every rank unless every rank passes the same ``z`` (in a job of several ranks)."""
    from ...link.embedding_rows import same_everywhere
    if group_world_size() > 1 and not same_everywhere(z.detach().float()):
        raise ValueError(f"{what} needs z of all nodes on every rank, but the ranks passed different z (a shard's "
                         f"rows?): gather them first (z = gather_nodes(z, data, dst=None)), or score a shard's pairs "
                         f"(model.decode(z, data.edge_label_index))")
