"""The partitioner's communication pattern, computed once and reused by ``shard()`` and
``save_partition()`` of the same graph.

:class:`~pyg_sparsecomm.partition.SparsityAwarePartitioner` computes the pattern of its partition
for ``data.comm_stats``; the pattern travels with those statistics (in this process only: pickling
drops it), and a ``shard()`` or ``save_partition()`` of that data takes it from there instead of
computing it again -- when the graph and the partition are still those it was computed from: the
same ``edge_index`` tensor, not edited in place since (its version counter), and an equal ``part``.
Anything else (another graph, an edited partition, a loaded dataset) computes the pattern anew.
"""
import weakref
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from .homogeneous import CommPattern, comm_pattern

#: the attribute of a :class:`~pyg_sparsecomm.plan.stats.CommStats` that holds its :class:`KnownPattern`
ATTRIBUTE = "_known_pattern"


@dataclass(frozen=True, eq=False)
class KnownPattern:
    """A pattern and the graph it was computed from.

    Args:
        pattern (CommPattern): the pattern of ``part`` on the graph.
        edge_index (weakref.ref): the graph's ``edge_index`` tensor (a weak reference: the pattern
            keeps no graph alive).
        version (int): that tensor's version counter then (an in-place edit raises it).
    """
    pattern: CommPattern
    edge_index: weakref.ref
    version: int

    def fits(self, edge_index: Tensor, part: Tensor, num_nodes: int, num_parts: int) -> bool:
        """Whether the pattern is that of ``part`` on ``edge_index`` (O(N): the part vectors compared)."""
        pattern = self.pattern
        return (self.edge_index() is edge_index and edge_index._version == self.version
                and pattern.num_nodes == num_nodes and pattern.num_parts == num_parts
                and np.array_equal(pattern.part, part.detach().cpu().numpy()))


def remember_pattern(stats: object, pattern: CommPattern, edge_index: Tensor) -> None:
    """Lets ``stats`` (the ``comm_stats`` attached with the partition) carry ``pattern``, the
    pattern of the partition on ``edge_index``."""
    setattr(stats, ATTRIBUTE, KnownPattern(pattern, weakref.ref(edge_index), edge_index._version))


def remember_graph(stats: object, edge_index: Tensor) -> None:
    """Points the pattern ``stats`` carries (if any) at ``edge_index``, a graph of the same structure
    (the partitioner's cache found it by the SHA-256 of its structure)."""
    known = getattr(stats, ATTRIBUTE, None)
    if isinstance(known, KnownPattern):
        remember_pattern(stats, known.pattern, edge_index)


def pattern_of(edge_index: Tensor, part: Tensor, num_nodes: int, num_parts: int,
               stats: object = None) -> CommPattern:
    """The communication pattern of ``part`` on ``edge_index``: the one ``stats`` carries when it
    fits (see the module doc), else :func:`~pyg_sparsecomm.plan.homogeneous.comm_pattern`'s.

    Args:
        edge_index (torch.Tensor): ``[2, num_edges]`` the graph.
        part (torch.Tensor): ``[num_nodes]`` the owner of every node.
        num_nodes (int): the graph's nodes.
        num_parts (int): the parts of the partition.
        stats (CommStats, optional): the graph's ``comm_stats``. (default: :obj:`None`)
    """
    known = getattr(stats, ATTRIBUTE, None)
    if isinstance(known, KnownPattern) and known.fits(edge_index, part, num_nodes, num_parts):
        return known.pattern
    return comm_pattern(edge_index.cpu(), part.cpu(), num_nodes, num_parts)
