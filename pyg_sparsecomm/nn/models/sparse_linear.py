r"""PyG's ``SparseLinear`` (``LINKX``'s edge part) on a shard: its weight rows read by global id.

``SparseLinear`` holds a weight row per node of the whole graph and aggregates the rows of every
node's sources,

.. math::
    \mathbf{h}_i = \sum_{j \in \mathcal{N}(i)} w_{ji} \mathbf{W}_j + \mathbf{b} ,

with :math:`\mathbf{W}_j` the row of *global* node :math:`j`.  On a shard the sources of
``local.adj`` are local columns ``[owned | halo]``, whose global ids the plan holds
(``n_id``, ``halo_n_id``): :class:`DistributedSparseLinear` reads ``W`` at those ids, so no row is
exchanged (every rank holds the whole ``[N, H]`` weight, as PyG's does; its gradient, the sum of the
ranks' shares, is all-reduced as any parameter's).  :math:`w_{ji}` is ``edge_weight`` when given
(in ``local.adj``'s edge order), else ``local.adj``'s values (PyG's ``adj_t`` path), else 1.
``distribute()`` runs its forward as it is, with no halo exchange attached (``runs_on_shard``).
"""
import torch
from torch import Tensor
from torch_geometric.nn.models.linkx import SparseLinear

from ...plan.halo_adj import HaloAdj


class DistributedSparseLinear(SparseLinear):
    """PyG's ``SparseLinear`` on a shard (see the module doc)."""

    #: distribute() attaches no halo exchange: the forward reads the weight by global id itself
    runs_on_shard = True

    def forward(self, edge_index, edge_weight: Tensor | None = None) -> Tensor:
        r"""PyG's sum of the sources' weight rows, on a shard's ``local.adj``.

        Args:
            edge_index (HaloAdj or Tensor): the shard's ``local.adj`` (anything else: PyG's forward).
            edge_weight (torch.Tensor, optional): :math:`w_{ji}` in ``local.adj``'s edge order.
                (default: :obj:`None`, ``local.adj``'s values)

        Shapes:
            - **input:** ``edge_index`` with :math:`|\mathcal{E}_r|` edges
            - **output:** :math:`(|\mathcal{V}_r|, H)`
        """
        if not isinstance(edge_index, HaloAdj):
            return super().forward(edge_index, edge_weight)
        if edge_index.is_minibatch:
            raise ValueError("LINKX/SparseLinear: a mini-batch's adjacency is not supported (its weight rows are "
                             "read by the global ids of a whole-graph shard); train it full-graph on local.adj")
        plan = edge_index.plan
        row, col = edge_index.coo()
        sources = torch.cat([plan.n_id, plan.halo_n_id]).to(col.device)[col]
        messages = self.weight[sources]
        weight = edge_weight if edge_weight is not None else edge_index.value
        if weight is not None:
            messages = messages * weight.view(-1, 1).to(messages.dtype)
        out = messages.new_zeros(edge_index.num_rows, messages.size(1)).index_add(0, row, messages)
        return out if self.bias is None else out + self.bias
