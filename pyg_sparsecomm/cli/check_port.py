"""``python -m pyg_sparsecomm check-port ORIGINAL.py PORT.py``: does a port compute what its
single-process PyG script computes?

Runs ORIGINAL.py unmodified in one process and PORT.py under ``torchrun --standalone
--nproc-per-node P`` (gloo on CPU, one thread per process unless ``OMP_NUM_THREADS`` says
otherwise), both from the same seed with dropout switched off, records every loss passed to
``backward()`` and every parameter after every ``optimizer.step()`` on every rank
(:mod:`~pyg_sparsecomm.porting.record`), and names the first difference
(:mod:`~pyg_sparsecomm.porting.compare`).  Where the original's ``NeighborLoader`` asks PyG for
draws no port makes (``replace=True``, ...), both scripts train on the package's first batch and
only that step is compared: its loss, the gradients it takes, the parameters after it.  Exit
status: 0 equal, 1 different, 3 a script crashed (its line is named), 4 not comparable past the
initial parameters (PyG's own loader on a heterogeneous graph).
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

EPILOG = """\
example:
  python -m pyg_sparsecomm check-port gcn.py gcn_distributed.py --steps 5 -- --root data/Planetoid

what is compared: a loss a port computes with distributed_loss is the whole graph's loss on every rank
and compares with the single process's loss; a mini-batch port drawing the same global batches
(DistributedNeighborLoader against PyG's NeighborLoader, which the check gives the package's batches)
compares step by step; where the original's NeighborLoader draws what no port draws (replace=True,
disjoint=True, ...), both train on the package's first batch and that step alone is compared (its loss,
gradients and parameters after it).  Randomness both scripts draw from torch's seeded generator (initial parameters,
torch.randperm, DataLoader shuffles) agrees where the port draws it as the single process does.
"""
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pyg_sparsecomm check-port", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("original", help="the single-process PyG script (run as: python ORIGINAL ARGS)")
    p.add_argument("port", help="its port (run as: torchrun --nproc-per-node P PORT ARGS)")
    p.add_argument("--nproc", type=int, default=2, help="processes of the port (default: 2)")
    p.add_argument("--steps", type=int, help="compare the first N optimizer steps, then stop both (default: all)")
    p.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance (default: 1e-5)")
    p.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance (default: 1e-6)")
    p.add_argument("--seed", type=int, default=0, help="torch's, random's and NumPy's seed in every process")
    p.add_argument("--timeout", type=float, default=900, help="seconds each script may run (default: 900)")
    p.add_argument("--keep", metavar="DIR", help="write the recordings and the scripts' output to DIR")
    p.add_argument("--show-output", action="store_true", help="print the scripts' output as they run")
    return p


#: ``runner(role, args, script_args, env)``: runs the original (``role`` ``"original"``, one process) or
#: the port (``"port"``, ``args.nproc`` processes) with the recorder and ``env``; a line naming what went
#: wrong (a timeout), else ``None``.  :func:`torchrun_runner` by default (tests pass another)
Runner = Callable[[str, argparse.Namespace, list[str], dict[str, str]], "str | None"]


def _environment(directory: Path, role: str, args: argparse.Namespace, steps: int | None) -> dict[str, str]:
    env = dict(os.environ, PYG_SPARSECOMM_CHECK_DIR=str(directory), PYG_SPARSECOMM_CHECK_ROLE=role,
               PYG_SPARSECOMM_CHECK_SEED=str(args.seed))
    env.pop("PYG_SPARSECOMM_CHECK_STEPS", None)
    if steps is not None:
        env["PYG_SPARSECOMM_CHECK_STEPS"] = str(steps)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return env


def _run(command: list[str], env: dict[str, str], log: Path, args: argparse.Namespace) -> int | None:
    """Runs ``command`` (its output to ``log``, or shown); its status, ``None`` on timeout."""
    with open(log, "w") as out:
        target = None if args.show_output else out
        process = subprocess.Popen(command, env=env, stdout=target, stderr=subprocess.STDOUT if target else None,
                                   start_new_session=True)
        try:
            return process.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None


def _tail(log: Path, lines: int = 15) -> str:
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join("    | " + line for line in text[-lines:])


def torchrun_runner(role: str, args: argparse.Namespace, script_args: list[str], env: dict[str, str]) -> str | None:
    """The original as ``python ORIGINAL``, the port under ``torchrun --standalone --nproc-per-node P``,
    each through :mod:`~pyg_sparsecomm.porting.record` (a :data:`Runner`)."""
    record = [sys.executable, "-m", "pyg_sparsecomm.porting.record"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
                "--no-python", *record]
    command = [*record, args.original] if role == "original" else [*torchrun, args.port]
    log = Path(env["PYG_SPARSECOMM_CHECK_DIR"]) / f"{role}.log"
    if _run([*command, *script_args], env, log, args) is None:
        return f"{role} ran past --timeout {args.timeout:g} s and was stopped"
    return None


def record_both(directory: Path, args: argparse.Namespace, script_args: list[str],
                runner: Runner = torchrun_runner) -> list[str]:
    """Runs the original, then the port (for its first step only where the original's batches
    could only be fixed for one: :func:`_notes`); the lines to report about a run that timed out."""
    problems, steps = [], args.steps
    for role in ("original", "port"):
        problem = runner(role, args, script_args, _environment(directory, role, args, steps))
        if problem:
            problems.append(problem)
        if role == "original" and _notes(directory)[2]:
            steps = 1
    return problems


def _switched_off(directory: Path) -> str:
    """The dropout functions switched off that the scripts called, with their calls."""
    import json
    calls: dict[str, int] = {}
    for path in sorted(directory.glob("*-rank0.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "end":
                for name, n in record["dropout_calls"].items():
                    calls[name] = max(calls.get(name, 0), n)
    used = ", ".join(f"{name} ({n} calls)" for name, n in sorted(calls.items()))
    return used or "none called (dropout, dropout1d/2d/3d, alpha_dropout, dropout_edge/adj/node/path patched)"


def _notes(directory: Path) -> tuple[list[str], list[str], list[str]]:
    """The stand-ins the original got, what it drew that no port reproduces, and what it drew that
    only its first step can be compared on (:mod:`~pyg_sparsecomm.porting.stand_ins`)."""
    import json
    notes: list[str] = []
    unreproducible: list[str] = []
    first_step_only: list[str] = []
    for path in sorted(directory.glob("original-rank0.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "end":
                notes += record["notes"]
                unreproducible += record["unreproducible"]
                first_step_only += record.get("first_step_only", [])
    return notes, unreproducible, first_step_only


def _header(directory: Path, args: argparse.Namespace, notes: list[str]) -> None:
    print(f"check-port: {args.original} (1 process) against {args.port} (torchrun, {args.nproc} processes, gloo)")
    print(f"  seed {args.seed} in every process; dropout switched off: {_switched_off(directory)}")
    for note in notes:
        print(f"  {note}")
    print(f"  tolerance: rtol {args.rtol:g}, atol {args.atol:g} (a loss: |a - b| <= atol + rtol |a|; "
          f"a parameter or gradient: ||a - b|| <= atol + rtol ||a||; a = the original's)")


def report(directory: Path, args: argparse.Namespace, seconds: float, problems: list[str]) -> int:
    """Prints the verdict; returns the exit status."""
    from ..porting.compare import CRASHED, EQUAL, INCOMPARABLE, Tolerance, compare
    notes, unreproducible, first_step_only = _notes(directory)
    limit = 0 if unreproducible else 1 if first_step_only else None
    verdict, steps = compare(directory, args.nproc, Tolerance(args.rtol, args.atol), limit)
    _header(directory, args, notes + [f"not reproducible: {u}; compared the initial parameters only"
                                      for u in unreproducible]
            + [f"not reproducible: {u}; both scripts train on the package's first batch (fixed): compared "
               "its step only (loss, gradients, parameters after it)" for u in first_step_only])
    for line in problems + verdict.lines:
        print(line)
    if verdict.status == CRASHED:
        for role in ("original", "port"):
            if any(line.startswith(role) for line in verdict.lines):
                print(f"  the {role}'s last output:\n{_tail(directory / f'{role}.log')}")
    status = verdict.status if not problems or verdict.status != EQUAL else CRASHED
    if status == EQUAL and unreproducible:
        status = INCOMPARABLE
    if status == EQUAL and first_step_only:
        print(f"equal: the first step only (one fixed batch): its loss, the gradients it takes and the parameters "
              f"after it equal to rtol {args.rtol:g} (atol {args.atol:g}) on {args.nproc} ranks ({seconds:.1f} s)")
    elif status == EQUAL:
        print(f"equal: every loss and parameter equal to rtol {args.rtol:g} (atol {args.atol:g}) for {steps} steps "
              f"on {args.nproc} ranks ({seconds:.1f} s)")
    else:
        print(f"not equal (exit status {status}, {seconds:.1f} s)")
    return status


def check(args: argparse.Namespace, script_args: list[str], runner: Runner = torchrun_runner) -> int:
    """Records both scripts (with ``runner``) in ``args.keep`` or a temporary folder, prints the
    verdict; returns the exit status."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="check-port-") as scratch:
        directory = Path(args.keep or scratch)
        directory.mkdir(parents=True, exist_ok=True)
        problems = record_both(directory, args, script_args, runner)
        return report(directory, args, time.perf_counter() - start, problems)


def main(argv: list[str]) -> int:
    """Runs ``check-port`` with the arguments after the command's name (script arguments after ``--``)."""
    script_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, script_args = argv[:at], argv[at + 1:]
    args = build_parser().parse_args(argv)
    for path in (args.original, args.port):
        if not Path(path).is_file():
            print(f"check-port: no such script: {path}", file=sys.stderr)
            return 2
    return check(args, script_args)
