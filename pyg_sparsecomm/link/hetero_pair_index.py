r"""A heterogeneous shard's ``edge_label_index``: a relation's pairs this rank holds, indexing each
end's embeddings as PyG's tensor does.

PyG's heterogeneous link prediction scores the pairs of a relation ``(src, rel, dst)`` with::

    row, col = edge_label_index
    z = torch.cat([z_dict['user'][row], z_dict['movie'][col]], dim=-1)

On a shard ``z_dict[src]`` and ``z_dict[dst]`` hold only the owned rows of each type.  A
:class:`HeteroPairIndex` keeps the pairs whose source the rank owns
(:func:`~pyg_sparsecomm.link.hetero_pairs.distribute_hetero_pairs`) and their exchange plans (one
per endpoint type): ``z_dict[src][row]`` and ``z_dict[dst][col]`` are the sources' and targets'
rows, those owned elsewhere brought by the sparsity-aware exchange of their type, so PyG's decoder
runs unchanged.  When ``src == dst`` both ends share one exchange, as for a
:class:`~pyg_sparsecomm.link.pair_index.PairIndex`.  Indexing is a collective: every rank indexes,
also one holding no pairs.  Other tensor operations raise naming :attr:`global_ids`.
"""

from torch import Tensor

from .hetero_pairs import HeteroPairs
from .pair_index import PairEnd
from .two_row_index import SharedEndRows, TwoRowIndex


class HeteroPairIndex(TwoRowIndex):
    r"""``[2, m]`` pairs of one relation this rank holds, as a heterogeneous shard's
    ``data[edge_type].edge_label_index`` (see the module doc).

    Args:
        pairs (HeteroPairs): the rank's pairs and their exchange plans
            (:func:`~pyg_sparsecomm.link.hetero_pairs.distribute_hetero_pairs`).

    Shapes:
        - **input:** ``z_dict[src]`` :math:`(|\mathcal{V}_{src, r}|, F)`, ``z_dict[dst]``
          :math:`(|\mathcal{V}_{dst, r}|, F)` (this rank's rows of each type)
        - **output:** ``z_dict[src][row]``, ``z_dict[dst][col]``: :math:`(m, F)`
    """

    def __init__(self, pairs: HeteroPairs) -> None:
        self.pairs = pairs
        #: ``[2, m]`` (source id of type ``src``, target id of type ``dst``) of this rank's pairs
        self.global_ids = pairs.edge_label_index
        self._shared = SharedEndRows()  # src == dst: one exchange for both ends of the same z


    @property
    def edge_type(self) -> tuple[str, str, str]:
        return self.pairs.edge_type

    def end_rows(self, z: Tensor, end: int) -> Tensor:
        """``z`` of every pair's source (``end=0``, ``z`` of type ``src``) or target (``end=1``, of type ``dst``)."""
        node_type = self.edge_type[0 if end == 0 else 2]
        if self.edge_type[0] != self.edge_type[2]:
            rows = self.pairs.rows(node_type, z)
        else:  # one exchange for both ends of the same z
            rows = self._shared.rows(z, end, lambda z: self.pairs.rows(node_type, z))
        return rows.index_select(0, self.pairs.index[end].to(z.device))

    # tensor habits PyG's heterogeneous link prediction uses (TwoRowIndex: row, col = ..., size(), numel())
    def _end_of(self, end: int) -> PairEnd:
        return PairEnd(self, end)  # type: ignore[arg-type]  # PairEnd only calls end_rows, global_ids

    def _refusal_of(self, what: str) -> str:
        return _refusal(what)

    def __repr__(self) -> str:
        return f"HeteroPairIndex({self.edge_type}, pairs={self.global_ids.size(1)}, held by this rank)"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is Tensor.__getitem__ and len(args) == 2 and isinstance(args[1], PairEnd):
            return args[1].parent.end_rows(args[0], args[1].end)
        raise TypeError(_refusal(f"torch.{getattr(func, '__name__', func)}"))


def _refusal(what: str) -> str:
    return (f"{what} on a heterogeneous shard's edge_label_index (a HeteroPairIndex): it holds the pairs of one "
            f"relation whose source this rank owns, as global ids whose rows may live on other ranks; it supports "
            f"row, col = edge_label_index, z_dict[src][row], z_dict[dst][col] and size(). For the ids themselves "
            f"read edge_label_index.global_ids ([2, m] global ids of the two node types)")
