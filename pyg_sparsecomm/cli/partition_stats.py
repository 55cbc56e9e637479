"""``python -m pyg_sparsecomm partition-stats``: communication volumes of partitioning methods.

Prints, for every P and method, the per-SpMM total volume, max send/receive
volume, max messages sent/received and compute imbalance, the main ones also
normalised to the random partition (as Table 2 of the VLDB'23 paper), and can
save the P×P volume matrix as a heatmap and the rows each rank sends and receives as
bars (PNG, SVG, PDF, ... through matplotlib: ``pip install pyg_sparsecomm[plot]``).  Needs no
processes: everything comes from the plan.
"""
# The parser imports neither torch nor the partitioner, so that --help answers at once: the functions
# that run the command import them.
import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .options import Option, parse_option

if TYPE_CHECKING:  # pragma: no cover
    from ..partition import SparsityAwarePartitioner
    from ..plan.stats import CommStats

#: the libmetis example meshes benchmarks/fetch_meshes.sh downloads into benchmarks/graphs/
MESHES = ("mdual.graph", "copter2.graph", "4elt.graph")
GRAPH_SPECS = "sbm, sbm:N, rmat:SCALE[:EDGE_FACTOR], Cora, CiteSeer, PubMed or a METIS .graph file"
#: balance_max_send's objectives (partition.balance.RESTART_OBJECTIVES, which imports torch; tests/test_cli.py
#: checks they agree)
VB_OBJECTIVES = ("auto", "vol", "cut")

EPILOG = """\
graphs: sbm (4000 nodes) or sbm:N (N nodes) is the stochastic block model of
  pyg_sparsecomm.graph.datasets.sbm_graph; rmat:SCALE[:EDGE_FACTOR] is an R-MAT graph with
  2**SCALE nodes (edge factor 8 by default, a = 0.6, b = c = d = 0.4/3 and seed 0 as in
  benchmarks/partition_quality.py, so --seed changes the partition, not the graph).

methods: any method SparsityAwarePartitioner accepts, e.g. random, contiguous, metis,
  hypergraph, stochastic_hypergraph, and each with '+vb' (max-send-volume balancing,
  tuned by --epsilon-balance, --max-total-increase, --vb-restarts and --vb-objective).

options: --option KEY=VALUE goes to every listed method whose signature takes KEY (and it
  is an error if none does); --option METHOD:KEY=VALUE goes to METHOD only ('hypergraph'
  also matches 'hypergraph+vb'), and the partitioner rejects keys that method does not
  take.  VALUE is read as JSON (3, 0.05, true, [10,5], "x"), else as a plain string:
  --option objective=vol --option hypergraph:preset=quality --option fanouts=[10,5]
"""


# graphs ---------------------------------------------------------------------
def _spec_ints(spec: str, fields: str, max_fields: int) -> list[int]:
    values = fields.split(":")
    if len(values) > max_fields or not all(v.isdigit() and int(v) > 0 for v in values):
        raise SystemExit(f"bad graph {spec!r}: expected {GRAPH_SPECS}")
    return [int(v) for v in values]


def load_graph(spec: str, root: str | None):
    """The graph named by ``spec`` (see ``GRAPH_SPECS``); ``root`` holds the Planetoid files."""
    path = Path(spec)
    if path.suffix == ".graph":
        if not path.is_file():
            raise SystemExit(f"graph file {spec!r} not found{_fetch_hint(path)}")
        from ..graph.io import read_metis_graph
        return read_metis_graph(path)
    kind, colon, fields = spec.partition(":")
    if kind.lower() == "sbm":
        from ..graph.datasets import sbm_graph
        return sbm_graph(num_nodes=_spec_ints(spec, fields, 1)[0]) if colon else sbm_graph()
    if kind.lower() == "rmat" and colon:
        from ..graph.datasets import rmat_graph
        scale, *edge_factor = _spec_ints(spec, fields, 2)
        return rmat_graph(scale, edge_factor[0] if edge_factor else 8, 0.6, 0.4 / 3, 0.4 / 3)
    if spec in ("Cora", "CiteSeer", "PubMed"):
        if root is None:
            raise SystemExit(f"--graph {spec} needs --root DIR holding {spec}/raw (Planetoid files)")
        from ..launch.datasets import load_dataset
        try:
            return load_dataset(spec, root, barrier=False)
        except FileNotFoundError as e:
            raise SystemExit(str(e)) from None
    raise SystemExit(f"unknown graph {spec!r}: use {GRAPH_SPECS}")


def _fetch_hint(path: Path) -> str:
    """How to get a missing graph file: the libmetis meshes come from benchmarks/fetch_meshes.sh."""
    if path.name in MESHES:
        return (f": the libmetis meshes ({', '.join(MESHES)}) are not in the repository; "
                f"'bash benchmarks/fetch_meshes.sh' puts them in benchmarks/graphs/")
    return " (a METIS .graph file; or use a built-in graph: sbm, rmat:SCALE)"


# arguments ------------------------------------------------------------------
def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def assign_options(methods: list[str], options: list[Option]) -> dict[str, dict[str, Any]]:
    """Per method, the options it gets: scoped ones to their method, the others where they fit."""
    from ..partition.methods import base_method, method_options
    per_method: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for target, key, value in options:
        if target is not None:
            matches = [m for m in methods if target in (m, base_method(m))]
            if not matches:
                raise SystemExit(f"--option {target}:{key}: method {target!r} is not in --methods {methods}")
        else:
            matches = [m for m in methods if key in method_options(m)]
            if not matches:
                known = {m: method_options(m) for m in methods}
                raise SystemExit(f"--option {key}: none of --methods takes option {key!r}; "
                                 f"their options: {known}")
        for m in matches:
            per_method[m][key] = value
    return per_method


def _partitioner(num_parts: int, method: str, options: dict[str, Any],
                 common: dict[str, Any]) -> "SparsityAwarePartitioner":
    # The partitioner's own validation gives the message (unknown method, option, budget).
    from ..partition import SparsityAwarePartitioner
    try:
        return SparsityAwarePartitioner(num_parts, method, **common, **options)
    except (TypeError, ValueError) as e:
        raise SystemExit(f"method {method!r}: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pyg_sparsecomm partition-stats", description=__doc__,
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", required=True, help=GRAPH_SPECS)
    p.add_argument("--root", help="Planetoid root directory")
    p.add_argument("--parts", type=_positive_ints, default=[4, 16, 64], help="comma-separated numbers of parts")
    p.add_argument("--methods", default="random,contiguous,metis",
                   help="comma-separated partitioning methods, each optionally with '+vb' (see below)")
    p.add_argument("--option", type=parse_option, action="append", default=[], metavar="[METHOD:]KEY=VALUE",
                   help="method option, repeatable (see below)")
    p.add_argument("--seed", type=int, default=0, help="seed of every method (the random baseline too)")
    p.add_argument("--epsilon-balance", type=float, help="+vb: compute imbalance allowed (default 0.03)")
    p.add_argument("--max-total-increase", type=float,
                   help="+vb: allowed rise of the total volume, a fraction (default 0.1)")
    p.add_argument("--vb-restarts", type=int, help="+vb: send-balanced restarts (default 4)")
    p.add_argument("--vb-objective", choices=VB_OBJECTIVES,
                   help="+vb: METIS objective of the restarts (default auto: vol unless the graph has hubs)")
    p.add_argument("--bytes", type=int, metavar="WIDTH",
                   help="add per-SpMM byte columns for dense operands of WIDTH columns")
    p.add_argument("--element-size", type=int, default=4, help="bytes per element for --bytes (default 4)")
    p.add_argument("--format", choices=("table", "tsv", "markdown"), default="table",
                   help="aligned table (default), tab-separated values or a Markdown table")
    p.add_argument("--heatmap", metavar="FILE",
                   help="save the P×P volume matrix of the last method and P (.png, .svg, .pdf; needs matplotlib)")
    p.add_argument("--bars", metavar="FILE",
                   help="save the rows each rank sends and receives, last method and P (.png, .svg, .pdf)")
    return p


# output ---------------------------------------------------------------------
# (header, key of the row dict, format, minimum width of the aligned table).
Column = tuple[str, str, str, int]
_COLUMNS: list[Column] = [
    ("P", "num_parts", "d", 5), ("method", "method", "s", 12), ("total", "total_rows", "d", 10),
    ("max send", "max_rows_sent", ".0f", 9), ("max recv", "max_rows_received", ".0f", 9),
    ("max msgs out", "max_messages_sent", ".0f", 0), ("max msgs in", "max_messages_received", ".0f", 0),
    ("avg msgs", "avg_messages_sent", ".1f", 0), ("imbal.", "compute_imbalance", ".3f", 7)]
_BYTE_COLUMNS: list[Column] = [("total B", "total_bytes", "d", 12), ("max send B", "max_bytes_sent", ".0f", 12),
                               ("max recv B", "max_bytes_received", ".0f", 12)]
# Relative to the random partition of the same P (keys filled in by _row).
_RATIO_COLUMNS: list[Column] = [
    ("total/rnd", "total_rows/rnd", ".3f", 0), ("maxsend/rnd", "max_rows_sent/rnd", ".3f", 0),
    ("maxrecv/rnd", "max_rows_received/rnd", ".3f", 0), ("maxmsgs/rnd", "max_messages_sent/rnd", ".3f", 0),
    ("seconds", "seconds", ".2f", 8)]


class _Printer:
    """Streams rows as they are computed (large P can take minutes per method)."""

    def __init__(self, fmt: str, with_bytes: bool, method_width: int) -> None:
        self.fmt = fmt
        self.left = _COLUMNS + (_BYTE_COLUMNS if with_bytes else [])
        self.columns = self.left + _RATIO_COLUMNS
        self.widths = [max(len(h), w, method_width if k == "method" else 0) for h, k, _, w in self.columns]

    def note(self, text: str) -> None:
        print(f"# {text}" if self.fmt == "tsv" else text)
        if self.fmt == "markdown":
            print()  # a paragraph, not the table's first line

    def _line(self, cells: list[str]) -> str:
        if self.fmt == "tsv":
            return "\t".join(cells)
        if self.fmt == "markdown":
            return "| " + " | ".join(cells) + " |"
        cells = [c.rjust(w) for c, w in zip(cells, self.widths, strict=False)]
        n = len(self.left)  # '|' separates the raw figures from those relative to random
        return " ".join(cells[:n]) + " | " + " ".join(cells[n:])

    def header(self) -> None:
        print(self._line([h for h, _, _, _ in self.columns]))
        if self.fmt == "markdown":
            print("|" + "|".join(":---" if k == "method" else "---:" for _, k, _, _ in self.columns) + "|")

    def row(self, row: dict[str, Any]) -> None:
        print(self._line([format(row[k], f) for _, k, f, _ in self.columns]))


def _row(method: str, d: dict[str, Any], base: dict[str, Any], seconds: float) -> dict[str, Any]:
    row = dict(d, method=method, seconds=seconds)
    for key in ("total_rows", "max_rows_sent", "max_rows_received", "max_messages_sent"):
        row[f"{key}/rnd"] = d[key] / base[key] if base[key] else float("nan")
    return row


def _run(data, parts: list[int], methods: list[str], options: dict[str, dict[str, Any]],
         common: dict[str, Any], width: int | None, element_size: int) -> Iterator[tuple[dict, "CommStats"]]:
    """Yields ``(table row, CommStats)`` for every P and method."""
    for P in parts:
        try:
            baseline = _partitioner(P, "random", {}, common)(data).comm_stats.as_dict()
            for method in methods:
                t0 = time.perf_counter()
                stats = _partitioner(P, method, options[method], common)(data).comm_stats
                yield _row(method, stats.as_dict(width, element_size), baseline, time.perf_counter() - t0), stats
        except (ValueError, ImportError) as e:  # e.g. more parts than nodes, a missing backend
            raise SystemExit(f"P={P}: {e}") from None


def main(argv: list[str]) -> int:
    """Runs ``partition-stats`` with the arguments after the command's name."""
    args = build_parser().parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    if not methods:
        raise SystemExit("--methods names no method")
    common = {"seed": args.seed}
    common.update({k: v for k, v in (("epsilon_balance", args.epsilon_balance),
                                     ("max_total_increase", args.max_total_increase),
                                     ("vb_restarts", args.vb_restarts),
                                     ("vb_objective", args.vb_objective)) if v is not None})
    if args.bytes is not None and (args.bytes < 0 or args.element_size < 1):
        raise SystemExit(f"--bytes needs WIDTH >= 0 and --element-size >= 1, got {args.bytes}, {args.element_size}")
    for m in methods:  # unknown methods first, before options are matched to them
        _partitioner(1, m, {}, common)
    options = assign_options(methods, args.option)
    for m in methods:  # then every option against its method, before the graph is loaded
        _partitioner(1, m, options[m], common)

    data = load_graph(args.graph, args.root)
    out = _Printer(args.format, args.bytes is not None, max(map(len, methods)))
    out.note(f"graph {args.graph}: {data.num_nodes} nodes, {data.edge_index.size(1)} edges")
    out.header()
    last = None
    for row, stats in _run(data, args.parts, methods, options, common, args.bytes, args.element_size):
        out.row(row)
        last = stats
    if last is not None:
        _plot(args, last, out)
    return 0


def _plot(args: argparse.Namespace, stats: "CommStats", out: "_Printer") -> None:
    """The figures asked for, of the last method and P (``--heatmap``, ``--bars``)."""
    from . import plots
    figures = [("heatmap", lambda path, title: plots.volume_heatmap(stats.volume, path, title),
                "P×P rows sent per SpMM, row = sender"),
               ("bars", lambda path, title: plots.volume_bars(stats.rows_sent, stats.rows_received, path, title),
                "rows sent and received per rank per SpMM")]
    for option, draw, what in figures:
        path = getattr(args, option)
        if not path:
            continue
        try:
            draw(path, f"{what} (P = {stats.num_parts})")
        except (ImportError, ValueError) as e:
            raise SystemExit(f"--{option} {path}: {e}") from None
        out.note(f"wrote {path} ({what})")
