"""GCN normalisation of a rank's block row with *global* degrees."""

import torch
import torch.distributed as dist
from torch import Tensor

from ..plan.halo_adj import HaloAdj
from .runtime import degree_norm
from .runtime.port import shard_of


def distributed_gcn_norm(adj: HaloAdj, edge_weight: Tensor | None = None, improved: bool = False,
                         add_self_loops: bool = True, dtype: torch.dtype = torch.float32,
                         group: dist.ProcessGroup | None = None) -> HaloAdj:
    r"""Returns :math:`\hat D^{-1/2} \hat A \hat D^{-1/2}` restricted to this rank's rows.

    Reproduces ``torch_geometric.nn.conv.gcn_conv.gcn_norm`` (flow
    ``source_to_target``) exactly, through :func:`~pyg_sparsecomm.nn.runtime.degree_norm.gcn_norm`
    (the version ``distribute()`` gives PyG's layers):

    * self-loops of weight ``2`` if ``improved`` else ``1``, added as PyG adds them to the
      form the script gave the graph in (``adj.given_as``): to the nodes without one for an
      ``edge_index`` (an existing loop keeps its weight), on top of an existing one for a torch
      sparse ``adj_t``, in place of it for a ``torch_sparse.SparseTensor``;
    * :math:`\hat d_i = \sum_{j \to i} w_{ji}` is the weighted in-degree, local to
      the owner of ``i``; the source factor :math:`\hat d_j^{-1/2}` of a halo
      column is fetched from its owner with one halo exchange of one column.

    Args:
        adj (HaloAdj): this rank's block row (the shard's ``local.adj``).
        edge_weight (torch.Tensor, optional): the edges' weights in ``adj``'s edge order.
            (default: :obj:`None`, the adjacency's own values)
        improved (bool, optional): self-loops of weight ``2``. (default: :obj:`False`)
        add_self_loops (bool, optional): add self-loops. (default: :obj:`True`)
        dtype (torch.dtype, optional): the values' dtype. (default: :obj:`torch.float32`)
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.
            (default: :obj:`None`, the default group)

    Shapes:
        - **input:** ``adj`` of :math:`|\mathcal{E}_r|` stored edges, edge_weight :math:`(|\mathcal{E}_r|)`
        - **output:** a :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` of the same rows and halo
    """
    if edge_weight is not None and (edge_weight.dim() != 1 or edge_weight.numel() != adj.nnz):
        raise ValueError(f"edge_weight has shape {list(edge_weight.shape)} but the local adjacency has "
                         f"{adj.nnz} edges (pass weights in local.adj's edge order, e.g. local.edge_weight)")
    weight = edge_weight if edge_weight is not None else adj.value
    context = shard_of(adj, group)
    edge_index, value = degree_norm.gcn_norm(context, context.edge_index,
                                             None if weight is None else weight.to(dtype),
                                             adj.num_owned, improved, add_self_loops, dtype=dtype)
    return HaloAdj.from_coo(edge_index[1], edge_index[0], value, adj.plan)
