r"""The rows a hop draws from, and the sizes of their draws, in one read of the device per hop.

A hop's frontier (the rows first reached at the hop before) is known on the device as a mask
over the shard's rows; sampling it needs the frontier's length and, for every draw, how many
nodes draw and how many in-edges the others keep (:func:`~.in_edge_sample.draw_sizes`).  On an
accelerator all of these are counted over the masks and read together, one wait per hop for all
node types and relations; on the CPU, where reading costs nothing, they are counted over the
frontier itself (not over every row).
"""
from collections.abc import Hashable, Mapping
from typing import TypeVar

from torch import Tensor

from . import host_reads
from .host_reads import indices, read_counts
from .in_edge_sample import draw_sizes

NodeType = TypeVar("NodeType", bound=Hashable)
DrawKey = TypeVar("DrawKey", bound=Hashable)


def frontiers(newly: Mapping[NodeType, Tensor], draws: Mapping[DrawKey, tuple[NodeType, Tensor, int]]
              ) -> tuple[dict[NodeType, Tensor], dict[DrawKey, list[int] | None]]:
    """The frontier of every node type and the sizes of every draw of the hop.

    Args:
        newly (dict): per node type, ``[num_owned]`` bool mask of the rows that draw at this hop.
        draws (dict): per draw (e.g. relation), ``(node type drawing, [num_owned] in-degree of each of
            its rows, fanout)``.

    Returns:
        ``(frontier, sizes)``: per node type its drawing rows (ascending), and per draw the
        :func:`~.in_edge_sample.draw_sizes` of those rows (``None``: left to the draw, on the CPU).
    """
    if not any(host_reads.waits_for_device(mask.device) for mask in newly.values()):
        return {t: indices(mask) for t, mask in newly.items()}, {d: None for d in draws}
    counts = read_counts(*(mask.sum() for mask in newly.values()),
                         *(draw_sizes(degree, fanout, newly[t]) for t, degree, fanout in draws.values()))
    frontier = {t: indices(mask, count) for (t, mask), count in zip(newly.items(), counts, strict=False)}
    sizes = counts[len(newly):]
    return frontier, {d: sizes[2 * i:2 * i + 2] for i, d in enumerate(draws)}
