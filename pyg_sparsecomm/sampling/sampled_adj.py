r"""``SampledAdj``: a mini-batch's block row, which can drop its outermost hop layer by layer.

A neighbour batch of ``L`` hops feeds an ``L``-layer GNN; layer ``i`` (0-based) only needs
the nodes within ``L - i`` hops of the seeds and the edges sampled at hops ``1 .. L - i``
(PyG's ``trim_to_layer``).  The rows of a batch are ordered by hop, so the kept rows and
edges are prefixes of the CSR; the halo and the send lists keep the entries some kept edge
reads (each entry knows the first hop an edge read it at), so a trimmed layer also *moves*
fewer rows.  Every rank trims the same hops, so the trimmed plans still pair up.
"""
from torch import Tensor

from ..plan.halo_adj import HaloAdj
from ..plan.homogeneous import RankPlan
from .hops import check_hop_order, trim_columns, trim_plan
from .sampled_relation_adj import SampledRelationAdj, trim_relations


class SampledAdj(HaloAdj):
    """A :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` over a batch's rows with hop bookkeeping.

    Args:
        rowptr (torch.Tensor): ``[num_owned + 1]`` CSR row pointers over the batch's rows.
        col (torch.Tensor): ``[nnz]`` local source columns (owned rows, then halo rows).
        value (torch.Tensor or None): ``[nnz]`` edge weights, or ``None``.
        plan (RankPlan): the batch's rows and halo, as for :class:`HaloAdj`.
        num_sampled_nodes (list[int] or None): this rank's rows per hop (``None``: not trimmable, e.g.
            node subsets).
        num_sampled_edges (list[int] or None): this rank's edges per hop ``1 .. L``.
        halo_hop (torch.Tensor): ``[halo_size]`` the first hop an edge read each halo entry at.
        send_hop (torch.Tensor): ``[len(send_index)]`` the first hop a peer read each sent row at.
        part_sampled_nodes (torch.Tensor or None): ``[P, L + 1]`` rows per hop of every rank (their
            trimmed sizes).
    """

    def __init__(self, rowptr: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan,
                 num_sampled_nodes: list[int] | None, num_sampled_edges: list[int] | None,
                 halo_hop: Tensor, send_hop: Tensor, part_sampled_nodes: Tensor | None) -> None:
        super().__init__(rowptr, col, value, plan)
        self.num_sampled_nodes, self.num_sampled_edges = num_sampled_nodes, num_sampled_edges
        self.halo_hop, self.send_hop, self.part_sampled_nodes = halo_hop, send_hop, part_sampled_nodes
        self._trimmed: SampledAdj | None = None

    @property
    def num_hops(self) -> int:
        """Hops this adjacency still holds (0 when it has no hop structure)."""
        return len(self.num_sampled_edges) if self.num_sampled_edges is not None else 0

    def _like(self, rowptr: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan) -> "SampledAdj":
        return SampledAdj(rowptr, col, value, plan, self.num_sampled_nodes, self.num_sampled_edges,
                          self.halo_hop, self.send_hop, self.part_sampled_nodes)

    def to(self, device, non_blocking: bool = False) -> "SampledAdj":
        """This adjacency, its plan and its hop bookkeeping on ``device`` (itself if already there)."""
        out = super().to(device, non_blocking)  # built by _like: a SampledAdj
        assert isinstance(out, SampledAdj)
        if out is self:
            return self
        out.halo_hop = self.halo_hop.to(device, non_blocking=non_blocking)
        out.send_hop = self.send_hop.to(device, non_blocking=non_blocking)
        if self.part_sampled_nodes is not None:
            out.part_sampled_nodes = self.part_sampled_nodes.to(device, non_blocking=non_blocking)
        return out

    def trim(self) -> "SampledAdj":
        """This batch without its outermost hop: its nodes, the edges sampled at it and the halo
        and send entries only those edges read (cached)."""
        if self.num_sampled_nodes is None or self.num_sampled_edges is None or self.part_sampled_nodes is None:
            raise ValueError("this batch has no hop structure (a node-subset batch: every layer uses the whole "
                             "induced subgraph); do not pass num_sampled_nodes_per_hop for it")
        if self.num_hops <= 1:
            raise ValueError("cannot trim a batch of one hop: the model has more layers than the loader has hops "
                             "(give the loader one num_neighbors entry per layer)")
        if self._trimmed is None:
            self._trimmed = self._drop_last_hop()
        return self._trimmed

    def _drop_last_hop(self) -> "SampledAdj":
        assert self.num_sampled_nodes is not None and self.num_sampled_edges is not None
        assert self.part_sampled_nodes is not None
        hops = self.num_hops - 1  # hops kept
        rows, nnz = sum(self.num_sampled_nodes[:hops + 1]), sum(self.num_sampled_edges[:hops])
        trimmed, halo_keep, send_keep = trim_plan(self.plan, rows, self.halo_hop, self.send_hop,
                                                  self.part_sampled_nodes, hops)
        check_hop_order(self.col[:nnz], self.plan.num_owned, rows, self.rowptr, sum(self.num_sampled_nodes[:hops]), nnz)
        col = trim_columns(self.col[:nnz], self.plan.num_owned, rows, halo_keep)
        value = None if self.value is None else self.value[:nnz]
        # the rows of the new outermost hop keep no in-edge (theirs were sampled at the dropped hop)
        out = SampledAdj(self.rowptr[:rows + 1].clamp(max=nnz), col, value, trimmed, self.num_sampled_nodes[:hops + 1],
                         self.num_sampled_edges[:hops], self.halo_hop[halo_keep], self.send_hop[send_keep],
                         self.part_sampled_nodes[:, :hops + 1])
        out.given_as = self.given_as
        return out

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_trimmed"] = None
        return state

    def __repr__(self) -> str:
        return (f"SampledAdj(rank={self.plan.rank}/{self.plan.world_size}, rows={self.num_owned}, "
                f"halo={self.halo_size}, nnz={self.nnz}, hops={self.num_hops})")


def trim_to_layer(layer: int, num_sampled_nodes_per_hop: list[int] | None,
                  num_sampled_edges_per_hop: list[int] | None, x: Tensor, edge_index,
                  edge_attr: Tensor | None = None):
    r"""PyG's :func:`torch_geometric.utils.trim_to_layer` for a :class:`SampledAdj` (and PyG's own for
    anything else): drops one more hop before layer ``layer > 0``; ``x`` and ``edge_attr`` keep their
    first rows, as the trimmed adjacency does.  Returns ``(x, adj, edge_attr)``.

    Args:
        layer (int): the layer about to run (``0``: nothing is trimmed).
        num_sampled_nodes_per_hop (list[int] or dict[str, list[int]]): the batch's rows per hop
            (``batch.num_sampled_nodes``; ``None``: nothing is trimmed).
        num_sampled_edges_per_hop (list[int] or dict[EdgeType, list[int]]): the batch's edges per hop
            (``batch.num_sampled_edges``).
        x (torch.Tensor or dict[str, torch.Tensor]): node features (per node type).
        edge_index (SampledAdj or dict[EdgeType, SampledRelationAdj] or torch.Tensor): the batch's
            adjacency (``batch.adj``; per relation), or anything PyG's ``trim_to_layer`` takes.
        edge_attr (torch.Tensor, optional): edge features in the adjacency's edge order.
            (default: :obj:`None`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_b|, F)`, edge features
          :math:`(|\mathcal{E}_b|, D)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}_b^{(l)}|, F)`, the adjacency and edge
          features :math:`(|\mathcal{E}_b^{(l)}|, D)` of the hops layer :math:`l` still needs
    """
    if isinstance(edge_index, dict) and any(isinstance(a, SampledRelationAdj) for a in edge_index.values()):
        if layer <= 0 or num_sampled_nodes_per_hop is None:
            return x, edge_index, edge_attr
        return trim_relations(layer, num_sampled_nodes_per_hop, x, edge_index, edge_attr)
    if not isinstance(edge_index, SampledAdj):
        from torch_geometric.utils import trim_to_layer as pyg_trim_to_layer
        return pyg_trim_to_layer(layer, num_sampled_nodes_per_hop, num_sampled_edges_per_hop,
                                 x, edge_index, edge_attr)
    if layer <= 0 or num_sampled_nodes_per_hop is None:
        return x, edge_index, edge_attr
    nodes, hops = list(num_sampled_nodes_per_hop), edge_index.num_hops
    if edge_index.num_sampled_nodes is None or nodes[:hops + 1] != edge_index.num_sampled_nodes \
            or hops != len(nodes) - layer:
        raise ValueError(f"trim_to_layer(layer={layer}, num_sampled_nodes_per_hop={nodes}) does not fit this rank's "
                         f"batch adjacency (rows per hop {edge_index.num_sampled_nodes}): pass batch.adj, "
                         f"batch.num_sampled_nodes and batch.num_sampled_edges, and trim once per layer in order")
    if x.size(0) != edge_index.num_owned:
        raise ValueError(f"x has {x.size(0)} rows, the batch adjacency {edge_index.num_owned}: trim x and the "
                         f"adjacency together")
    adj = edge_index.trim()
    x = x.narrow(0, 0, adj.num_owned)
    if edge_attr is not None:
        edge_attr = edge_attr.narrow(0, 0, adj.nnz)
    return x, adj, edge_attr

