"""Speed of the row codecs of the compressed halo exchange (issues #16, #24, ``comm/quantize.py``).

Encode and decode of float32 rows of width 64 and 256 per precision, today's codec against the
codec of commit b62635a (before the compiled CPU pass of ``comm/quantize_cpu.py``: the integer
formats coded by blocks of torch ops), loaded from ``git show`` into a temporary module.  Rows
``--rows`` at width 64 and the same bytes at width 256 (a quarter of the rows).  ``"int8 +
gather"`` / ``"int4 + gather"``: encoding the rows to send, a random half of twice as many rows
picked by an ascending index (as the exchange's ``x[send_index]``): ``encode(x, index=)`` now,
``index_select`` then encode before.  The two codecs are timed alternately, repetition by repetition, so they see the
same machine state.  Median of ``--reps`` repetitions, 1 torch thread; GB/s counts the float32
rows coded (``n * width * 4`` bytes) per second.  The load average is noted (the machine may be
shared).

``--epochs``: the epoch the codec is for, SBM-100k GCN (``halo_compression.py``'s graph and model)
at P = 2 gloo ranks of 1 thread, METIS: exact, int8 and int4 with today's codec and int8 with the
codec of b62635a, trained side by side in one job, ``--rounds`` interleaved rounds of
``--round-epochs`` epochs after 2 warm-up epochs (A B C D A B C D ...); median wall and CPU time
per epoch of rank 0.

    python benchmarks/halo_codec.py [--rows 20000 100000] [--reps 25]
    python benchmarks/halo_codec.py --epochs [--rounds 7] [--round-epochs 3]
"""
import argparse
import contextlib
import importlib.util
import itertools
import os
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from _common import HERE, median, print_table, write_table_section

from pyg_sparsecomm.comm import quantize

BEFORE = "b62635a"
#: precision, whether the rows are gathered by an index
CASES = [("bf16", False), ("fp16", False), ("int8", False), ("int4", False), ("int8", True), ("int4", True)]
WIDTHS = [64, 256]


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


def seconds(fn) -> tuple[float, float]:
    """Wall and CPU (this thread's) seconds of ``fn()``: on a shared machine the other load
    inflates the CPU time much less than the wall time."""
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - wall, time.thread_time() - cpu


def gathering(codec):
    """``codec.encode`` with the ``index`` argument of today's codec (older codecs: the rows
    gathered by ``index_select`` first, as the exchange did)."""
    if codec is quantize:
        return codec.encode
    return lambda rows, precision, generator=None, index=None: codec.encode(
        rows if index is None else rows.index_select(0, index), precision, generator)


def measure(codecs: dict, rows: torch.Tensor, precision: str, reps: int, index=None) -> dict:
    """Median wall and CPU seconds of encode (of ``rows[index]``) and decode of every codec, timed
    alternately: ``{(codec, op, "wall" | "cpu"): seconds}``."""
    width, encoders = rows.size(1), {name: gathering(codec) for name, codec in codecs.items()}
    payload = {name: encoders[name](rows, precision, index=index) for name in codecs}  # warm-up
    times: dict = {(name, op): [] for name in codecs for op in ("encode", "decode")}
    for _ in range(reps):
        for name, codec in codecs.items():
            times[(name, "encode")].append(seconds(lambda e=encoders[name]: e(rows, precision, index=index)))
            times[(name, "decode")].append(seconds(lambda c=codec, n=name: c.decode(payload[n], width, precision)))
    return {(*key, clock): median([t[i] for t in values]) for key, values in times.items()
            for i, clock in enumerate(("wall", "cpu"))}


@contextlib.contextmanager
def codec_in_use(codec):
    """The exchanges encode and decode with ``codec``'s functions meanwhile (``encode_rows`` and
    ``decode_rows`` look ``encode``/``decode`` up in ``comm.quantize`` at every call)."""
    saved = quantize.encode, quantize.decode
    quantize.encode, quantize.decode = gathering(codec), codec.decode
    try:
        yield
    finally:
        quantize.encode, quantize.decode = saved


def _timed_epoch(run, wall: list, cpu: list) -> None:
    """One epoch of ``run``: its wall time and this process's CPU time (all threads: gloo's too)."""
    w0, c0 = time.perf_counter(), time.process_time()
    run.epoch()
    wall.append(time.perf_counter() - w0)
    cpu.append(time.process_time() - c0)


def _epoch_job(rank, world_size, data, rounds, epochs, warmup):
    from _halo_training import OPTIONS, Run

    from pyg_sparsecomm import shard

    local, classes = shard(data), int(data.y.max()) + 1
    variants = {"exact": ("exact", quantize), "int8 now": ("int8", quantize), "int4 now": ("int4", quantize),
                f"int8 {BEFORE}": ("int8", codec_at(BEFORE))}
    runs = {name: Run("GCN", local, classes, OPTIONS[option], 0) for name, (option, _) in variants.items()}
    wall: dict = {name: [] for name in runs}
    cpu: dict = {name: [] for name in runs}
    for name, run in runs.items():
        with codec_in_use(variants[name][1]):
            for _ in range(warmup):
                run.epoch()
    for _ in range(rounds):
        for name, run in runs.items():
            with codec_in_use(variants[name][1]):
                for _ in range(epochs):
                    _timed_epoch(run, wall[name], cpu[name])
    return wall, cpu


def epoch_times(args) -> None:
    from _halo_training import SBM_NAME
    from halo_compression import partitioned

    from pyg_sparsecomm.testing import launch

    data = partitioned(SBM_NAME, 2)
    loads = [os.getloadavg()[0]]
    wall, cpu = launch(_epoch_job, 2, data, args.rounds, args.round_epochs, 2, timeout=3600)[0]
    loads.append(os.getloadavg()[0])
    headers = ["graph", "model", "P", "halos", "median epoch ms (wall)", "vs exact", "median epoch CPU ms",
               "vs exact"]
    table = [[SBM_NAME, "GCN", 2, name, f"{median(wall[name]) * 1e3:.1f}",
              f"{median(wall[name]) / median(wall['exact']):.2f}x", f"{median(cpu[name]) * 1e3:.1f}",
              f"{median(cpu[name]) / median(cpu['exact']):.2f}x"] for name in wall]
    print_table(headers, table)
    print(f"load average (1 min) before / after: {loads[0]:.2f} / {loads[1]:.2f}")
    notes = (f"\n{args.rounds} interleaved rounds of {args.round_epochs} epochs after 2 warm-up epochs per variant, "
             f"medians of rank 0, 2 gloo ranks of 1 thread (loopback); 'int8 {BEFORE}': the codec of {BEFORE} "
             f"swapped into the same job.  CPU ms: the rank's process CPU time per epoch (all its threads, gloo's "
             f"included), which the machine's other load inflates less than the wall time.  Load average (1 min) "
             f"before / after: {loads[0]:.2f} / {loads[1]:.2f} on {os.cpu_count()} cores (shared machine).")
    write_table_section("halo_codec_epoch", "Int8 epoch vs exact epoch (issue #24)", "halo_codec.py --epochs",
                        notes, headers, table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--epochs", action="store_true", help="time SBM-100k GCN epochs instead of the codec")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-epochs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.epochs:
        epoch_times(args)
        return
    codecs = {BEFORE: codec_at(BEFORE), "now": quantize}
    quantize.encode(torch.ones(1, 1), "int8")  # builds (or loads) the compiled pass before the timing
    load = os.getloadavg()[0]
    headers = ["rows", "width", "precision"] + [
        f"{op} {what}" for op in ("encode", "decode")
        for what in (f"ms {BEFORE}", "ms now", f"GB/s {BEFORE}", "GB/s now", f"CPU GB/s {BEFORE}", "CPU GB/s now",
                     "CPU speed-up")]
    table = []
    for n64, width in itertools.product(args.rows, WIDTHS):
        n = n64 * 64 // width
        generator = torch.Generator().manual_seed(0)
        rows, many = torch.randn(n, width, generator=generator), torch.randn(2 * n, width, generator=generator)
        index = torch.randperm(2 * n, generator=generator)[:n].sort().values  # ascending, as a plan's send_index
        gigabytes = rows.numel() * 4 / 1e9
        for precision, gathered in CASES:
            t = measure(codecs, many, precision, args.reps, index) if gathered else \
                measure(codecs, rows, precision, args.reps)
            line = [n, width, precision + (" + gather" if gathered else "")]
            for op in ("encode", "decode"):
                before, now = t[(BEFORE, op, "wall")], t[("now", op, "wall")]
                cpu_before, cpu_now = t[(BEFORE, op, "cpu")], t[("now", op, "cpu")]
                line += [f"{before * 1e3:.2f}", f"{now * 1e3:.2f}", f"{gigabytes / before:.2f}",
                         f"{gigabytes / now:.2f}", f"{gigabytes / cpu_before:.2f}", f"{gigabytes / cpu_now:.2f}",
                         f"{cpu_before / cpu_now:.2f}x"]
            table.append(line)
    load = max(load, os.getloadavg()[0])
    print_table(headers, table)
    print(f"load average (1 min, highest of start and end): {load:.2f}")
    notes = (f"\nfloat32 rows, median of {args.reps} repetitions, 1 torch thread, timed alternately with the codec "
             f"of {BEFORE} (the torch ops); '+ gather': encoding rows picked by an index from twice as many "
             f"(a random half, ascending; now in the encoding pass, before index_select first); ms and GB/s "
             f"(float32 rows coded per second): medians of the wall time; CPU GB/s and speed-up: of the "
             f"thread's CPU time, which the machine's other load inflates less.  Load average (1 min) during "
             f"the run: {load:.2f} on {os.cpu_count()} cores.")
    write_table_section("halo_codec", "Halo codec speed (issues #16, #24)", "halo_codec.py", notes, headers, table)


if __name__ == "__main__":
    main()
