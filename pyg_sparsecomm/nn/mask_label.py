r"""PyG's ``MaskLabel`` on a shard: its mask the shard's rows.

``distribute(model)`` swaps in :class:`DistributedMaskLabel` (its ``emb`` parameters, their
broadcast and gradient sum as any module's).  PyG's forward adds (or concatenates) the label
embedding of the rows ``mask`` selects,

.. math::
    \mathbf{x}^{\prime}_i = \mathbf{x}_i + \mathbf{W}_{y_i} \quad (i \in \text{mask}),

which on a shard is exact for the shard's rows: its bool mask, or a
:class:`~pyg_sparsecomm.graph.node_index.ShardIndex` (``shard_index(split_idx, data)['train']``).
Over more than one rank a plain integer index (the whole graph's ids, or rows?) is refused on every
rank, naming ``shard_index``, as is a mask of another length.  ``MaskLabel.ratio_mask`` draws with
``torch.rand`` on each rank's rows, as ``F.dropout`` does: its masks differ from one process's.
"""
from typing import Any

from torch import Tensor
from torch_geometric.nn.models import MaskLabel

from ..comm.group import raise_together, world_size
from ..graph.node_index import node_selection
from .norms import _GlobalStatistics


class DistributedMaskLabel(_GlobalStatistics, MaskLabel):
    """PyG's ``MaskLabel`` on a shard (see the module doc)."""

    def forward(self, x: Tensor, y: Tensor, mask: Any) -> Tensor:
        """PyG's forward, with ``mask`` checked as rows of ``x`` on every rank.

        Args:
            x (torch.Tensor): the shard's node features.
            y (torch.Tensor): their labels.
            mask (torch.Tensor): a bool mask or an index of the shard's rows.

        Shapes:
            - **input:** ``x`` :math:`(|\\mathcal{V}_r|, F)`, ``y`` :math:`(|\\mathcal{V}_r|)`
            - **output:** :math:`(|\\mathcal{V}_r|, F)` (``"add"``) or
              :math:`(|\\mathcal{V}_r|, F + F^{\\prime})` (``"concat"``)
        """
        settings = self._sparsecomm_settings
        group = None if settings is None else settings.group
        if settings is None or world_size(group) == 1:
            return super().forward(x, y, mask)

        def check() -> Any:
            if y.size(0) != x.size(0):
                raise ValueError(f"{type(self).__name__}: y has {y.size(0)} rows but x has {x.size(0)}: pass the "
                                 f"labels of the shard's rows (data.y)")
            return node_selection(mask, x.size(0), True, f"{type(self).__name__}(mask=...)")
        return super().forward(x, y, raise_together(check, type(self).__name__, group, flag_first=True))
