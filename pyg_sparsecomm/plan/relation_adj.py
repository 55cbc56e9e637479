r"""``RelationAdj``: a rank's block of one relation of a heterogeneous graph.

A relation :math:`(s, r, d)` is bipartite: row :math:`i` of the block is the :math:`i`-th owned
node of the destination type :math:`d`, column :math:`c` is the :math:`c`-th entry of
``[owned | halo]`` of the source type :math:`s`, whose halo is the union over *every* relation
reading :math:`s` (the plan of the source type, shared by those relations' blocks, so one
exchange of an :math:`s` tensor serves them all, see :mod:`pyg_sparsecomm.nn.runtime.hetero`).
"""
from torch import Tensor

from .halo_adj import HaloAdj, sort_coo
from .homogeneous import RankPlan


class RelationAdj(HaloAdj):
    """A :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` with ``num_rows`` owned destination rows over the
    ``[owned | halo]`` columns of the source type's ``plan``.

    Args:
        rowptr (torch.Tensor): ``[num_rows + 1]`` CSR row pointers over the destination rows.
        col (torch.Tensor): ``[nnz]`` local source columns (owned rows, then halo rows).
        value (torch.Tensor or None): ``[nnz]`` edge weights, or ``None``.
        plan (RankPlan): the :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` of the source node type.
        edge_type (tuple[str, str, str]): ``(source type, relation, destination type)``.
        num_rows (int): owned nodes of the destination type.
    """

    def __init__(self, rowptr: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan,
                 edge_type: tuple[str, str, str], num_rows: int) -> None:
        super().__init__(rowptr, col, value, plan)
        self.edge_type, self._num_rows = edge_type, int(num_rows)

    @classmethod
    def from_relation(cls, row: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan,
                      edge_type: tuple[str, str, str], num_rows: int) -> "RelationAdj":
        """Builds the CSR from local ``row`` (destination) / ``col`` (``[owned | halo]`` source) pairs."""
        rowptr, col, value = sort_coo(row, col, value, num_rows, plan.num_owned + plan.halo_size)
        return cls(rowptr, col, value, plan, edge_type, num_rows)

    @property
    def num_rows(self) -> int:
        return self._num_rows

    def _like(self, rowptr: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan) -> "RelationAdj":
        return RelationAdj(rowptr, col, value, plan, self.edge_type, self._num_rows)

    def __repr__(self) -> str:
        return (f"RelationAdj({self.edge_type}, rank={self.plan.rank}/{self.plan.world_size}, rows={self.num_rows}, "
                f"source owned={self.num_owned}, source halo={self.halo_size}, nnz={self.nnz})")
