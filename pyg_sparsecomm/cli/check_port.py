"""``python -m pyg_sparsecomm check-port ORIGINAL.py PORT.py``: does a port compute what its
single-process PyG script computes?

Runs ORIGINAL.py unmodified in one process and PORT.py under ``torchrun --standalone
--nproc-per-node P`` (gloo on CPU, one thread per process unless ``OMP_NUM_THREADS`` says
otherwise), both from the same seed with dropout switched off, records every loss passed to
``backward()`` and every parameter after every ``optimizer.step()`` on every rank
(:mod:`~pyg_sparsecomm.porting.record`), and names the first difference
(:mod:`~pyg_sparsecomm.porting.compare`).  Exit status: 0 equal, 1 different, 3 a script
crashed (its line is named), 4 not comparable past the initial parameters.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EPILOG = """\
example:
  python -m pyg_sparsecomm check-port gcn.py gcn_distributed.py --steps 5 -- --root data/Planetoid

what is compared: a loss a port computes with distributed_loss is the whole graph's loss on every rank
and compares with the single process's loss; a mini-batch port drawing the same global batches
(DistributedNeighborLoader against PyG's NeighborLoader, which the check gives the package's batches)
compares step by step.  Randomness both scripts draw from torch's seeded generator (initial parameters,
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


def _environment(directory: Path, role: str, args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ, PYG_SPARSECOMM_CHECK_DIR=str(directory), PYG_SPARSECOMM_CHECK_ROLE=role,
               PYG_SPARSECOMM_CHECK_SEED=str(args.seed))
    if args.steps is not None:
        env["PYG_SPARSECOMM_CHECK_STEPS"] = str(args.steps)
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


def record_both(directory: Path, args: argparse.Namespace, script_args: list[str]) -> list[str]:
    """Runs the original, then the port; the lines to report about a run that timed out."""
    record = [sys.executable, "-m", "pyg_sparsecomm.porting.record"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
                "--no-python", sys.executable, "-m", "pyg_sparsecomm.porting.record"]
    problems = []
    for role, command in (("original", [*record, args.original]), ("port", [*torchrun, args.port])):
        status = _run([*command, *script_args], _environment(directory, role, args), directory / f"{role}.log", args)
        if status is None:
            problems.append(f"{role} ran past --timeout {args.timeout:g} s and was stopped")
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


def _notes(directory: Path) -> tuple[list[str], list[str]]:
    """The stand-ins the original got, and what it drew that no port reproduces."""
    import json
    notes, unreproducible = [], []
    for path in sorted(directory.glob("original-rank0.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "end":
                notes += record["notes"]
                unreproducible += record["unreproducible"]
    return notes, unreproducible


def report(directory: Path, args: argparse.Namespace, seconds: float, problems: list[str]) -> int:
    """Prints the verdict; returns the exit status."""
    from ..porting.compare import CRASHED, EQUAL, INCOMPARABLE, Tolerance, compare
    notes, unreproducible = _notes(directory)
    limit = 0 if unreproducible else None
    verdict, steps = compare(directory, args.nproc, Tolerance(args.rtol, args.atol), limit)
    print(f"check-port: {args.original} (1 process) against {args.port} (torchrun, {args.nproc} processes, gloo)")
    print(f"  seed {args.seed} in every process; dropout switched off: {_switched_off(directory)}")
    for note in notes + [f"not reproducible: {u}; compared the initial parameters only" for u in unreproducible]:
        print(f"  {note}")
    print(f"  tolerance: rtol {args.rtol:g}, atol {args.atol:g} (a loss: |a - b| <= atol + rtol |a|; "
          f"a parameter: ||a - b|| <= atol + rtol ||a||; a = the original's)")
    for line in problems + verdict.lines:
        print(line)
    if verdict.status == CRASHED:
        for role in ("original", "port"):
            if any(line.startswith(role) for line in verdict.lines):
                print(f"  the {role}'s last output:\n{_tail(directory / f'{role}.log')}")
    status = verdict.status if not problems or verdict.status != EQUAL else CRASHED
    if status == EQUAL and unreproducible:
        status = INCOMPARABLE
    if status == EQUAL:
        print(f"equal: every loss and parameter equal to rtol {args.rtol:g} (atol {args.atol:g}) for {steps} steps "
              f"on {args.nproc} ranks ({seconds:.1f} s)")
    else:
        print(f"not equal (exit status {status}, {seconds:.1f} s)")
    return status


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
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="check-port-") as scratch:
        directory = Path(args.keep or scratch)
        directory.mkdir(parents=True, exist_ok=True)
        problems = record_both(directory, args, script_args)
        return report(directory, args, time.perf_counter() - start, problems)
