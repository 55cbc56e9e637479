"""``DistributedGCNConv``: ``GCNConv`` over a partitioned graph."""
from typing import Optional

import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn import GCNConv

from ..adj import HaloAdj
from ..algorithms import ALGORITHMS, make_algorithm
from ..comm.group import check_plan_matches_group, world_size
from .gcn_norm import distributed_gcn_norm


class DistributedGCNConv(GCNConv):
    r"""The graph convolution of Kipf & Welling, trained full-graph across processes.

    .. math::
        X' = \hat D^{-1/2} \hat A \hat D^{-1/2} X \Theta + b

    Each rank holds the rows of :math:`X` and of the normalised adjacency it owns
    (see :func:`~pyg_sparsecomm.shard`) and computes its rows of
    :math:`Z = A^T H W` (ICPP'24 eq. (1), Algorithm 1): the linear map runs first
    on owned rows, then the SpMM ``algorithm`` fetches the rows of other ranks
    that the block row needs.  Forward, input gradients and parameter gradients
    equal single-process ``GCNConv`` on the whole graph.

    The constructor takes ``GCNConv``'s arguments with the same meaning and
    defaults, and the parameters carry the same names, so state dicts move
    between the two layers.  Extra arguments:

    Args:
        algorithm: ``"1d"`` (sparsity-aware, one all-to-allv per SpMM),
            ``"1d_overlap"`` (the same, overlapped with the owned-column SpMM) or
            ``"oblivious"`` (CAGNET's block-row broadcasts, for comparison).
        group: process group (default: the default group).

    Called with a :class:`~pyg_sparsecomm.adj.HaloAdj` it runs distributed;
    called with a plain ``edge_index``/sparse tensor it behaves exactly like
    ``GCNConv`` when no process group with more than one rank is active, and
    raises otherwise (the graph must be partitioned and sharded first).
    """

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False,
                 cached: bool = False, add_self_loops: Optional[bool] = None, normalize: bool = True,
                 bias: bool = True, algorithm: str = "1d", group: Optional[dist.ProcessGroup] = None,
                 **kwargs) -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS)}")
        self.algorithm, self.group = algorithm, group
        super().__init__(in_channels, out_channels, improved=improved, cached=cached,
                         add_self_loops=add_self_loops, normalize=normalize, bias=bias, **kwargs)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self._cached_spmm = None

    def forward(self, x: Tensor, edge_index, edge_weight: Optional[Tensor] = None) -> Tensor:
        if not isinstance(edge_index, HaloAdj):
            if world_size(self.group) > 1:
                raise ValueError(
                    f"{self.__class__.__name__} got a plain edge_index under a world size of "
                    f"{world_size(self.group)}: partition the graph with SparsityAwarePartitioner("
                    f"num_parts=world_size), call shard(data) and pass local.x, local.adj")
            return super().forward(x, edge_index, edge_weight)
        adj = edge_index
        check_plan_matches_group(adj.plan.world_size, adj.plan.rank, self.group)
        if x.dim() != 2 or x.size(0) != adj.num_owned:
            raise ValueError(f"x has shape {list(x.shape)} but this rank owns {adj.num_owned} rows: "
                             f"pass the shard's own x (local.x)")
        if not x.is_floating_point():
            raise ValueError(f"x must be a floating point tensor, got dtype {x.dtype}")
        spmm = self._cached_spmm
        if spmm is None:
            spmm = make_algorithm(self.algorithm, self._adjacency(adj, edge_weight, x), self.group)
            if self.cached:
                self._cached_spmm = spmm
        out = spmm(self.lin(x))
        if self.bias is not None:
            out = out + self.bias
        return out

    def _adjacency(self, adj: HaloAdj, edge_weight: Optional[Tensor], x: Tensor) -> HaloAdj:
        if self.normalize:
            return distributed_gcn_norm(adj, edge_weight, self.improved, self.add_self_loops,
                                        x.dtype, self.group)
        return adj if edge_weight is None else adj.with_value(edge_weight)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"algorithm={self.algorithm!r})")
