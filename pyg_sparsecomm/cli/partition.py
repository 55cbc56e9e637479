"""``python -m pyg_sparsecomm partition``: partition a graph stored as ``.npy`` files, out of core.

Writes one part file per rank plus a manifest (:func:`~pyg_sparsecomm.store.from_files.partition_files`);
each rank of the training job then reads its own file with ``load_shard(DIR)``.  The feature
matrix is never held whole: peak memory is the topology plus one part's rows.
"""
import argparse
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from .options import parse_option

EPILOG = """\
example:
  python -m pyg_sparsecomm partition --edges edges.npy --x x.npy --y y.npy \\
      --mask train_mask=train.npy --mask val_mask=val.npy --mask test_mask=test.npy \\
      --num-parts 64 --method metis --out parts/

  then, in every rank of the job:  local = load_shard("parts/")

--method kaminpar chooses threads, compress, split, fold_leaves and sample_degree from the graph's
size and degrees (large graphs: from 8M edges) and prints what it chose and why; --option NAME=VALUE
keeps an option as given (e.g. --option fold_leaves=false, --option sample_degree=null).
"""


def _named_path(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name.isidentifier() or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH (e.g. train_mask=train.npy), got {text!r}")
    return name, path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pyg_sparsecomm partition", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--edges", required=True, action="append",
                   help=".npy of integer ids, shape [2, E] (row 0 sources, row 1 targets); repeat for chunks")
    p.add_argument("--x", help=".npy node features [N, F]")
    p.add_argument("--y", help=".npy node labels [N]")
    p.add_argument("--mask", type=_named_path, action="append", default=[], metavar="NAME=PATH",
                   help="further node attribute, e.g. train_mask=train.npy (repeatable)")
    p.add_argument("--edge-weight", help=".npy edge weights [E], in the order of --edges")
    p.add_argument("--num-nodes", type=int, help="N (default: the node files' rows, else the largest id + 1)")
    p.add_argument("--num-parts", type=int, required=True, help="number of parts (the world size)")
    p.add_argument("--method", default="metis", help="partitioning method (default: metis)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", type=parse_option, action="append", default=[], metavar="KEY=VALUE",
                   help="method option, repeatable; VALUE read as JSON, else as a string")
    p.add_argument("--dataset", help="dataset name recorded in the manifest")
    p.add_argument("--chunk-mb", type=float, default=64.0, help="MB of node rows read at once (default 64)")
    p.add_argument("--out", required=True, help="partition directory to write")
    return p


def main(argv: list[str]) -> int:
    """Runs ``partition`` with the arguments after the command's name."""
    args = build_parser().parse_args(argv)
    from ..memory import format_bytes, peak_memory_bytes
    from ..store.from_files import partition_files  # torch and the partitioner once the arguments parse

    options = {}
    for method, key, value in args.option:
        if method not in (None, args.method):
            raise SystemExit(f"--option {method}:{key}: the method is {args.method!r}")
        options[key] = value
    masks = dict(args.mask)
    for name in ("x", "y"):
        if name in masks:
            raise SystemExit(f"--mask {name}=...: use --{name}")
    start = time.perf_counter()
    try:
        with _choices_printed():
            manifest = partition_files(args.edges, args.out, args.num_parts, args.method, args.seed, x=args.x,
                                       y=args.y, masks=masks, edge_weight=args.edge_weight, num_nodes=args.num_nodes,
                                       dataset=args.dataset, chunk_bytes=int(args.chunk_mb * 2**20), **options)
    except (ValueError, FileNotFoundError, FileExistsError, ImportError, RuntimeError) as e:
        raise SystemExit(f"partition: {e}") from None
    print(f"wrote {manifest.parent} ({args.num_parts} part files) in {time.perf_counter() - start:.1f} s; "
          f"peak memory {format_bytes(peak_memory_bytes())}")
    return 0


@contextmanager
def _choices_printed() -> Iterator[None]:
    """The options the method chose from the graph (an ``AutomaticOptionsWarning``) printed to stderr
    as ``partition: ...`` lines; other warnings as Python shows them."""
    from ..partition.kaminpar_defaults import AutomaticOptionsWarning

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        try:
            yield
        finally:
            for w in said:
                if issubclass(w.category, AutomaticOptionsWarning):
                    print(f"partition: {w.message}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
