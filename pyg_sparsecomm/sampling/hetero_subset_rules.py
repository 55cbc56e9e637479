r"""How heterogeneous node-subset batches are drawn: :class:`~.rules.NodeSubsetSampling` on the
nodes of all types together, and a single-process reference of it.

Node :math:`v` of type :math:`t` is node :math:`v + o_t` of ``data.to_homogeneous()`` (:math:`o_t`
the nodes of the types before :math:`t` in ``data.node_types``); it falls in batch
:math:`\lfloor u(s, e, v + o_t) \cdot B \rfloor` of the :math:`B = \lceil N / b \rceil` batches of an
epoch (:math:`N` the nodes of every type, ``b`` = ``batch_size``), so a heterogeneous batch is the
homogeneous subset batch of ``data.to_homogeneous()`` split by type.  Its edges are every
relation's edges whose two ends are in it; the rows scored are its members of ``input_type`` in
``input_nodes``.  Nodes of the input type are ordered seeds first, then by id; the others by id;
every relation's edges by (target, source, id).  Every choice is a function of global ids: a batch
is the same for any partition and any ``P``.
"""
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .hetero_rules import EdgeType, HeteroGlobalBatch
from .rules import NodeSubsetSampling, _input_mask


@dataclass(frozen=True)
class HeteroNodeSubsetSampling(NodeSubsetSampling):
    r"""A uniformly random set of about ``batch_size`` nodes of any type per batch, and the subgraph
    it induces in every relation; the seeds are its members of ``input_type``.

    Args:
        batch_size (int): nodes per batch (of all types), on average.
        shuffle (bool, optional): draw new batches every epoch. (default: :obj:`True`)
        seed (int, optional): the random stream of batches. (default: :obj:`0`)
        input_type (str, optional): the seeds' node type. (default: :obj:`""`)
        node_types (tuple[tuple[str, int], ...], optional): every node type and its number of nodes,
            in the graph's order (``data.node_types``, that of ``to_homogeneous``). (default: :obj:`()`)
    """
    input_type: str = ""
    node_types: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "node_types", tuple((str(t), int(n)) for t, n in self.node_types))
        if self.input_type not in dict(self.node_types):
            raise ValueError(f"input_type {self.input_type!r} is not among the node types "
                             f"{[t for t, _ in self.node_types]}")

    @property
    def num_nodes(self) -> int:
        """Nodes of every type: the membership draws over ``ceil(num_nodes / batch_size)`` batches."""
        return sum(n for _, n in self.node_types)

    def offset(self, node_type: str) -> int:
        """The id of ``node_type``'s node 0 in ``to_homogeneous``'s numbering."""
        offset = 0
        for t, n in self.node_types:
            if t == node_type:
                return offset
            offset += n
        raise KeyError(node_type)

    def member_batch(self, epoch: int, node_type: str, node_ids: Tensor, num_batches: int) -> Tensor:
        """The batch of every node of ``node_type`` with global ids ``node_ids`` in ``epoch``."""
        return self.batch_of(epoch, node_ids + self.offset(node_type), num_batches)


def hetero_subset_global_batches(data, sampling: HeteroNodeSubsetSampling, input_nodes: Tensor | None = None,
                                 epoch: int = 0) -> list[HeteroGlobalBatch]:
    """Every batch of ``epoch`` with a seed on the whole ``HeteroData`` ``data``, in one process, by the
    rules the distributed loader follows (it yields the same batches, split over the ranks); the
    batches' ``num_sampled_nodes`` / ``num_sampled_edges`` are ``None`` (no hops to trim).

    Args:
        data (torch_geometric.data.HeteroData): the heterogeneous graph (``edge_index`` per relation).
        sampling (HeteroNodeSubsetSampling): the batch rule.
        input_nodes (torch.Tensor, optional): bool mask or index over the nodes of ``sampling.input_type``
            (default: all).
        epoch (int, optional): the epoch (matters when ``sampling.shuffle``). (default: :obj:`0`)
    """
    sizes = dict(sampling.node_types)
    if sizes != {t: int(data[t].num_nodes) for t in data.node_types}:
        raise ValueError(f"sampling.node_types {sampling.node_types} are not data's node types and sizes")
    nb = sampling.num_batches(sampling.num_nodes)
    member = {t: sampling.member_batch(epoch, t, torch.arange(n), nb).numpy() for t, n in sizes.items()}
    inputs = _input_mask(input_nodes, sizes[sampling.input_type])
    edges = {et: data[et].edge_index.cpu().numpy() for et in data.edge_types}
    batches = [_subset_batch(b, member, inputs, sampling.input_type, edges) for b in range(nb)]
    return [b for b in batches if b.num_seeds > 0]


def _subset_batch(b: int, member_batch: dict[str, np.ndarray], inputs: np.ndarray, input_type: str,
                  edges: dict[EdgeType, np.ndarray]) -> HeteroGlobalBatch:
    member = {t: m == b for t, m in member_batch.items()}
    t64 = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    n_id = {t: t64(np.flatnonzero(m)) for t, m in member.items()}
    nodes = n_id[input_type].numpy()
    seed = inputs[nodes]
    n_id[input_type] = t64(nodes[np.lexsort((nodes, ~seed))])  # seeds first, then by id
    e_id = {}
    for (src_type, rel, dst_type), (src, dst) in edges.items():
        e = np.flatnonzero(member[src_type][src] & member[dst_type][dst])
        e_id[(src_type, rel, dst_type)] = t64(e[np.lexsort((src[e], dst[e]))])
    return HeteroGlobalBatch(n_id, int(seed.sum()), None, e_id, None)
