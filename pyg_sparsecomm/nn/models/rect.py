r"""PyG's ``RECT_L`` on a shard: its class centres over all ranks.

``distribute(model)`` swaps in :class:`DistributedRECT_L`.  Its ``forward`` and ``embed`` are a
``GCNConv`` and a ``Linear`` (the conv distributed by its rule); ``get_semantic_labels`` replaces
each labelled node's label by its class centre, the mean of the features of the labelled nodes of
its class,

.. math::
    \mathbf{c}_k = \frac{\sum_{r} \sum_{i \in \text{mask}_r,\, y_i = k} \mathbf{x}_i}
                        {\sum_{r} |\{i \in \text{mask}_r : y_i = k\}|} ,

whose sums and counts are all-reduced over the ranks (one all-reduce of ``K x (F + 1)`` numbers,
``K`` the number of classes over all ranks); a rank returns the centres of its own masked rows, in
their order, as PyG does for the whole graph.  ``mask`` is the shard's bool mask or a
:class:`~pyg_sparsecomm.graph.node_index.ShardIndex`; a plain integer index over more than one
rank is refused on every rank, naming ``shard_index``.
"""
import torch
from torch import Tensor
from torch_geometric.nn.models import RECT_L

from ...comm.collectives import row_all_reduce
from ...comm.group import host_all_reduce, raise_together, world_size
from ...graph.node_index import node_selection
from ..norms import _GlobalStatistics


class DistributedRECT_L(_GlobalStatistics, RECT_L):  # noqa: N801 (PyG's class name)
    """PyG's ``RECT_L`` on a shard (see the module doc)."""

    def get_semantic_labels(self, x: Tensor, y: Tensor, mask: Tensor) -> Tensor:
        r"""PyG's class centres of the masked rows, the means over every rank's masked rows.

        Args:
            x (torch.Tensor): the shard's node features.
            y (torch.Tensor): their labels.
            mask (torch.Tensor): a bool mask or an index of the shard's rows.

        Shapes:
            - **input:** ``x`` :math:`(|\mathcal{V}_r|, F)`, ``y`` :math:`(|\mathcal{V}_r|)`
            - **output:** :math:`(|\text{mask}_r|, F)`
        """
        settings = self._sparsecomm_settings
        group = None if settings is None else settings.group
        if settings is None or world_size(group) == 1:
            return super().get_semantic_labels(x, y, mask)
        rows = raise_together(lambda: node_selection(mask, x.size(0), True, "RECT_L.get_semantic_labels(mask=...)"),
                              "RECT_L.get_semantic_labels", group, flag_first=True)
        with torch.no_grad():
            y, x = y[rows], x[rows]
            classes = host_all_reduce([int(y.max()) + 1 if y.numel() else 0], torch.distributed.ReduceOp.MAX,
                                      group)[0]
            sums = x.new_zeros(classes, x.size(1) + 1)
            sums.index_add_(0, y, torch.cat([x, x.new_ones(x.size(0), 1)], dim=1))
            sums = row_all_reduce(sums, group)
            centres = sums[:, :-1] / sums[:, -1:].clamp(min=1)
            return centres[y]
