"""Speed of the row codecs of the compressed halo exchange (issue #16, ``comm/quantize.py``).

Encode and decode of ``n x 64`` float32 rows per precision, today's codec against the codec of
commit 522cd4e (before the speed-up: float32 ``torch.rand`` per value, ``floor_``, a ``cat`` of
header and levels, strided int4 packing), loaded from ``git show`` into a temporary module.  The
two are timed alternately, repetition by repetition, so they see the same machine state.
Median of ``--reps`` repetitions, 1 torch thread; MB/s counts the float32 rows
(``n * 64 * 4`` bytes) per second.  The load average is noted (the machine may be shared).

    python benchmarks/halo_codec.py [--rows 20000 100000] [--reps 25]
"""
import argparse
import importlib.util
import os
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from _common import HERE, median, print_table, write_table_section

from pyg_sparsecomm.comm import quantize

BEFORE = "522cd4e"
PRECISIONS = ["bf16", "fp16", "int8", "int4"]
WIDTH = 64


def codec_at(commit: str):
    """``comm/quantize.py`` of ``commit`` as a module of the installed package (its relative
    imports resolve to today's siblings, which kept their interfaces)."""
    source = subprocess.run(["git", "show", f"{commit}:pyg_sparsecomm/comm/quantize.py"], cwd=HERE.parent,
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"quantize_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"pyg_sparsecomm.comm._quantize_{commit}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(codecs: dict, rows: torch.Tensor, precision: str, reps: int) -> dict:
    """Median encode and decode seconds of every codec, timed alternately."""
    payload = {name: codec.encode(rows, precision) for name, codec in codecs.items()}  # warm-up
    times: dict = {(name, op): [] for name in codecs for op in ("encode", "decode")}
    for _ in range(reps):
        for name, codec in codecs.items():
            times[(name, "encode")].append(seconds(lambda c=codec: c.encode(rows, precision)))
            times[(name, "decode")].append(seconds(lambda c=codec, n=name: c.decode(payload[n], WIDTH, precision)))
    return {key: median(values) for key, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--reps", type=int, default=25)
    args = parser.parse_args()
    torch.set_num_threads(1)
    codecs = {BEFORE: codec_at(BEFORE), "now": quantize}
    load = os.getloadavg()[0]
    headers = ["rows", "precision", f"encode ms {BEFORE}", "encode ms now", "encode speed-up", "encode MB/s now",
               f"decode ms {BEFORE}", "decode ms now", "decode speed-up", "decode MB/s now"]
    table = []
    for n in args.rows:
        rows = torch.randn(n, WIDTH, generator=torch.Generator().manual_seed(0))
        megabytes = rows.numel() * 4 / 1e6
        for precision in PRECISIONS:
            t = measure(codecs, rows, precision, args.reps)
            line = [n, precision]
            for op in ("encode", "decode"):
                before, now = t[(BEFORE, op)], t[("now", op)]
                line += [f"{before * 1e3:.2f}", f"{now * 1e3:.2f}", f"{before / now:.2f}x", f"{megabytes / now:.0f}"]
            table.append(line)
    load = max(load, os.getloadavg()[0])
    print_table(headers, table)
    print(f"load average (1 min, highest of start and end): {load:.2f}")
    notes = (f"\n{WIDTH} float32 values per row, median of {args.reps} repetitions, 1 torch thread, timed "
             f"alternately with the codec of {BEFORE}; MB/s = float32 rows per second.  Load average "
             f"(1 min) during the run: {load:.2f} on {os.cpu_count()} cores.")
    write_table_section("halo_codec", "Halo codec speed (issue #16)", "halo_codec.py", notes, headers, table)


if __name__ == "__main__":
    main()
