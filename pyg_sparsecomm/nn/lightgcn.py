r"""PyG's ``LightGCN`` on a shard: the embedding table sharded by owner, BPR loss and top-:math:`k`
recommendation over all ranks.

``distribute(LightGCN(num_nodes, d, num_layers))`` swaps in :class:`DistributedLightGCN` (parameters,
buffers and ``state_dict`` keys stay).  Its ``LGConv`` layers run as any ``distribute()``d layer.
At its first call on a shard (``local.adj`` / ``partition_and_shard``'s ``data.edge_index``) the
table :math:`x^{(0)}` (``embedding.weight``, built whole by the constructor on every rank, rank
0's copied to all by ``distribute()``) is cut to the rows of the nodes this rank owns, in the
shard's order (``local.n_id``); the other rows are freed.  The ``Parameter`` object stays, so an
optimizer built before the first call keeps working (it must not have stepped yet).  From then on
``embedding.weight`` and its ``state_dict`` entry hold :math:`N_r` rows, and its gradient is that
of the single process at those rows: every row gets its gradient from the halo and pair exchanges'
backward and from the :math:`\lambda`-term of its owner alone, so it is not summed over ranks.
The table is declared sharded by owner (:meth:`~DistributedLightGCN.owner_sharded_rows`,
:mod:`.owner_sharded`), so a checkpoint saves and restores every rank's rows and their optimizer state.

On a shard the methods take the same arguments as PyG's:

* :meth:`~DistributedLightGCN.get_embedding` returns the owned rows;
* :meth:`~DistributedLightGCN.forward` scores pairs given as global ids (``[2, m]``, the same on
  every rank: e.g. the training loop's positives and negatives, drawn with one seed on every rank)
  or as a shard's :class:`~pyg_sparsecomm.link.PairIndex`: a rank scores the pairs whose source it
  owns, in their order, the other end's row brought by the pairs' exchange.  Of global ids it
  returns the scores of *all* the pairs on every rank, in their order
  (:func:`~pyg_sparsecomm.training.replicated.replicate_rows`: one all-reduce of :math:`m` floats),
  so PyG's loop runs unchanged: ``.chunk(2)`` splits positives from negatives, ``pos_rank.numel()``
  counts the batch's pairs, and a loss of them is the single process's, its gradient reaching each
  pair once, at the rank that scored it;
* :meth:`~DistributedLightGCN.recommendation_loss` (of all pairs' scores, or of each rank's from a
  ``PairIndex``) is the single process's loss
  :math:`-\frac{1}{M}\sum \ln\sigma(\hat y_{ui} - \hat y_{uj}) + \frac{\lambda}{M}\lVert x^{(0)}_V \rVert^2`
  (:math:`M` pairs of all ranks; :math:`V` the distinct nodes of ``node_id`` over all ranks, each
  counted by its owner) with :func:`~pyg_sparsecomm.distributed_loss`'s conventions: the value on
  every rank, the gradient into this rank's share;
* :meth:`~DistributedLightGCN.recommend` returns the top-:math:`k` of the sources in ``src_index``
  this rank owns, over the targets of all ranks (:func:`~pyg_sparsecomm.link.recommend_topk`), seen
  pairs excluded with ``exclude``.

Without a shard (a plain ``edge_index`` on one process) it is PyG's ``LightGCN``.
"""
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn.models import LightGCN
from torch_geometric.nn.models.lightgcn import BPRLoss

from ..comm.group import raise_together
from ..comm.group import world_size as group_world_size
from ..graph.sorted_lookup import lookup_sorted
from ..plan.halo_adj import HaloAdj
from ..training.grad_registry import register_synced
from ..training.replicated import ReplicatedScores, replicate_rows
from ..training.whole_graph import global_count, whole_graph_value
from .owner_sharded import OwnerRows
from .recommend_inputs import check_recommend_ids

# link/ (pairs, top-k, the table's rows) is imported where a call on a shard needs it, not here:
# distribute() registers this class for every model, and importing the layers loads nothing of link/
if TYPE_CHECKING:  # pragma: no cover
    from ..link.embedding_rows import EmbeddingRows
    from ..link.pair_index import PairIndex


def attach_embedding(model: LightGCN, group: dist.ProcessGroup | None) -> None:
    """Prepares a :class:`DistributedLightGCN` for sharding at its first call on a shard: its table's
    gradient is kept out of ``distribute()``'s gradient sum (called before that sum is installed)."""
    model._sparsecomm_group = group
    model._sparsecomm_rows = None
    register_synced(model.embedding.weight, model)


class DistributedLightGCN(LightGCN):
    """PyG's ``LightGCN`` whose embedding table is sharded by owner (see the module doc);
    ``distribute`` swaps it in for ``LightGCN`` instances."""

    _sparsecomm_group: dist.ProcessGroup | None = None
    _sparsecomm_rows: "EmbeddingRows | None" = None

    def get_embedding(self, edge_index: Any, edge_weight: Tensor | None = None) -> Tensor:
        r"""The final embedding :math:`\sum_l \alpha_l x^{(l)}` of this rank's nodes (PyG's, on a shard).

        Args:
            edge_index (HaloAdj or torch.Tensor): the shard's ``adj`` (``data.edge_index`` of
                :func:`~pyg_sparsecomm.partition_and_shard`); a plain ``edge_index`` on one process.
            edge_weight (torch.Tensor, optional): the edges' weights, in ``adj``'s edge order.
                (default: :obj:`None`)

        Shapes:
            - **output:** :math:`(|\mathcal{V}_r|, d)`, the owned rows in the shard's order
        """
        self._shard_rows(edge_index)
        return super().get_embedding(edge_index, edge_weight)

    def forward(self, edge_index: Any, edge_label_index: Any = None, edge_weight: Tensor | None = None) -> Tensor:
        r"""The scores :math:`\langle z_s, z_t \rangle` of pairs.

        Args:
            edge_index (HaloAdj or torch.Tensor): the shard's ``adj`` (see :meth:`get_embedding`).
            edge_label_index (torch.Tensor or PairIndex, optional): ``[2, m]`` global ids of pairs,
                the same on every rank: the scores of all of them, in their order, on every rank
                (:class:`~pyg_sparsecomm.training.replicated.ReplicatedScores`: each rank scores
                those whose source it owns, then one all-reduce of :math:`m` scores; the gradient
                reaches each rank's own pairs once); or a shard's
                :class:`~pyg_sparsecomm.link.PairIndex`: the scores of its pairs, held by this rank;
                ``None``: the shard's edges, held by their target's owner, in ``adj``'s edge order.
                (default: :obj:`None`)
            edge_weight (torch.Tensor, optional): the edges' weights. (default: :obj:`None`)

        Shapes:
            - **output:** :math:`(m)` for global pairs, :math:`(m_r)`, one score per pair this rank
              holds, for a ``PairIndex`` or ``None``
        """
        if not isinstance(edge_index, HaloAdj):
            self._shard_rows(edge_index)
            return super().forward(edge_index, edge_label_index, edge_weight)
        out = self.get_embedding(edge_index, edge_weight)
        pairs = self._pair_index(edge_label_index, edge_index)
        scores = (out[pairs[0]] * out[pairs[1]]).sum(dim=-1)  # PairIndex ends index z (__torch_function__)
        if not isinstance(edge_label_index, Tensor):
            return scores
        held = pairs.pairs  # the global list: every rank gets all its scores, its gradient its own pairs'
        return replicate_rows(scores, held.pair_id, held.num_pairs, self._sparsecomm_group)

    def recommendation_loss(self, pos_edge_rank: Tensor, neg_edge_rank: Tensor, node_id: Tensor | None = None,
                            lambda_reg: float = 1e-4, **kwargs: Any) -> Tensor:
        r"""PyG's BPR loss of the pairs of all ranks (see the module doc); a collective.

        Args:
            pos_edge_rank (torch.Tensor): the positive pairs' scores: all of them, the same on
                every rank (:meth:`forward` of global pairs), or this rank's (of a ``PairIndex``).
            neg_edge_rank (torch.Tensor): the matching negative pairs' scores, alike.
            node_id (torch.Tensor, optional): global ids of the nodes whose :math:`x^{(0)}` is
                regularised (their union over the ranks, each once); ``None``: all nodes.
                (default: :obj:`None`)
            lambda_reg (float, optional): :math:`\lambda`. (default: :obj:`1e-4`)
            **kwargs (optional): arguments of PyG's ``BPRLoss``.
        """
        rows = self._sparsecomm_rows
        if rows is None:
            return super().recommendation_loss(pos_edge_rank, neg_edge_rank, node_id, lambda_reg, **kwargs)
        BPRLoss(lambda_reg, **kwargs)  # PyG's checks of its arguments
        group = self._sparsecomm_group
        replicated = isinstance(pos_edge_rank, ReplicatedScores)
        if replicated != isinstance(neg_edge_rank, ReplicatedScores):
            raise ValueError("LightGCN.recommendation_loss: one of the scores is of the whole list of pairs (forward "
                             "of global pairs, the same on every rank), the other this rank's (forward of a "
                             "PairIndex): score positives and negatives alike, e.g. model(adj, edge_label_index)"
                             ".chunk(2) of their concatenation")
        if replicated:
            return self._replicated_loss(pos_edge_rank, neg_edge_rank, node_id, lambda_reg, rows)
        count = max(global_count(pos_edge_rank.size(0) if pos_edge_rank.dim() else 1, group), 1)
        elements = max(global_count(pos_edge_rank.numel(), group), 1)
        share = -F.logsigmoid(pos_edge_rank - neg_edge_rank).sum() / elements
        if lambda_reg != 0:
            emb = self.embedding.weight
            if node_id is not None:
                emb = emb[rows.owned_rows(node_id, "lightgcn_node_ids").to(emb.device)]
            share = share + lambda_reg * emb.norm(p=2).pow(2) / count
        return whole_graph_value(share, group)

    def _replicated_loss(self, pos: Tensor, neg: Tensor, node_id: Tensor | None, lambda_reg: float,
                         rows: "EmbeddingRows") -> Tensor:
        r"""The loss of the scores of a global list (on every rank): PyG's BPR term computed here, the
        same on every rank (its gradient reaches each rank's own pairs through the scores' gather), plus
        the :math:`\lambda`-term, each rank's owned rows of the distinct nodes summed over the ranks."""
        log_prob = F.logsigmoid(pos.as_subclass(Tensor) - neg.as_subclass(Tensor)).mean()
        emb = self.embedding.weight
        if node_id is not None:
            emb = emb[rows.owned_rows(node_id, "lightgcn_node_ids").to(emb.device)]
        regularization = lambda_reg * emb.norm(p=2).pow(2) / pos.size(0) if lambda_reg != 0 else emb.new_zeros(())
        return whole_graph_value(regularization, self._sparsecomm_group) - log_prob

    def recommend(self, edge_index: Any, edge_weight: Tensor | None = None, src_index: Tensor | None = None,
                  dst_index: Tensor | None = None, k: int = 1, sorted: bool = True,
                  exclude: Tensor | None = None) -> Tensor:
        r"""The :math:`k` best targets in ``dst_index`` for each source of ``src_index`` this rank
        owns (a collective; ties by the lower position in ``dst_index``).

        Args:
            edge_index (HaloAdj or torch.Tensor): the shard's ``adj`` (see :meth:`get_embedding`).
            edge_weight (torch.Tensor, optional): the edges' weights. (default: :obj:`None`)
            src_index (torch.Tensor, optional): global ids of the sources, the same on every rank;
                ``None``: all nodes. (default: :obj:`None`)
            dst_index (torch.Tensor, optional): global ids of the candidate targets, distinct, the
                same on every rank; ``None``: all nodes. (default: :obj:`None`)
            k (int, optional): recommendations per source. (default: :obj:`1`)
            sorted (bool, optional): PyG's argument; the result is always sorted. (default: :obj:`True`)
            exclude (torch.Tensor, optional): ``[2, m]`` global (source, target) pairs never
                recommended (the training interactions), the same on every rank; in the numbering
                of the graph LightGCN runs on (``to_homogeneous()``: items after the users), each
                target a candidate of ``dst_index`` when it is given (:mod:`.recommend_inputs`).
                Not in PyG's signature. (default: :obj:`None`)

        Shapes:
            - **output:** :math:`(|S_r|, k)` global target ids, for the sources of ``src_index``
              this rank owns, in ``src_index``'s order
        """
        if not isinstance(edge_index, HaloAdj) and exclude is None:
            self._shard_rows(edge_index)
            return super().recommend(edge_index, edge_weight, src_index, dst_index, k, sorted)
        emb = self.get_embedding(edge_index, edge_weight)
        rows = self._rows_of(edge_index)
        raise_together(lambda: check_recommend_ids(src_index, dst_index, exclude, rows.num_nodes), "LightGCN.recommend",
                       self._sparsecomm_group, flag_first=True)
        src = torch.arange(rows.num_nodes) if src_index is None else src_index.detach().cpu().long()
        dst = torch.arange(rows.num_nodes) if dst_index is None else dst_index.detach().cpu().long()
        src_found, src_rows = rows.local_rows(src)
        dst_found, dst_rows = rows.local_rows(dst)
        item_ids = dst_found.nonzero().view(-1)  # positions in dst_index: the items' ids
        from ..link.topk import recommend_topk
        local_exclude = None if exclude is None else _owned_exclusions(exclude.detach().cpu().long(), dst, item_ids)
        top = recommend_topk(emb[src_rows.to(emb.device)], emb[dst_rows.to(emb.device)], item_ids, k,
                             src[src_found] if exclude is not None else None, local_exclude, self._sparsecomm_group)
        return dst[top.indices.cpu()].to(emb.device)

    # the shard's rows ---------------------------------------------------------------------------
    def owner_sharded_rows(self, shard: Any) -> dict[str, OwnerRows]:
        """The table's rows this rank holds, for a checkpoint (:mod:`~pyg_sparsecomm.nn.owner_sharded`):
        cut to ``shard``'s rows first if no call on a shard did yet.

        Args:
            shard (torch_geometric.data.Data): the rank's shard (its ``adj``).
        """
        adj = getattr(shard, "adj", None)
        if not isinstance(adj, HaloAdj):
            raise ValueError("LightGCN: a checkpoint takes the rank's shard (shard(data) or partition_and_shard(...), "
                             "which carries adj, a HaloAdj): its embedding table is sharded by owner")
        self._shard_rows(adj)
        rows = self._sparsecomm_rows
        assert rows is not None
        return {"embedding.weight": OwnerRows(rows.n_id, rows.num_nodes)}

    def _rows_of(self, edge_index: Any) -> "EmbeddingRows":
        """The table's rows on one process without a shard: all nodes, in order."""
        from ..link.embedding_rows import EmbeddingRows
        if self._sparsecomm_rows is not None:
            return self._sparsecomm_rows
        return EmbeddingRows(torch.arange(self.num_nodes), self.num_nodes)

    def _shard_rows(self, edge_index: Any) -> None:
        """Cuts the table to the shard's owned rows at the first call on a shard; checks later calls."""
        rows, group = self._sparsecomm_rows, self._sparsecomm_group
        if not isinstance(edge_index, HaloAdj):
            if rows is not None or group_world_size(group) > 1:
                raise ValueError(_WHOLE_GRAPH.format(P=group_world_size(group)))
            return
        plan = edge_index.plan
        if rows is not None:
            if not rows.matches(plan.n_id):
                raise ValueError("LightGCN: this shard's nodes are not those of the shard the embedding table was "
                                 "cut to at its first call: pass shards of one partition (partition_and_shard "
                                 "shards every split with the training graph's partition)")
            return
        weight = self.embedding.weight
        if weight.size(0) != plan.num_nodes:
            raise ValueError(f"LightGCN(num_nodes={weight.size(0)}) but the shard's graph has {plan.num_nodes} nodes: "
                             f"build the model with num_nodes of the whole graph (data.num_nodes before sharding)")
        from ..link.embedding_rows import EmbeddingRows
        with torch.no_grad():
            weight.data = weight.data.index_select(0, plan.n_id.to(weight.device))  # the rest is freed
        self._sparsecomm_rows = EmbeddingRows(plan.n_id, plan.num_nodes, group)

    def _pair_index(self, edge_label_index: Any, adj: HaloAdj) -> "PairIndex":
        """The pairs this rank holds, as a :class:`~pyg_sparsecomm.link.PairIndex`."""
        from ..link.pair_index import PairIndex
        from ..link.pairs import local_pairs
        rows = self._sparsecomm_rows
        assert rows is not None
        group = self._sparsecomm_group
        if isinstance(edge_label_index, PairIndex):
            return edge_label_index
        if edge_label_index is None:  # the shard's edges (source, target), held by the target's owner
            plan = adj.plan
            source = torch.cat([plan.n_id, plan.halo_n_id])[adj.col.cpu()]
            target = plan.n_id.repeat_interleave(adj.rowptr.diff().cpu())
            pairs = local_pairs(torch.stack([source, target]), rows.part, group=group)
            return PairIndex(pairs.edge_label_index, rows.part, group, pairs)
        if not isinstance(edge_label_index, Tensor):
            raise TypeError(f"LightGCN: edge_label_index must be a [2, m] tensor of global ids or a PairIndex, got "
                            f"{type(edge_label_index).__name__}")
        what = ("LightGCN: edge_label_index of global ids is the whole list of pairs, the same on every rank; draw "
                "batches and negatives with one torch seed on every rank (torch.manual_seed(0) before the loop)")
        return _distributed_pairs(edge_label_index, rows, group, what)


_WHOLE_GRAPH = ("LightGCN under distribute() in a job of {P} ranks got a plain edge_index (the whole graph's?): "
                "its embedding table is sharded by owner, so it runs on this rank's shard only: pass the shard's "
                "graph (data = partition_and_shard(data); model(data.edge_index, ...), or local.adj of shard())")


def _distributed_pairs(edge_label_index: Tensor, rows: "EmbeddingRows", group: dist.ProcessGroup | None,
                       what: str) -> "PairIndex":
    """The pairs of the global list whose source this rank owns (after checking every rank passed it)."""
    from ..link.pair_index import PairIndex
    from ..link.pairs import distribute_pairs
    from ..link.same_pairs import check_same_pairs
    check_same_pairs(edge_label_index.cpu(), what, group)
    pairs = distribute_pairs(edge_label_index.cpu(), None, rows.part, group)
    return PairIndex(pairs.edge_label_index, rows.part, group, pairs)


def _owned_exclusions(exclude: Tensor, dst: Tensor, item_ids: Tensor) -> Tensor:
    """The excluded pairs whose target this rank owns, as (source id, position in ``dst_index``)."""
    sorted_dst, order = dst.sort()
    at, found = lookup_sorted(sorted_dst, exclude[1])
    source, position = exclude[0][found], order[at[found]]
    mine = torch.isin(position, item_ids)
    return torch.stack([source[mine], position[mine]])
