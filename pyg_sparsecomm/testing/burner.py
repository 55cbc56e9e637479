"""``python -m pyg_sparsecomm.testing.burner [--processes N] -- COMMAND ...``: run a command on a
busy machine, beside one busy-loop process per core.

The suite must pass on a machine busy with other work (issue 55: two tests failed only there).
This starts ``N`` burners (default: the cores this process may use), each spinning in pure
Python, runs ``COMMAND``, stops the burners however it ends (also on Ctrl-C) and exits with its
exit code (``128 + signal`` for a command killed by a signal).  A burner whose parent is gone
(this process killed with ``SIGKILL``) stops by itself within a fraction of a second.  The
burners' process ids are in the command's environment, ``PYG_SPARSECOMM_BURNERS`` (comma-separated).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

#: a burner: spins, and ends once its parent (``argv[1]``: a parent killed before the burner's first
#: line ran is no longer its parent then) is gone; it checks every million iterations
BURN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    for _ in range(1_000_000): pass"
#: the environment variable holding the burners' process ids
BURNERS_ENV = "PYG_SPARSECOMM_BURNERS"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_beside_burners(command: list[str], processes: int | None = None) -> int:
    """Runs ``command`` beside ``processes`` busy-loop processes and returns its exit code.

    Args:
        command (list[str]): the program and its arguments.
        processes (int, optional): burners to start (``None``: :func:`usable_cores`). (default: :obj:`None`)
    """
    count = usable_cores() if processes is None else int(processes)
    burners = [subprocess.Popen([sys.executable, "-c", BURN, str(os.getpid())]) for _ in range(count)]
    started = time.monotonic()
    try:
        env = {**os.environ, BURNERS_ENV: ",".join(str(b.pid) for b in burners)}
        print(f"burner: {count} busy process(es) beside: {' '.join(command)}", file=sys.stderr, flush=True)
        code = subprocess.call(command, env=env)
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
    print(f"burner: exit code {code} after {time.monotonic() - started:.0f} s beside {count} burner(s) "
          f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})", file=sys.stderr, flush=True)
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    """The command line: ``[--processes N] -- COMMAND ...``; returns the command's exit code."""
    parser = argparse.ArgumentParser(prog="python -m pyg_sparsecomm.testing.burner",
                                     description="run COMMAND beside one busy-loop process per core")
    parser.add_argument("--processes", type=int, default=None, help="burners to start (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after '--', e.g. -- python -m pytest -q tests")
    if args.processes is not None and args.processes < 0:
        parser.error(f"--processes must be 0 or more, got {args.processes}")
    return run_beside_burners(command, args.processes)


if __name__ == "__main__":
    sys.exit(main())
