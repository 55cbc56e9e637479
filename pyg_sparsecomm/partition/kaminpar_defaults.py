r"""``method="kaminpar"``'s options chosen from the graph: the options that pay on large graphs
switch on by its size and degrees, small graphs keep the partitions of the plain options.

Every option of :func:`~.kaminpar_backend.kaminpar_partition` that :data:`AUTOMATIC` names is
``"auto"`` unless the caller names it; :func:`choose_options` then sets it from the graph's
:class:`GraphStats` (a pure function of them), and :func:`automatic_options` tells the user what
it chose and why in one :class:`AutomaticOptionsWarning` whenever a choice differs from
:data:`PLAIN_OPTIONS` (on a small graph nothing is chosen, and nothing is said).  A named option,
``False`` and ``None`` included, is never changed.

=================  ===============================================  ===============================
option             chosen                                           pays by (R-MAT, 64 parts)
=================  ===============================================  ===============================
``threads``        the process's cores, from :data:`LARGE_EDGES`    time
``compress``       ``True`` from :data:`LARGE_EDGES`                memory (the graph compressed)
``split``          ``2`` from :data:`LARGE_EDGES` and               memory (KaMinPar's grows with
                   :data:`SPLIT_MIN_PARTS` parts                    the parts of one call)
``fold_leaves``    ``True`` from :data:`REDUCTION_EDGES` with       time, memory, volume (fewer
                   :data:`LEAF_SHARE` of the nodes of at most       nodes; no cut lost)
                   2 edge ends
``sample_degree``  :data:`SAMPLE_DEGREE` from                        time and memory (fewer edges)
                   :data:`REDUCTION_EDGES` with :data:`HUB_SHARE`
                   of the edge ends at nodes of higher degree
=================  ===============================================  ===============================

The thresholds are where the options started to pay in ``benchmarks/partition_scale.py``
(``benchmarks/RESULTS.md``, R-MAT scales 14-21 into 64 parts): the leaf fold and the sample from
about 1M edges (where ``method="auto"`` picks KaMinPar; at 4M edges together they halved
KaMinPar's time and memory), compression and the two levels only in memory, which they cut from
about 16M edges on (and cost time); on Cora, CiteSeer and the libmetis meshes each option cost up
to 10 % of volume.  R-MAT scale 21 (32M edges) into 64 parts with all five: 1.7x the CSR topology
at 0.997x METIS's volume, against 6.4x with two threads alone.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: an option's value that asks :func:`choose_options` to choose it
AUTO = "auto"
#: the options of ``method="kaminpar"`` chosen from the graph, with the values they had before
#: (and keep on small graphs): ``**PLAIN_OPTIONS`` switches every automatic choice off
PLAIN_OPTIONS: dict[str, Any] = {"threads": None, "compress": None, "split": None, "fold_leaves": False,
                                 "sample_degree": None}
AUTOMATIC = tuple(PLAIN_OPTIONS)
#: edges (of the edge list) from which ``threads``, ``compress`` and ``split`` are chosen
LARGE_EDGES = 8_000_000
#: edges from which ``fold_leaves`` and ``sample_degree`` are chosen (where their statistics say so)
REDUCTION_EDGES = 1_000_000
#: parts from which a large graph is split in halves first (``split=2``)
SPLIT_MIN_PARTS = 16
#: :math:`\tau` of ``sample_degree`` when it is chosen
SAMPLE_DEGREE = 384
#: share of the edge ends at nodes of degree above :data:`SAMPLE_DEGREE` from which edges are sampled
HUB_SHARE = 0.25
#: share of the nodes with at most 2 edge ends from which leaves are folded
LEAF_SHARE = 0.2


class AutomaticOptionsWarning(UserWarning):
    """Names the options ``method="kaminpar"`` chose from the graph and why (see
    :mod:`~pyg_sparsecomm.partition.kaminpar_defaults`); given once per graph and choice.  Name the
    options to choose otherwise, or silence it with
    ``warnings.filterwarnings("ignore", category=AutomaticOptionsWarning)``."""


@dataclass(frozen=True)
class GraphStats:
    """What :func:`choose_options` reads of a graph.

    Attributes:
        num_nodes (int): :math:`n`.
        num_edges (int): the edges of the edge list (an undirected graph stored with both directions
            counts each twice).
        max_degree (int): the largest number of edge ends at a node (self-loops not counted).
        hub_share (float): the share of all edge ends that lie at nodes of more than :data:`SAMPLE_DEGREE`.
        low_degree_share (float): the share of the nodes with at most 2 edge ends: isolated nodes and
            leaves (one neighbour, stored in one direction or both), and inner nodes of paths.
    """

    num_nodes: int
    num_edges: int
    max_degree: int
    hub_share: float
    low_degree_share: float

    @classmethod
    def of_degrees(cls, degree: np.ndarray, num_edges: int) -> GraphStats:
        """The statistics of a graph of ``num_edges`` edges whose nodes have ``degree`` edge ends
        (:func:`~.sparsify.edge_degrees`)."""
        ends = int(degree.sum())
        hub_ends = int(degree[degree > SAMPLE_DEGREE].sum())
        n = len(degree)
        return cls(n, int(num_edges), int(degree.max()) if n else 0, hub_ends / ends if ends else 0.0,
                   float(np.count_nonzero(degree <= 2)) / n if n else 0.0)


def choose_options(stats: GraphStats, num_parts: int, options: Mapping[str, Any], cores: int,
                   cores_source: str = "the cores this process may use") -> tuple[dict[str, Any], dict[str, str]]:
    """The value of every :data:`AUTO` entry of ``options`` (the others as given), and for each of
    them why.

    Args:
        stats (GraphStats): the graph's statistics.
        num_parts (int): the parts asked for.
        options (Mapping[str, Any]): the options of :data:`AUTOMATIC`, :data:`AUTO` where not named,
            and ``preset``.
        cores (int): the threads a large graph gets.
        cores_source (str, optional): where ``cores`` comes from, for the reason given.
            (default: ``"the cores this process may use"``)
    """
    large, reducible = stats.num_edges >= LARGE_EDGES, stats.num_edges >= REDUCTION_EDGES
    size = f"{_count(stats.num_edges)} edges {'>=' if large else '<'} {_count(LARGE_EDGES)}"
    reduction_size = f"{_count(stats.num_edges)} edges {'>=' if reducible else '<'} {_count(REDUCTION_EDGES)}"
    out, why = dict(options), {}

    def choose(name: str, value: Any, reason: str) -> None:
        if options[name] == AUTO:
            out[name], why[name] = value, reason

    choose("threads", cores if large else None,
           f"{size}: {cores_source}" if large else size)
    if str(options["preset"]).startswith("terapart"):
        choose("compress", True, f"preset {options['preset']!r} partitions compressed graphs only")
    else:
        choose("compress", True if large else None, f"{size}: KaMinPar holds the graph compressed" if large else size)
    splits = large and num_parts >= SPLIT_MIN_PARTS
    choose("split", 2 if splits else None,
           f"{num_parts} parts {'>=' if num_parts >= SPLIT_MIN_PARTS else '<'} {SPLIT_MIN_PARTS}, {size}"
           + (": halves first, then each half's parts (KaMinPar's memory grows with the parts of a call)"
              if splits else ""))
    low = stats.low_degree_share
    choose("fold_leaves", reducible and low >= LEAF_SHARE,
           f"{low:.0%} of the nodes have at most 2 edge ends ({'>=' if low >= LEAF_SHARE else '<'} "
           f"{LEAF_SHARE:.0%}), {reduction_size}")
    hubs = stats.hub_share
    choose("sample_degree", SAMPLE_DEGREE if reducible and hubs >= HUB_SHARE else None,
           f"{hubs:.0%} of the edge ends lie at nodes of degree above {SAMPLE_DEGREE} "
           f"({'>=' if hubs >= HUB_SHARE else '<'} {HUB_SHARE:.0%}; maximum degree {stats.max_degree}), "
           f"{reduction_size}")
    return out, why


def automatic_options(degree: np.ndarray, num_edges: int, num_parts: int, options: Mapping[str, Any],
                      cores: int, cores_source: str) -> dict[str, Any]:
    """:func:`choose_options` for the graph of ``degree`` (:func:`~.sparsify.edge_degrees`), with
    one :class:`AutomaticOptionsWarning` naming every choice and why when one of them differs from
    :data:`PLAIN_OPTIONS`."""
    chosen, why = choose_options(GraphStats.of_degrees(degree, num_edges), num_parts, options, cores,
                                 cores_source)
    plain = dict(PLAIN_OPTIONS, compress=str(options["preset"]).startswith("terapart") or None)  # as resolved
    if any(chosen[name] != plain[name] for name in why):
        listed = "; ".join(f"{name}={chosen[name]!r} ({reason})" for name, reason in why.items())
        warnings.warn(f"method='kaminpar' chose its options from the graph ({len(degree)} nodes, "
                      f"{num_edges} edges, {num_parts} parts): {listed}. An option named is kept as given "
                      f"(False and None too); **pyg_sparsecomm.partition.kaminpar_defaults.PLAIN_OPTIONS "
                      f"names them all with the values they have on small graphs",
                      AutomaticOptionsWarning, stacklevel=4)
    return chosen


def _count(value: int) -> str:
    """``32,417,925``: exact, so a count just below a threshold never reads as the threshold."""
    return f"{value:,}"
